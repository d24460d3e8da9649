"""Kind `http`: http_load against nginx in the server host: fetches/s, bytes/s,
latencies, errors; over HTTPS with `tls = true` (handshake time and resumed
sessions too). The model, the server and the fetch test are
secperf.workloads.parts.http, which http_capacity's trials use too.
"""

from __future__ import annotations

from dataclasses import dataclass

from secperf.engine import Record
from secperf.metric import (
    FAILURES,
    Metric,
    MetricRow,
    field,
    ratio_pct,
    service_demand,
    sub_latency,
    throughput,
)
from secperf.services.nginx import NGINX
from secperf.workloads.base import (
    MeasureContext,
    WorkloadKind,
    WorkloadPoint,
)
from secperf.workloads.parts import open_loop
from secperf.workloads.parts.http import HttpWorkload, fetch_test
from secperf.workloads.parts.sources import enough_sources


@dataclass(frozen=True)
class HttpExecutor:
    def measure(self, ctx: MeasureContext, point: WorkloadPoint[HttpWorkload]) -> Record:
        return fetch_test(ctx, point.spec, ctx.keep)


FETCH_RATE = Metric("fetch_rate", "Fetch rate", "fetches/s", True, True)
HTTP_THROUGHPUT = Metric("http_throughput", "Transfer rate", "Mbit/s", True, False)
FIRST_BYTE = Metric("first_byte_mean_us", "First byte mean", "µs", False, False)
FETCH_P99 = Metric("fetch_p99_us", "Fetch p99", "µs", False, False)
CONNECT_MEAN = Metric("connect_mean_us", "Connect mean", "µs", False, False)
HANDSHAKE_MEAN = Metric("handshake_mean_us", "TLS handshake mean", "µs", False, False)
SD_FETCH = Metric("sd_cpu_us_per_fetch", "Service demand", "CPU µs/fetch", False, False)

METRICS: tuple[MetricRow, ...] = (
    (FETCH_RATE, field("fetches_per_second")),
    (HTTP_THROUGHPUT, throughput),
    (SD_FETCH, service_demand(field("fetches"))),
    (CONNECT_MEAN, sub_latency("connect", "mean")),
    (HANDSHAKE_MEAN, sub_latency("handshake", "mean")),
    (FIRST_BYTE, sub_latency("first_byte", "mean")),
    (FETCH_P99, sub_latency("total", "p99")),
    (FAILURES, ratio_pct),
)

KIND = WorkloadKind(
    name="http",
    model=HttpWorkload,
    executor=HttpExecutor(),
    metrics=METRICS,
    work_unit=("fetch", field("fetches")),
    offered=open_loop.offered(FETCH_RATE),
    validate=enough_sources,
    tools=lambda _spec: (NGINX,),
)
