"""Kind `connections`: RFC 3511 §5.2 concurrent TCP connections held and validated
(and the §5.4 teardown rate of closing them).

`run_on_client` runs one connection test in the client with a budget from its own
times; the searches of §5.3 (`conn_rate`) and §5.4 (`teardown_rate`) and the §5.5
`dos` kind use it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field

from secperf.engine import Record, run_test
from secperf.metric import FAILURES, Metric, MetricRow, field, ratio_pct
from secperf.schema.fields import HoldTime, PerSecond, Timeout
from secperf.workloads.base import (
    MeasureContext,
    Spec,
    WorkloadKind,
    WorkloadPoint,
    WorkloadSpec,
    engine_spec,
)
from secperf.workloads.crr import Close


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
    close: Close = "fin"  # how the server answers each FIN: its own FIN, or an RST

    def default_name(self) -> str:
        return "connections"


def run_on_client(ctx: MeasureContext, spec: Spec, keep_all: bool) -> Record:
    """Runs `spec` in the client with a budget from its own times; keeps its
    records in the run only if `keep_all`."""
    budget = (
        spec["duration"] + spec.get("hold", 0) + spec.get("warmup", 0) + 4 * spec["timeout"] + 30
    )
    keep = ctx.keep if keep_all else (lambda _r: None)
    return run_test(ctx.testbed.host(ctx.client), spec, on_record=keep, timeout=budget).result


@dataclass(frozen=True)
class ConnectionsExecutor:
    def measure(self, ctx: MeasureContext, point: WorkloadPoint[ConnectionsWorkload]) -> Record:
        return run_on_client(ctx, engine_spec(point.spec, server=ctx.target), keep_all=True)


CAPACITY = Metric("capacity", "Concurrent connections", "conn", True, True)
OPEN_RATE = Metric("open_rate", "Open rate", "conn/s", True, False)
TEARDOWN = Metric("teardown_rate", "Teardown rate", "conn/s", True, False)

METRICS: tuple[MetricRow, ...] = (
    (CAPACITY, field("capacity")),
    (OPEN_RATE, field("open_rate")),
    (TEARDOWN, field("teardown_rate")),
    (FAILURES, ratio_pct),
)

KIND = WorkloadKind(
    name="connections",
    model=ConnectionsWorkload,
    executor=ConnectionsExecutor(),
    metrics=METRICS,
)
