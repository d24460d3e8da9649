"""README.md in two screens (issue 46): at most 150 lines, the two commands, the rule-set
review on the first screen right after them, an example answer that is what secperf
prints for the kept run it names, and a line for every page in docs/."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console

from secperf.report.terminal import print_report

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text("utf-8")
SCREEN = 50  # lines of a terminal's first screen


def test_readme_is_two_screens() -> None:
    assert len(README.splitlines()) <= 150


def test_the_two_commands_then_the_review_on_the_first_screen() -> None:
    heads = [ln for ln in README.splitlines() if ln.startswith("## ")]
    assert heads[:2] == ["## The two commands", "## Review your own rule set"]
    lines = README.splitlines()
    assert lines.index("## Review your own rule set") < SCREEN
    assert any(ln.startswith("make run ") for ln in lines)
    assert any(ln.startswith("make test ") for ln in lines)  # .ci/run runs `make test`
    assert "make test" in (ROOT / ".ci" / "run").read_text("utf-8")
    assert "secperf review " in "\n".join(lines[:SCREEN])


def test_the_example_answer_is_the_kept_runs_own() -> None:
    run = ROOT / "docs" / "runs" / "quick"
    assert "[docs/runs/quick](docs/runs/quick)" in README
    block = re.search(r"```\n(secperf report — scenario quick\n.*?)```", README, re.S)
    assert block, "the README shows the answer of the kept quick run"
    buf = io.StringIO()
    summary = json.loads((run / "summary.json").read_text("utf-8"))
    meta = json.loads((run / "run.json").read_text("utf-8"))
    print_report(Console(file=buf, width=100), summary, meta, details=False)
    printed = [ln.rstrip() for ln in buf.getvalue().splitlines()]
    shown = [ln for ln in block.group(1).splitlines() if ln and ln != "…"]
    assert [ln for ln in shown if ln not in printed] == [], "paste the answer again"
    assert meta["host"]["cpu_model"] in README  # the machine it ran on is named


def test_every_doc_has_its_line() -> None:
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"- [docs/{page.name}](docs/{page.name}): " in README, page.name
