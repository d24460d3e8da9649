"""Pass/fail check tables (kinds whose records carry checks, such as `failclosed`): a row
per check, a column per variant.

Cells read `pass 4/4`, `FAIL 0/4`, or `n/a · FAIL 0/4` for a check that does not
apply to the variant (a baseline with no daemon to kill) yet says how its path
behaved; the footnotes quote the first failure's detail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secperf.tables import Cell, ReportTable


def _cell(check: Mapping[str, Any] | None) -> Cell:
    if check is None:
        return Cell("–", numeric=False)
    passed, rounds = int(check.get("passed", 0)), int(check.get("rounds", 0))
    ok = rounds > 0 and passed == rounds
    text = f"{'pass' if ok else 'FAIL'} {passed}/{rounds}"
    if check.get("applicable") is False:
        text = f"n/a · {text}"
    return Cell(text, significant=not ok, numeric=False)


def check_tables(summary: Mapping[str, Any]) -> list[ReportTable]:
    """One table per checked workload point of the summary's `checks`."""
    by_point: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for entry in summary.get("checks") or []:
        by_point.setdefault((str(entry["workload"]), str(entry["point_id"])), []).append(entry)
    tables: list[ReportTable] = []
    for (workload, _point_id), entries in by_point.items():
        variants = [str(e["variant"]) for e in entries]
        names: list[str] = []
        for e in entries:
            names += [str(c["name"]) for c in e["checks"] if c["name"] not in names]
        per = {str(e["variant"]): {str(c["name"]): c for c in e["checks"]} for e in entries}
        rows = [[Cell(n, numeric=False)] + [_cell(per[v].get(n)) for v in variants] for n in names]
        rows.append(
            [Cell("all checks", numeric=False)]
            + [
                _cell({"passed": e["passed_rounds"], "rounds": e["rounds"], "applicable": True})
                for e in entries
            ]
        )
        notes = [
            f"{v} · {n}: {per[v][n]['detail']}"
            for v in variants
            for n in names
            if n in per[v] and per[v][n]["passed"] < per[v][n]["rounds"] and per[v][n].get("detail")
        ]
        tables.append(
            ReportTable(
                workload=workload,
                metric="checks",
                title=f"{workload} — checks (rounds passed / rounds)",
                columns=["check", *variants],
                rows=rows,
                footnotes=notes,
            )
        )
    return tables
