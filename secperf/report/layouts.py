"""Which layout a workload's report takes: its kind's own (`WorkloadKind.layout`, e.g.
RFC 2544's section 26 tables and charts), else the standard table per metric."""

from __future__ import annotations

from collections.abc import Sequence

from secperf.tables import ReportLayout, Row
from secperf.workloads.registry import WORKLOADS


def layout_of(rows: Sequence[Row]) -> ReportLayout | None:
    """The report layout of the kind a workload's summary rows come from, if it has one."""
    for kind in dict.fromkeys(str(r.get("kind", "")) for r in rows):
        if kind in WORKLOADS and WORKLOADS.get(kind).layout is not None:
            return WORKLOADS.get(kind).layout
    return None
