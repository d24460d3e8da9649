"""The figures the docs quote are the kept runs' own (issue 23: "every figure quoted in
the docs has its kept file"): each side-by-side table in docs/studies/ is what
`secperf report RUN --paper-markdown --paper scenarios/NAME.toml` prints for the kept
run its block names, judged now with today's rules from what the run holds (its summary rows:
the kept runs carry no records.jsonl), never the verdicts stored in it (issue 42); that
run measured what the scenario file measures now (its [[paper]] and [[paper_table]]
rows aside: they judge, and are fixed per table); every block is closed and compared;
and every kept file the README and docs name exists."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secperf.cli import app
from secperf.docgen.blocks import blocks
from secperf.report.kept import measured, paper_summary
from secperf.report.paper import markdown
from secperf.results.records import PrintedRow, SummaryRow
from secperf.results.rundir import RunDir
from secperf.results.upgrade import FORMAT, readable, upgrade

ROOT = Path(__file__).resolve().parents[2]
STUDIES = sorted((ROOT / "docs" / "studies").glob("*.md"))
OPENING = re.compile(r"<!-- paper-table: ([\w-]+)[^>]*-->")
KEPT = re.compile(r"docs/runs/([\w.-]+)")


def _text() -> str:
    return "\n".join(page.read_text("utf-8") for page in STUDIES)


def _blocks() -> list[tuple[str, str]]:
    return [
        (args[0], body)
        for page in STUDIES
        for kind, args, body in blocks(page.read_text("utf-8"))
        if kind == "paper-table"
    ]


def _table_lines(text: str) -> list[str]:
    """The table's rows and the counts under it, or the line saying the run has no
    [[paper]] rows (a block's prose is not compared)."""
    return [ln for ln in text.splitlines() if ln.startswith(("| ", "|---", "- ", "(this run"))]


def _kept_run(body: str) -> Path:
    """The block's kept run: the first docs/runs/ directory its text names."""
    m = KEPT.search(body)
    assert m, "a paper table names the kept run it was generated from (docs/runs/NAME)"
    return ROOT / "docs" / "runs" / m.group(1).rstrip(".")


def test_the_studies_have_a_paper_table_per_study() -> None:
    names = {name for name, _ in _blocks()}
    for study in ("seed000", "seed001", "seed002", "seed003", "seed004"):
        assert any(n.startswith(study) for n in names), study


def test_every_paper_table_block_is_closed() -> None:
    opened = OPENING.findall(_text())
    assert sorted(opened) == sorted(name for name, _ in _blocks()), (
        "a <!-- paper-table: NAME --> block has no <!-- /paper-table: NAME --> closing tag"
    )


def _regenerated(name: str, body: str) -> list[str]:
    run = RunDir.open(_kept_run(body))
    return _table_lines(markdown(paper_summary(run, ROOT / "scenarios" / f"{name}.toml")))


@pytest.mark.parametrize("name,body", _blocks(), ids=[n for n, _ in _blocks()])
def test_paper_table_is_its_kept_runs_own(name: str, body: str) -> None:
    run = _kept_run(body)
    doc = _table_lines(body)
    assert doc, f"the block for {name} holds no generated table"
    assert doc == _regenerated(name, body), (
        f"docs/studies/'s table for {name} is not what `secperf report "
        f"{run.relative_to(ROOT)} --paper-markdown --paper scenarios/{name}.toml` prints: "
        "`make docs` writes it again"
    )


def test_a_kept_runs_stored_verdicts_are_never_read(tmp_path: Path) -> None:
    # the verdicts stored under an older rule (a 2026-11-26 summary stores 34 of 34)
    name, body = next((n, b) for n, b in _blocks() if n == "seed000-virtual-appliance")
    copy = tmp_path / "run"
    shutil.copytree(_kept_run(body), copy)
    summary = json.loads((copy / "summary.json").read_text("utf-8"))
    summary["paper"] = [{**v, "verdict": "agrees"} for v in summary["paper"]]
    (copy / "summary.json").write_text(json.dumps(summary), "utf-8")
    scenario = ROOT / "scenarios" / f"{name}.toml"
    again = _table_lines(markdown(paper_summary(RunDir.open(copy), scenario)))
    assert again == _regenerated(name, body)


@pytest.mark.parametrize("name,body", _blocks(), ids=[n for n, _ in _blocks()])
def test_paper_tables_kept_run_is_of_the_scenario_as_it_is(name: str, body: str) -> None:
    run = _kept_run(body)
    kept = json.loads((run / "run.json").read_text("utf-8"))["scenario_text"]
    now = (ROOT / "scenarios" / f"{name}.toml").read_text("utf-8")
    assert measured(kept) == measured(now), (
        f"scenarios/{name}.toml measures other than {run.relative_to(ROOT)} did: run it "
        "again on a quiet machine and keep that run"
    )


def test_every_kept_file_the_docs_name_exists() -> None:
    # templates (DATE, …) and the bench targets' own output names are not kept files
    path = re.compile(r"(?:docs|bench)/runs/[\w.*/-]*[\w/]")
    skip = re.compile(r"DATE|\.\.\.|-latest|\*")
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
        for n, line in enumerate(doc.read_text("utf-8").splitlines(), start=1):
            for p in path.findall(line):
                if not skip.search(p) and not (ROOT / p.rstrip("/.")).exists():
                    missing.append(f"{doc.relative_to(ROOT)}:{n}: {p}")
    assert missing == []


KEPT_RUNS = sorted(p for p in (ROOT / "docs" / "runs").iterdir() if (p / "summary.json").is_file())


@pytest.mark.parametrize("kept", KEPT_RUNS, ids=[p.name for p in KEPT_RUNS])
def test_every_kept_run_reports_through_the_upgrade(kept: Path) -> None:
    """Each kept run, of whatever format it was written in, reads as the current format
    (secperf/results/upgrade.py): every summary row fits the current row's model, and
    `secperf report RUN --json` prints it."""
    stored = json.loads((kept / "summary.json").read_text("utf-8"))
    assert readable(stored["format"]), f"{kept.name}: no upgrade from format {stored['format']}"
    rows = upgrade(stored["format"], stored, "summary.json")["rows"]
    assert rows, kept.name
    for row in rows:
        SummaryRow.model_validate(row)
    if not (kept / "run.json").is_file():
        return  # a summary kept alone (before run.json): its rows are what reports
    run = RunDir.open(kept)
    assert run.read_run_json()["format"] == run.read_summary()["format"] == FORMAT
    printed = CliRunner().invoke(app, ["report", str(kept), "--json"])
    assert printed.exit_code in (0, 1), (kept.name, printed.output[-2000:])
    out = json.loads(printed.output)
    assert [PrintedRow.model_validate(r).metric for r in out["rows"]] == [r["metric"] for r in rows]
