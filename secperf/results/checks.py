"""Pass/fail checks in a run: which check held, per variant.

A check record (a result of a kind whose declaration says `checks`, such as
`failclosed`: `{"kind": ..., "passed": bool, "checks": [{"name", "passed",
"applicable", "detail"}, ...]}`) has no number worth a confidence interval: the
summary keeps, per workload point and variant, how many rounds each check passed
and the detail of its first failure (or of its last round when it never failed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secperf.results.rundir import RunDir
from secperf.workloads.registry import WORKLOADS


def is_check_record(record: Mapping[str, Any]) -> bool:
    """A result of a kind whose records carry pass/fail checks."""
    kind = str(record.get("kind", ""))
    return record.get("type") == "result" and kind in WORKLOADS and WORKLOADS.get(kind).checks


def collect_checks(run: RunDir) -> list[dict[str, Any]]:
    """One entry per (workload, point, variant) with check records, in record order."""
    entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    for line in run.iter_records():
        record = line.get("record")
        if not isinstance(record, Mapping) or not is_check_record(record):
            continue
        key = (str(line.get("workload", "")), str(line.get("point_id", "")), str(line["variant"]))
        entry = entries.setdefault(
            key,
            {
                "workload": key[0],
                "point_id": key[1],
                "variant": key[2],
                "kind": record.get("kind"),
                "rounds": 0,
                "passed_rounds": 0,
                "checks": {},
            },
        )
        entry["rounds"] += 1
        entry["passed_rounds"] += int(record.get("passed") is True)
        for check in record.get("checks") or []:
            if not isinstance(check, Mapping):
                continue
            name = str(check.get("name"))
            agg = entry["checks"].setdefault(
                name,
                {"name": name, "applicable": True, "passed": 0, "rounds": 0, "detail": None},
            )
            ok = check.get("passed") is True
            agg["rounds"] += 1
            agg["passed"] += int(ok)
            agg["applicable"] = agg["applicable"] and check.get("applicable", True) is not False
            # the first failure explains the most; with none, the latest round's detail
            first_failure = not ok and agg["passed"] == agg["rounds"] - 1
            if first_failure or agg["passed"] == agg["rounds"]:
                agg["detail"] = check.get("detail")
    out = []
    for entry in entries.values():
        entry["checks"] = list(entry["checks"].values())
        out.append(entry)
    return out


def validation_failures(record: Mapping[str, Any]) -> dict[str, str] | None:
    """The criteria a result record's test missed, by name, each with its detail (its
    `validation` verdict, written by a kind with validation criteria such as `http`);
    None: it has no verdict or passed. Such a test is FAILED, not a number: its
    figures go in no row's mean."""
    verdict = record.get("validation")
    if not isinstance(verdict, Mapping) or verdict.get("passed") is not False:
        return None
    return {
        str(c.get("name")): str(c.get("detail"))
        for c in verdict.get("criteria") or []
        if isinstance(c, Mapping) and c.get("passed") is not True
    }


def validation_field(
    checked: int, failed: Mapping[int, Mapping[str, str]]
) -> dict[str, Any] | None:
    """A row's `validation`: repetitions checked and failed, and each criterion missed
    once, worded by its first failure; None when no repetition had criteria."""
    if not checked:
        return None
    missed: dict[str, str] = {}
    for rep in sorted(failed):
        for name, detail in failed[rep].items():
            missed.setdefault(name, detail)
    return {"checked_n": checked, "failed_n": len(failed), "failed": list(missed.values())}
