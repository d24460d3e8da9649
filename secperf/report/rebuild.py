"""Rebuild a run's summary.json and report.html from its records, never for the worse.

`secperf report` and the Python API share this. A report is derived data, but the
derived files may be all that is left of a run whose records were damaged or moved:
a rebuild that would know less than the files it replaces (no records, fewer rows,
fewer repetitions) refuses and leaves them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from secperf.report.html import write_html
from secperf.results.rundir import RunDir, RunDirError
from secperf.results.summary import build_summary


class NothingToReport(RunDirError):
    """The records hold nothing to report, or less than the report they would replace."""


def _reps(summary: Mapping[str, Any]) -> int:
    return sum(int(r.get("n") or 0) for r in summary.get("rows") or [])


def _losses(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What the new summary would lose against the old one, in words."""
    lost: list[str] = []
    old_rows, new_rows = old.get("rows") or [], new.get("rows") or []
    if len(new_rows) < len(old_rows):
        lost.append(f"{len(old_rows) - len(new_rows)} of {len(old_rows)} rows")
    if _reps(new) < _reps(old):
        lost.append(f"{_reps(old) - _reps(new)} repetition(s) over all rows")
    return lost


def rebuild(
    run: RunDir, confidence: float | None = None, *, force: bool = False, write: bool = True
) -> dict[str, Any]:
    """Summarise `run` again and write summary.json and report.html; returns the summary.

    Refuses (NothingToReport, files untouched) when records.jsonl is missing or holds
    no record, or when the new summary has fewer rows or repetitions than the
    summary.json it would replace (unless `force`). With `write` False it writes nothing and
    refuses nothing: the summary is for printing (`report --json`, `--csv`), and a run
    whose records are gone prints the summary.json it kept."""
    where = str(run.records_source)
    if not write and not run.has_records() and run.has_summary():
        return run.read_summary()  # a kept run without its records prints what it kept
    if not run.has_records():
        raise NothingToReport(
            "records.jsonl (or records.jsonl.gz) is missing: nothing to report (summary.json "
            "and report.html are left as they were)",
            where=where,
            fix="restore records.jsonl into the run directory (it is the run's only raw data)",
        )
    summary = build_summary(run, confidence)
    if not summary["rows"] and not summary["errors"]:
        raise NothingToReport(
            "records.jsonl holds no result or error record: nothing to report "
            "(summary.json and report.html are left as they were)",
            where=where,
            fix="restore the records from a copy, or run the scenario again",
        )
    if not write:
        return summary
    if run.has_summary() and not force:
        try:
            old = run.read_summary()
        except RunDirError:
            old = {}
        lost = _losses(old, summary)
        if lost:
            dropped = "; ".join(
                f"line {d['line']} {d['reason']}" for d in summary.get("dropped_records") or []
            )
            raise NothingToReport(
                "the records give less than the existing report: "
                + ", ".join(lost)
                + (f" ({dropped})" if dropped else "")
                + "; summary.json and report.html are left as they were",
                where=where,
                fix="restore the records, or pass --force to replace the report with what "
                "the records hold now",
            )
    run.write_summary(summary)
    write_html(run)
    return summary


def report_path(run: RunDir) -> Path:
    return run.report_html_path
