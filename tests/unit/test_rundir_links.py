"""Report and run-directory writes never follow a link (issue 41): as root on a run
directory others can write, a link named like the temporary file (report.html.tmp,
summary.json.tmp) or like records.jsonl must leave its target as it was."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from secperf.report.html import write_html
from secperf.results.rundir import RunDir, RunDirError, write_atomic
from secperf.results.summary import build_summary

DATA = Path(__file__).resolve().parents[1] / "data" / "runs" / "20261122T010203Z-quick"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    return victim


def test_a_link_named_like_report_html_tmp_is_not_followed(tmp_path: Path) -> None:
    run_path = tmp_path / "run"
    shutil.copytree(DATA, run_path)
    run = RunDir.open(run_path)
    victim = _victim(tmp_path)
    os.symlink(victim, run_path / "report.html.tmp")
    path = write_html(run)
    assert victim.read_text() == "precious\n"
    assert path.is_file() and not path.is_symlink() and "<table" in path.read_text()


def test_a_link_at_the_file_itself_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (tmp_path / "d").mkdir()
    target = tmp_path / "d" / "summary.json"
    os.symlink(victim, target)
    os.symlink(victim, tmp_path / "d" / "summary.json.tmp")
    write_atomic(target, "{}\n")
    assert victim.read_text() == "precious\n"
    assert not target.is_symlink() and target.read_text() == "{}\n"
    assert [p.name for p in (tmp_path / "d").iterdir() if p.name.endswith(".tmp")] == [
        "summary.json.tmp"  # the planted link, left alone; no temporary file of ours
    ]


def test_summary_and_records_never_write_through_a_link(tmp_path: Path) -> None:
    run_path = tmp_path / "run"
    shutil.copytree(DATA, run_path)
    run = RunDir.open(run_path)
    victim = _victim(tmp_path)
    os.symlink(victim, run_path / "summary.json.tmp")
    run.write_summary(build_summary(run))
    assert victim.read_text() == "precious\n"
    records = run.records_path
    records.unlink()
    os.symlink(victim, records)
    with pytest.raises(RunDirError, match="symbolic link"):
        run.append_record({"variant": "baseline", "seq": 1}, {"record": "result"})
    assert victim.read_text() == "precious\n"
