"""Pass/fail checks in a run: which check held, per variant.

A check record (a result of a kind whose declaration says `checks`, such as
`failclosed`: `{"kind": ..., "passed": bool, "checks": [{"name", "passed",
"applicable", "detail"}, ...]}`) has no number worth a confidence interval: the
summary keeps, per workload point and variant, how many rounds each check passed
and the detail of its first failure (or of its last round when it never failed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
    for line in run.iter_lines():
        record = line.record
        if not is_check_record(record):
            continue
        key = (line.workload, line.point_id, line.variant)
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
    return _missed(verdict, required=True)


def validation_notes(record: Mapping[str, Any]) -> dict[str, str]:
    """The SHOULD criteria (`"required": false`, such as RFC 9411's deviations) a
    result record's test missed, by name with its detail: noted beside its number,
    which stands."""
    verdict = record.get("validation")
    return _missed(verdict, required=False) if isinstance(verdict, Mapping) else {}


def _missed(verdict: Mapping[str, Any], *, required: bool) -> dict[str, str]:
    return {
        str(c.get("name")): str(c.get("detail"))
        for c in verdict.get("criteria") or []
        if isinstance(c, Mapping)
        and c.get("passed") is not True
        and (c.get("required", True) is not False) == required
    }


@dataclass
class ValidationRounds:
    """A summary row's validation criteria over its rounds: those checked, the
    criteria each FAILED round missed (its figures in no mean) and the SHOULD
    criteria each counted round missed (its figures stand). A round measured again
    replaces what its earlier attempt said."""

    checked: set[int] = field(default_factory=set)
    failed: dict[int, dict[str, str]] = field(default_factory=dict)
    noted: dict[int, dict[str, str]] = field(default_factory=dict)

    def see(self, rep: int, record: Mapping[str, Any]) -> bool:
        """Takes round `rep`'s result; False when it is FAILED (not a number)."""
        if isinstance(record.get("validation"), Mapping):
            self.checked.add(rep)
        self.failed.pop(rep, None)
        self.noted.pop(rep, None)
        missed = validation_failures(record)
        if missed is not None:
            self.failed[rep] = missed
            return False
        if notes := validation_notes(record):
            self.noted[rep] = notes
        return True

    def summary(self) -> dict[str, Any] | None:
        """The row's `validation` field (validation_field)."""
        return validation_field(len(self.checked), self.failed, self.noted)


def validation_field(
    checked: int,
    failed: Mapping[int, Mapping[str, str]],
    noted: Mapping[int, Mapping[str, str]] | None = None,
) -> dict[str, Any] | None:
    """A row's `validation`: repetitions checked and failed, and each criterion missed
    once, worded by its first failure; the same for the SHOULD criteria missed by
    repetitions that count (`noted_n`, `noted`); None when no repetition had criteria."""
    if not checked:
        return None

    def first(by_rep: Mapping[int, Mapping[str, str]]) -> list[str]:
        missed: dict[str, str] = {}
        for rep in sorted(by_rep):
            for name, detail in by_rep[rep].items():
                missed.setdefault(name, detail)
        return list(missed.values())

    noted = noted or {}
    return {
        "checked_n": checked,
        "failed_n": len(failed),
        "failed": first(failed),
        "noted_n": len(noted),
        "noted": first(noted),
    }
