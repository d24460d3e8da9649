"""`secperf run` adds its run to the results store as it finishes, with its labels; a
store it cannot write is a warning, and the run is kept (issue 45)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.netns

TINY = """
name = "tiny-history"
[repeat]
min = 2
max = 2
remeasure = 0
trace_softirq = false
attribution = false
[timing]
duration = "0.4s"
warmup = "0.1s"
[variants.acl]
mechanisms = [{ kind = "acl", rules = 100, layout = "linear" }]
[[workloads]]
kind = "rr"
"""


def secperf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "secperf", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_run_adds_its_run_to_the_store_and_a_broken_store_loses_no_run(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY)
    store = tmp_path / "h.sqlite"
    out = tmp_path / "results"
    gate = ["--expect-history", "within the last 3 runs' range"]
    proc = secperf(
        "run",
        str(scenario),
        "--out",
        str(out),
        "--store",
        str(store),
        "--label",
        "git=abc123",
        *gate,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "history gate: passed" in proc.stdout  # one run: inconclusive, never a failure
    conn = sqlite3.connect(store)
    ((run_dir, labels, scenario_name),) = conn.execute(
        "SELECT run_dir, labels, scenario FROM runs"
    ).fetchall()
    assert scenario_name == "tiny-history" and labels == '{"git": "abc123"}'
    assert Path(run_dir).parent == out.resolve()
    assert conn.execute("SELECT count(*) FROM rows WHERE variant = 'acl'").fetchone()[0] > 0
    history = secperf("history", "tiny-history", "--store", str(store))
    assert history.returncode == 0 and "git=abc123" in history.stdout
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not a database" * 100)
    proc = secperf("run", str(scenario), "--out", str(out), "--store", str(broken))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "the run is kept, but not in the results store" in proc.stderr
    assert len(list(out.iterdir())) == 2
