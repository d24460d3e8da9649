"""Kind `crr`: connect, request, response, close: connections per second (netperf TCP_CRR).

Closed loop by default (`parallel` loops, each opening its next connection when the
last one closes); with `rate` (connections/s) or `load` (a share of the baseline's
closed-loop maximum, measured first) new connections open on a schedule, up to
`parallel` at once (docs/methodology.md, "Open loop")."""

from __future__ import annotations

from typing import ClassVar, Literal

from secperf.metric import (
    LAT_MEAN,
    LAT_P99,
    SD_CONN,
    Metric,
    MetricRow,
    field,
    latency,
    service_demand,
)
from secperf.schema.fields import BusyPoll, Parallel, Payload, TransactionSize
from secperf.workloads.base import EngineExecutor, WorkloadKind, WorkloadSpec
from secperf.workloads.parts import flood_beside, open_loop
from secperf.workloads.parts.connections import Close
from secperf.workloads.parts.flood_beside import Beside, FloodBeside
from secperf.workloads.parts.open_loop import OpenLoop


class CrrWorkload(OpenLoop, FloodBeside, WorkloadSpec):
    """A new TCP connection per transaction (netperf TCP_CRR): connections/s.

    `close = "server-first"` (default, netperf's order) and `"client-first"` close
    each connection in order (a FIN each way), the server or the client first;
    `close = "reset"` with an RST (SO_LINGER 0), which a stateful DUT never sees
    as a teardown."""

    sweepable: ClassVar[dict[str, str]] = {
        "request": "size",
        "response": "size",
        "parallel": "count",
        "flood_rate": "count",
    }
    engine_fields: ClassVar[tuple[str, ...]] = (
        "protocol",
        "request",
        "response",
        "parallel",
        "payload",
        "close",
        "rate",
        "duration",
        "warmup",
        "busy_poll_us",
    )

    kind: Literal["crr"]
    protocol: Literal["tcp"] = "tcp"
    """`"tcp"` only."""
    request: TransactionSize = 1
    """Bytes of each request."""
    response: TransactionSize = 1
    """Bytes of each response."""
    parallel: Parallel = 1
    """1 … 128 concurrent connect loops."""
    payload: Payload = "random"
    """What the bytes are: random (incompressible), zeros, or English-like text (compressible)."""
    close: Close = "server-first"
    """`"server-first"`, `"client-first"` (`"fin"` reads as it), `"reset"`."""
    # µs the engine's loop spins before it sleeps (None: the engine's default, 0).
    busy_poll_us: BusyPoll | None = None
    """0 … 10000: µs the engine's event loop spins (epoll without waiting) before it sleeps; fewer
    wake-ups, more CPU. Only where the client host has CPUs of its own (a lab host, a map
    placement): under `cpus = "one"` it takes the CPU from the server and the DUT
    (docs/performance.md, "The busy poll").
    """

    def unrecorded(self) -> frozenset[str]:
        """Without a flood its keys, closed loop `rate` and `load`: not in the record."""
        return FloodBeside.unrecorded(self) | self.closed_loop_keys()

    def default_name(self) -> str:
        return "tcp-crr"


CPS = Metric("cps", "Connection rate", "conn/s", True, True)

METRICS: tuple[MetricRow, ...] = (
    # each crr transaction is one connection: connect, request, response, close
    (CPS, field("transactions_per_second")),
    (SD_CONN, service_demand(field("transactions"))),
    (LAT_MEAN, latency("mean")),
    (LAT_P99, latency("p99")),
    *flood_beside.METRICS,
)

KIND = WorkloadKind(
    name="crr",
    model=CrrWorkload,
    executor=Beside(EngineExecutor()),
    metrics=METRICS,
    work_unit=("conn", field("transactions")),
    moved=("transactions",),
    hosts=flood_beside.hosts,
    floods=flood_beside.floods,
    generators=True,
    calibrates=flood_beside.timed_alone,
    offered=open_loop.offered(CPS),
)
