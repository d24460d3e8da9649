"""The figures the docs quote are the kept runs' own (issue 23: "every figure quoted in
the docs has its kept file"): each side-by-side table in docs/methodology.md is what
`secperf report RUN --paper-markdown` prints for the kept run it names, that run was
taken with the scenario file as it is now (comments aside), and every kept file the
README and docs name exists."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from secperf.report.paper import markdown

ROOT = Path(__file__).resolve().parents[2]
METHODOLOGY = ROOT / "docs" / "methodology.md"
BLOCK = re.compile(r"<!-- paper-table: ([\w-]+) -->(.*?)<!-- /paper-table: \1 -->", re.S)
KEPT = re.compile(r"docs/runs/([\w.-]+)")


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(METHODOLOGY.read_text("utf-8"))]


def _table_lines(text: str) -> list[str]:
    """The table's rows and the counts under it (a block's prose is not compared)."""
    return [ln for ln in text.splitlines() if ln.startswith(("| ", "|---", "- "))]


def _kept_run(body: str) -> Path:
    """The block's kept run: the first docs/runs/ directory its text names."""
    m = KEPT.search(body)
    assert m, "a paper table names the kept run it was generated from (docs/runs/NAME)"
    return ROOT / "docs" / "runs" / m.group(1).rstrip(".")


def test_methodology_has_a_paper_table_per_study() -> None:
    names = {name for name, _ in _blocks()}
    for study in ("seed000", "seed001", "seed002", "seed003", "seed004"):
        assert any(n.startswith(study) for n in names), study


@pytest.mark.parametrize("name,body", _blocks(), ids=[n for n, _ in _blocks()])
def test_paper_table_is_its_kept_runs_own(name: str, body: str) -> None:
    run = _kept_run(body)
    summary = json.loads((run / "summary.json").read_text("utf-8"))
    doc = _table_lines(body)
    if not doc:  # a block that only points at a run (no table copied into the docs)
        return
    assert doc == _table_lines(markdown(summary)), (
        f"docs/methodology.md's table for {name} is not what `secperf report "
        f"{run.relative_to(ROOT)} --paper-markdown` prints: paste that output again"
    )


@pytest.mark.parametrize("name,body", _blocks(), ids=[n for n, _ in _blocks()])
def test_paper_tables_kept_run_is_of_the_scenario_as_it_is(name: str, body: str) -> None:
    if not _table_lines(body):
        return
    run = _kept_run(body)
    kept = json.loads((run / "run.json").read_text("utf-8"))["scenario_text"]
    now = (ROOT / "scenarios" / f"{name}.toml").read_text("utf-8")
    assert tomllib.loads(kept) == tomllib.loads(now), (
        f"scenarios/{name}.toml changed since {run.relative_to(ROOT)} was kept: run it "
        "again on a quiet machine and keep that run"
    )


def test_every_kept_file_the_docs_name_exists() -> None:
    # templates (DATE, …) and the bench targets' own output names are not kept files
    path = re.compile(r"(?:docs|bench)/runs/[\w.*/-]*[\w/]")
    skip = re.compile(r"DATE|\.\.\.|-latest|\*")
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(doc.read_text("utf-8").splitlines(), start=1):
            for p in path.findall(line):
                if not skip.search(p) and not (ROOT / p.rstrip("/.")).exists():
                    missing.append(f"{doc.relative_to(ROOT)}:{n}: {p}")
    assert missing == []
