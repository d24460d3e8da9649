"""Kind `connections`: RFC 3511 §5.2 concurrent TCP connections held and validated
(and the §5.4 teardown rate of closing them).

The engine opens connections until every one asked is open or they start to fail:
the DUT's limit, found (`limit_found`). Beyond one client address's ports they are
spread over `sources` addresses of the client (secperf/workloads/parts/sources.py).
Where the engine stops at a bound of its own (every asked connection open, its time,
its descriptors, its source ports), the capacity is a lower bound, "at least N", never
the limit: the record's `search` says which (found, or at_least with the bound and its reason).

Its connection test runs through `run_on_client` (secperf.workloads.parts.connections),
as the searches of §5.3 (`conn_rate`) and §5.4 (`teardown_rate`) and the §5.5 `dos`
kind run theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from secperf.engine import Record
from secperf.metric import FAILURES, Metric, MetricRow, Search, SearchReading, field, ratio_pct
from secperf.metric import Record as RecordView
from secperf.schema.fields import HoldTime, PerSecond, Timeout
from secperf.workloads.base import (
    MeasureContext,
    WorkloadKind,
    WorkloadPoint,
    WorkloadSpec,
    engine_spec,
)
from secperf.workloads.parts.connections import FinClose, run_on_client
from secperf.workloads.parts.sources import ManySources, enough_sources, peers_spec, sources_spec


class ConnectionsWorkload(ManySources, WorkloadSpec):
    """RFC 3511 §5.2: concurrent TCP connections held and validated; §5.4 teardown rate.

    `duration` bounds the opening phase."""

    held_key: ClassVar[str] = "connections"
    engine_fields: ClassVar[tuple[str, ...]] = (
        "connections",
        "rate",
        "hold",
        "close_rate",
        "timeout",
        "duration",
        "close",
    )

    kind: Literal["connections"]
    connections: int = Field(default=10_000, ge=1, le=1_000_000)
    """1 … 1 000 000 connections to open and hold."""
    rate: PerSecond | None = None  # opens/s; None = as fast as possible
    """Opens/s."""
    hold: HoldTime = 1.0
    """How long the connections are held open, all established, before the teardown."""
    close_rate: PerSecond | None = None
    """FINs/s when tearing down."""
    timeout: Timeout = 5.0
    """Per connect and per validation, 1 ms … 120 s."""
    close: FinClose = "fin"  # how the server answers each FIN: its own FIN, or an RST
    """How the server answers each FIN: `"fin"` its own (orderly), `"reset"` an RST."""

    def default_name(self) -> str:
        return "connections"

    def held(self) -> int:
        return self.connections


# What lifts each of the engine's own bounds (`stopped_by` other than target/failures).
ENGINE_BOUND_FIX = {
    "duration": "the opening phase ended first; raise the workload's duration or spread "
    "the connections over more sources",
    "nofile": "raise the hard RLIMIT_NOFILE secperf starts with (ulimit -Hn; needs "
    "CAP_SYS_RESOURCE)",
    "ports": "the client's source ports ran out; set sources (and [testbed] emulated_hosts)",
    "memory": "the client host ran short of memory; ask fewer connections or give it more",
}


def capacity_search(record: RecordView) -> dict[str, Any] | None:
    """The record's capacity as a search's answer: found (the connections began to
    fail: the limit of the path) or at least the count (the engine stopped at a bound
    of its own: `stopped_by`); None when the record holds no capacity."""
    capacity = record.get("capacity")
    if not isinstance(capacity, int | float):
        return None
    stopped_by = record.get("stopped_by") or "target"
    if record.get("limit_found", stopped_by == "failures"):
        return {
            "outcome": "found",
            "measure": "count",
            "value": capacity,
            "interval": [capacity, capacity],
            "stopped_by": stopped_by,
        }
    found: dict[str, Any] = {
        "outcome": "at_least",
        "measure": "count",
        "bound": capacity,
        "passed_at": {"asked": record.get("target"), "achieved": capacity},
        "stopped_by": stopped_by,
    }
    if stopped_by != "target":
        # short of the count asked: a bound of the engine's, named (not the range's top)
        rate = record.get("open_rate")
        at = f" at {rate:,.0f} opens/s" if isinstance(rate, int | float) else ""
        fix = ENGINE_BOUND_FIX.get(stopped_by, "")
        found["ceiling"] = {
            "error": f"the engine stopped at its {stopped_by} bound{at}"
            + (f": {fix}" if fix else "")
        }
    return found


def legacy_capacity(record: RecordView) -> SearchReading | None:
    """Records from before the `search` object: `stopped_by` "failures" found the
    limit; anything else (null: every asked connection opened) is a lower bound."""
    found = capacity_search(record)
    if found is None:
        return None
    if found["outcome"] == "found":
        value = float(found["value"])
        return SearchReading("found", "count", value=value, interval=(value, value))
    return SearchReading("at_least", "count", bound=float(found["bound"]))


@dataclass(frozen=True)
class ConnectionsExecutor:
    def measure(self, ctx: MeasureContext, point: WorkloadPoint[ConnectionsWorkload]) -> Record:
        p = point.spec
        spec = engine_spec(p, server=ctx.target, **sources_spec(ctx, p), **peers_spec(ctx))
        rec = run_on_client(ctx, spec, keep_all=True, keep_result=False)
        found = capacity_search(rec)
        if found is not None:
            rec = {**rec, "search": found}
        ctx.keep(rec)
        return rec


CAPACITY = Metric(
    "capacity",
    "Concurrent connections",
    "conn",
    True,
    True,
    censored=("< {bound}", "at least {bound}"),
    scale="ratio",  # a count held: its loss can never pass 100 %
)
SEARCH = Search(CAPACITY, legacy=legacy_capacity)
OPEN_RATE = Metric("open_rate", "Open rate", "conn/s", True, False)
TEARDOWN = Metric("teardown_rate", "Teardown rate", "conn/s", True, False)

METRICS: tuple[MetricRow, ...] = (
    SEARCH.row(),
    (OPEN_RATE, field("open_rate")),
    (TEARDOWN, field("teardown_rate")),
    (FAILURES, ratio_pct),
)

KIND = WorkloadKind(
    name="connections",
    model=ConnectionsWorkload,
    executor=ConnectionsExecutor(),
    metrics=METRICS,
    searches=(SEARCH,),
    validate=enough_sources,
)
