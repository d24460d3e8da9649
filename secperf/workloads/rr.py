"""Kind `rr`: request/response on one connection (netperf TCP_RR / UDP_RR).

Closed loop by default (the next request when the response arrives, `inflight` at
once); with `rate` (transactions/s) or `load` (a share of the baseline's closed-loop
maximum, measured first in the same run) open loop: requests on a schedule whatever
the replies, latency from each request's scheduled time (docs/methodology.md).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from pydantic import ValidationInfo, field_validator, model_validator

from secperf.metric import (
    LAT_MEAN,
    LAT_P99,
    Metric,
    MetricRow,
    field,
    latency,
    service_demand,
)
from secperf.schema.fields import Inflight, Payload, TransactionSize, udp_fits
from secperf.workloads.base import EngineExecutor, WorkloadKind, WorkloadSpec
from secperf.workloads.generators import lost_or_done
from secperf.workloads.parts import flood_beside, open_loop
from secperf.workloads.parts.flood_beside import Beside, FloodBeside
from secperf.workloads.parts.open_loop import OpenLoop
from secperf.workloads.parts.specs import TcpRr

# Open loop: the most transactions outstanding unless `inflight` says otherwise (the
# engine's default: a receiver drains the responses while requests go on schedule).
OPEN_LOOP_INFLIGHT = 64


class RrWorkload(OpenLoop, FloodBeside, WorkloadSpec):
    """Request/response on one connection (netperf TCP_RR / UDP_RR)."""

    sweepable: ClassVar[dict[str, str]] = {
        "request": "size",
        "response": "size",
        "inflight": "count",
        "flood_rate": "count",
    }
    # one list with the rr that other kinds send beside theirs (parts/specs.py)
    engine_fields: ClassVar[tuple[str, ...]] = TcpRr.engine_fields

    kind: Literal["rr"]
    protocol: Literal["tcp", "udp"] = "tcp"
    """The transport of the transactions."""
    request: TransactionSize = 1
    """Bytes of each request; UDP: at most 65507 B."""
    response: TransactionSize = 1
    """Bytes of each response; UDP: at most 65507 B."""
    # Transactions outstanding at once: pipelined closed loop; open loop, the most the
    # schedule may have outstanding (default 64 there).
    inflight: Inflight = 1
    """1 … 64 transactions outstanding; open loop, the most the schedule may have outstanding."""
    payload: Payload = "random"
    """What the bytes are: random (incompressible), zeros, or English-like text (compressible)."""

    @model_validator(mode="after")
    def _open_loop_outstanding(self) -> RrWorkload:
        """Open loop without an explicit inflight: up to 64 outstanding. Set beside
        pydantic's bookkeeping so that `closed` knows the file did not ask for it."""
        if self.open_loop and "inflight" not in self.model_fields_set:
            object.__setattr__(self, "inflight", OPEN_LOOP_INFLIGHT)
        return self

    @field_validator("request", "response")
    @classmethod
    def _udp_fits(cls, value: int | list[int], info: ValidationInfo) -> int | list[int]:
        return udp_fits(value, info, "datagram")

    def unrecorded(self) -> frozenset[str]:
        """Without a flood its keys, closed loop `rate` and `load`: not in the record."""
        return FloodBeside.unrecorded(self) | self.closed_loop_keys()

    def default_name(self) -> str:
        return f"{self.protocol}-rr"


TPS = Metric("tps", "Transaction rate", "trans/s", True, True)
SD_TX = Metric("sd_cpu_us_per_tx", "Service demand", "CPU µs/trans", False, False)

METRICS: tuple[MetricRow, ...] = (
    (TPS, field("transactions_per_second")),
    (SD_TX, service_demand(field("transactions"))),
    (LAT_MEAN, latency("mean")),
    (LAT_P99, latency("p99")),
    *flood_beside.METRICS,
)


def closed(spec: RrWorkload) -> RrWorkload:
    """The point closed loop, one transaction at a time unless the file said otherwise."""
    back = {} if "inflight" in spec.model_fields_set else {"inflight": 1}
    return open_loop.closed(spec).model_copy(update=back)


OFFERED = dataclasses.replace(open_loop.offered(TPS), closed=closed)

KIND = WorkloadKind(
    name="rr",
    model=RrWorkload,
    # merged over generators, loss is over the transactions tried (lost + completed)
    executor=Beside(EngineExecutor(tried=lost_or_done)),
    metrics=METRICS,
    work_unit=("trans", field("transactions")),
    moved=("transactions",),
    hosts=flood_beside.hosts,
    floods=flood_beside.floods,
    generators=True,
    calibrates=flood_beside.timed_alone,
    offered=OFFERED,
)
