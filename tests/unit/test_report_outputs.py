"""`secperf report --json/--csv` print the run and write nothing; their rows carry the
answer's verdict, in its words."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secperf.cli import app

ROOT = Path(__file__).resolve().parents[2]
DATA_RUN = ROOT / "tests" / "data" / "runs" / "20261122T010203Z-quick"


def _tree(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("flag", ["--json", "--csv", "--paper-markdown"])
def test_a_printed_output_writes_nothing(tmp_path: Path, flag: str) -> None:
    run = shutil.copytree(DATA_RUN, tmp_path / "run")
    before = _tree(run)
    result = CliRunner().invoke(app, ["report", str(run), flag])
    assert result.exit_code == 0, result.output
    assert _tree(run) == before  # no summary.json, no report.html written


def test_the_report_itself_still_writes_its_files(tmp_path: Path) -> None:
    run = shutil.copytree(DATA_RUN, tmp_path / "run")
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    assert (run / "summary.json").is_file() and (run / "report.html").is_file()


def test_json_and_csv_rows_carry_the_verdict_in_words(tmp_path: Path) -> None:
    run = shutil.copytree(DATA_RUN, tmp_path / "run")
    cli = CliRunner()
    doc = json.loads(cli.invoke(app, ["report", str(run), "--json"]).stdout)
    judged = [r for r in doc["rows"] if r.get("verdict")]
    assert judged and all(r["variant"] != "baseline" for r in judged)
    assert any(r["verdict"] == "cost" and r["verdict_text"].startswith("costs +") for r in judged)
    rows = list(csv.DictReader(io.StringIO(cli.invoke(app, ["report", str(run), "--csv"]).stdout)))
    by_key = {(r["variant"], r["point_id"], r["metric"]): r for r in rows}
    for r in judged:
        line = by_key[(r["variant"], r["point_id"], r["metric"])]
        assert (line["verdict"], line["verdict_text"]) == (r["verdict"], r["verdict_text"])
    assert all(r["verdict"] == "" for r in rows if r["variant"] == "baseline")


def test_a_kept_run_without_its_records_prints_what_it_kept(tmp_path: Path) -> None:
    run = shutil.copytree(ROOT / "docs" / "runs" / "quick", tmp_path / "kept")
    assert not (run / "records.jsonl").exists()
    result = CliRunner().invoke(app, ["report", str(run), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"]
