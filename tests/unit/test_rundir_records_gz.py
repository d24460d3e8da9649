"""A run keeps its records compressed (records.jsonl.gz, written when it ends) so that a
kept run in docs/runs/ can carry them and its verdicts be derived again (issue 42); the
readers take records.jsonl or, where it is gone, records.jsonl.gz."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from typer.testing import CliRunner

from secperf.cli import app
from secperf.report.kept import paper_summary
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary

DATA = Path(__file__).resolve().parents[1] / "data" / "runs" / "20261122T010203Z-quick"


def test_the_compressed_records_read_as_the_plain_ones(tmp_path: Path) -> None:
    run_path = shutil.copytree(DATA, tmp_path / "run")
    run = RunDir.open(run_path)
    plain = list(run.iter_records())
    before = build_summary(run)
    gz = run.keep_compressed()
    assert gz is not None and gz.name == "records.jsonl.gz"
    assert gzip.decompress(gz.read_bytes()) == (run_path / "records.jsonl").read_bytes()
    (run_path / "records.jsonl").unlink()
    assert run.has_records() and run.records_source == gz
    assert list(run.iter_records()) == plain
    assert build_summary(run)["rows"] == before["rows"]
    # the report rebuilds from it, and the paper verdicts come from its rounds
    assert CliRunner().invoke(app, ["report", str(run_path)]).exit_code == 0
    assert paper_summary(run)["rows"] == before["rows"]


def test_without_any_records_there_is_nothing_to_compress_or_rebuild(tmp_path: Path) -> None:
    run_path = shutil.copytree(DATA, tmp_path / "run")
    (run_path / "records.jsonl").unlink()
    run = RunDir.open(run_path)
    assert run.keep_compressed() is None and not run.has_records()
    out = CliRunner().invoke(app, ["report", str(run_path)])
    assert out.exit_code != 0 and "records.jsonl.gz" in out.output
