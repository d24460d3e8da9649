"""docs/ci-example.md's files work: the scripts build both rule sets, the scenario
validates (with `nft -c` when run as root) and its thresholds read as documented."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from secperf.cli import app
from secperf.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "ci"


def test_the_ci_example_builds_and_checks(tmp_path: Path) -> None:
    repo = shutil.copytree(EXAMPLE, tmp_path / "rules-repo")
    build = repo / "ci" / "build-ruleset.sh"
    for name in ("current", "proposed"):
        out = repo / "ci" / "build" / f"{name}.nft"
        subprocess.run([str(build), "worktree", str(out)], check=True)
        text = out.read_text()
        # the site's rules, then the testbed's accepts after them
        assert text.index("policy drop") < text.index("add rule inet site forward")
    sc = load_scenario(repo / "ci" / "review.toml")
    assert list(sc.variants) == ["current", "proposed"]
    assert [e.describe() for e in sc.expect] == [
        f"proposed vs current {m} degradation < 5 %" for m in ("cps", "tps", "throughput")
    ]
    result = CliRunner().invoke(app, ["check", str(repo / "ci" / "review.toml")])
    assert result.exit_code == 0, result.output
    if os.geteuid() == 0:  # nft -c accepted both files
        assert "partly checked" not in result.output
