"""Kind `connections`: RFC 3511 §5.2 concurrent TCP connections held and validated
(and the §5.4 teardown rate of closing them).

The engine opens connections until every one asked is open or they start to fail:
the DUT's limit, found (`limit_found`). One client address opens at most ~64 k
connections to the server's one port, so the connections are spread over `sources`
addresses of the client (its own and its emulated hosts', `[testbed]
emulated_hosts`): "auto" takes as many as the count needs. Where the engine stops
at a bound of its own (every asked connection open, its time, its descriptors, its
source ports), the capacity is a lower bound, "at least N", never the limit: the
record's `search` says which (found, or at_least with the bound and its reason).

`run_on_client` runs one connection test in the client with a budget from its own
times; the searches of §5.3 (`conn_rate`) and §5.4 (`teardown_rate`) and the §5.5
`dos` kind use it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from secperf.engine import Record, run_test
from secperf.errors import ScenarioError
from secperf.metric import FAILURES, Metric, MetricRow, Search, SearchReading, field, ratio_pct
from secperf.metric import Record as RecordView
from secperf.schema.fields import HoldTime, PerSecond, Timeout
from secperf.schema.sections import Testbed as TestbedSection
from secperf.schema.sections import TopologySection
from secperf.workloads.base import (
    MeasureContext,
    Refused,
    Spec,
    WorkloadKind,
    WorkloadPoint,
    WorkloadSpec,
    engine_spec,
)

# How the server answers each client FIN: its own FIN (an orderly close, the client
# keeps the TIME_WAIT), or an RST (SO_LINGER 0, no TIME_WAIT).
FinClose = Literal["fin", "reset"]

# Connections one source address opens to the server's one port: the testbed's
# client ports are 1024-65000 (63,977), less a margin for the other sockets.
PER_SOURCE = 60_000


class ConnectionsWorkload(WorkloadSpec):
    """RFC 3511 §5.2: concurrent TCP connections held and validated; §5.4 teardown rate.

    `duration` bounds the opening phase."""

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
    rate: PerSecond | None = None  # opens/s; None = as fast as possible
    hold: HoldTime = 1.0
    close_rate: PerSecond | None = None
    timeout: Timeout = 5.0
    close: FinClose = "fin"  # how the server answers each FIN: its own FIN, or an RST
    # Client addresses the connections come from, round-robin: "auto" as many as
    # `connections` needs (one per PER_SOURCE), or a number; each beyond the first
    # is an emulated host of the client ([testbed] emulated_hosts).
    sources: Literal["auto"] | int = Field(default="auto")

    def default_name(self) -> str:
        return "connections"

    def source_count(self) -> int:
        """How many client addresses this workload spreads its connections over."""
        if self.sources == "auto":
            return max(1, math.ceil(self.connections / PER_SOURCE))
        return self.sources

    @field_validator("sources")
    @classmethod
    def _sources_in_range(cls, value: Literal["auto"] | int) -> Literal["auto"] | int:
        if value != "auto" and not 1 <= value <= 4096:
            raise ValueError(f'sources must be "auto" or 1 to 4096 addresses, not {value}')
        return value


def enough_sources(
    spec: ConnectionsWorkload, testbed: TestbedSection, topology: TopologySection | None
) -> Refused | None:
    """A count that needs more client addresses than the testbed gives is refused
    before any traffic (else the engine stops at its source ports: a lower bound)."""
    need = spec.source_count()
    have = 1 if topology is not None else 1 + testbed.emulated_hosts
    if need <= have:
        return None
    key = "sources" if spec.sources != "auto" else "connections"
    return Refused(
        f"needs {need} client addresses ({spec.connections} connections, ~{PER_SOURCE:,} "
        f"per address to the server's one port) but the testbed gives the client {have}: "
        f"set [testbed] emulated_hosts = {need - 1} (at most 200), or ask fewer",
        key=key,
    )


def source_addresses(ctx: MeasureContext, spec: ConnectionsWorkload) -> list[str]:
    """The client's addresses the connections come from: its own, then its emulated
    hosts', as many as the workload needs."""
    need = spec.source_count()
    mine = [
        ctx.topology.primary_address(ctx.client, ctx.family),
        *ctx.topology.emulated_addresses(ctx.client, ctx.family),
    ]
    if need > len(mine):
        raise ScenarioError(
            f"the connections workload needs {need} client addresses; "
            f"host {ctx.client} has {len(mine)}",
            where="[[workloads]] sources",
            fix=f"set [testbed] emulated_hosts = {need - 1}, or ask fewer connections",
        )
    return mine[:need]


def run_on_client(
    ctx: MeasureContext, spec: Spec, keep_all: bool, *, keep_result: bool = True
) -> Record:
    """Runs `spec` in the client with a budget from its own times; keeps its
    records in the run only if `keep_all` (its result too unless not `keep_result`:
    the caller keeps it once it has added to it)."""
    budget = (
        spec["duration"]
        + spec.get("hold", 0)
        + spec.get("warmup", 0)
        + 4 * spec["timeout"]
        + 30
        # validating and closing held connections: ~50 µs each at most
        + spec.get("connections", 0) / 20_000
    )

    def keep(rec: Record) -> None:
        if keep_all and (keep_result or rec.get("type") != "result"):
            ctx.keep(rec)

    return run_test(ctx.testbed.host(ctx.client), spec, on_record=keep, timeout=budget).result


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
    return {
        "outcome": "at_least",
        "measure": "count",
        "bound": capacity,
        "passed_at": {"asked": record.get("target"), "achieved": capacity},
        "stopped_by": stopped_by,
    }


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
        sources = source_addresses(ctx, p)
        extra: dict[str, Any] = {"sources": sources} if len(sources) > 1 else {}
        spec = engine_spec(p, server=ctx.target, **extra)
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
