"""Kind `rr`: request/response on one connection (netperf TCP_RR / UDP_RR)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ValidationInfo, field_validator

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
from secperf.workloads import flood_beside
from secperf.workloads.base import EngineExecutor, WorkloadKind, WorkloadSpec
from secperf.workloads.flood_beside import Beside, FloodBeside
from secperf.workloads.generators import lost_or_done


class RrWorkload(FloodBeside, WorkloadSpec):
    """Request/response on one connection (netperf TCP_RR / UDP_RR)."""

    sweepable: ClassVar[dict[str, str]] = {
        "request": "size",
        "response": "size",
        "inflight": "count",
        "flood_rate": "count",
    }
    engine_fields: ClassVar[tuple[str, ...]] = (
        "protocol",
        "request",
        "response",
        "inflight",
        "payload",
        "duration",
        "warmup",
    )

    kind: Literal["rr"]
    protocol: Literal["tcp", "udp"] = "tcp"
    request: TransactionSize = 1
    response: TransactionSize = 1
    inflight: Inflight = 1
    payload: Payload = "random"

    @field_validator("request", "response")
    @classmethod
    def _udp_fits(cls, value: int | list[int], info: ValidationInfo) -> int | list[int]:
        return udp_fits(value, info, "datagram")

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
)
