"""Kind `http`: http_load against nginx in the server host: fetches/s, bytes/s,
latencies, errors.

nginx starts once per testbed (on the first measurement) and stays up; it is
spawned through the server host, so the testbed's ledger owns it and teardown
stops it. Files are written into its web root as workloads ask for them.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, PlainValidator, model_validator

from secperf.engine import Record, run_test
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
from secperf.schema.fields import (
    FileSizes,
    Timeout,
    bounded,
    check_file_sets_total,
    one_or_sweep,
    parse_count,
)
from secperf.services.nginx import HTTP_PORT, Nginx, start_nginx
from secperf.workloads import open_loop
from secperf.workloads.base import (
    MeasureContext,
    WorkloadKind,
    WorkloadPoint,
    WorkloadSpec,
    engine_spec,
)
from secperf.workloads.open_loop import OpenLoop

# Connections in flight: machines of the engine's event loop, not threads.
HttpParallel = Annotated[
    int | list[int], PlainValidator(one_or_sweep(bounded(parse_count, 1, 10_000, "parallel")))
]


class HttpWorkload(OpenLoop, WorkloadSpec):
    """HTTP/1.1 GETs against nginx in the server host (http_load): fetches/s, bytes/s.

    The files (one per size) are fetched round-robin. `parallel` fetches in flight
    as fast as they go, or with `rate` that many new fetches a second (parallel is
    then the most in flight), or with `load` that share of the baseline's closed-loop
    fetch rate, measured first."""

    sweepable: ClassVar[dict[str, str]] = {"parallel": "count"}
    engine_fields: ClassVar[tuple[str, ...]] = (
        "parallel",
        "keepalive",
        "timeout",
        "duration",
        "warmup",
        "rate",
    )

    kind: Literal["http"]
    files: FileSizes = Field(default_factory=lambda: [10240])
    parallel: HttpParallel = 1
    keepalive: bool = False
    timeout: Timeout = 5.0

    @model_validator(mode="after")
    def _files_total(self) -> HttpWorkload:
        check_file_sets_total({"files": self.files})
        return self

    def unrecorded(self) -> frozenset[str]:
        return self.closed_loop_keys()

    def default_name(self) -> str:
        return "http"


# One nginx per testbed, keyed by the testbed's prefix (unique per run).
_NGINX: dict[str, Nginx] = {}


def hostport(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def target_address(ctx: MeasureContext) -> str:
    """The server address this variant reaches (the engine target without its port)."""
    host = ctx.target.rsplit(":", 1)[0]
    return host.strip("[]")


def nginx_for(ctx: MeasureContext) -> Nginx:
    """The testbed's nginx, started in the server host the first time it is needed."""
    key = ctx.testbed.prefix
    server = _NGINX.get(key)
    if server is not None and server.alive():
        return server
    base = ctx.extra.get("files_dir")
    root = Path(base) if base else Path(tempfile.mkdtemp(prefix=f"secperf-{key}-"))
    server = start_nginx(
        ctx.testbed.host(ctx.server),
        root / "nginx",
        ctx.topology.server_address(ctx.family, "dut", ctx.server),
        ipv6=ctx.family == 6,
    )
    _NGINX[key] = server
    return server


def forget(prefix: str) -> None:
    """Drop (and stop) the nginx of a testbed, e.g. in tests that reuse nothing."""
    server = _NGINX.pop(prefix, None)
    if server is not None:
        server.stop()


@dataclass(frozen=True)
class HttpExecutor:
    def measure(self, ctx: MeasureContext, point: WorkloadPoint[HttpWorkload]) -> Record:
        p = point.spec
        server = nginx_for(ctx)
        urls = server.serve(list(p.files))
        spec = engine_spec(
            p, server=hostport(target_address(ctx), HTTP_PORT), urls=urls, interval=0
        )
        budget = p.duration + p.warmup + 2 * p.timeout + 15
        return run_test(
            ctx.testbed.host(ctx.client), spec, on_record=ctx.keep, timeout=budget
        ).result


FETCH_RATE = Metric("fetch_rate", "Fetch rate", "fetches/s", True, True)
HTTP_THROUGHPUT = Metric("http_throughput", "Transfer rate", "Mbit/s", True, False)
FIRST_BYTE = Metric("first_byte_mean_us", "First byte mean", "µs", False, False)
FETCH_P99 = Metric("fetch_p99_us", "Fetch p99", "µs", False, False)
CONNECT_MEAN = Metric("connect_mean_us", "Connect mean", "µs", False, False)
SD_FETCH = Metric("sd_cpu_us_per_fetch", "Service demand", "CPU µs/fetch", False, False)

METRICS: tuple[MetricRow, ...] = (
    (FETCH_RATE, field("fetches_per_second")),
    (HTTP_THROUGHPUT, throughput),
    (SD_FETCH, service_demand(field("fetches"))),
    (CONNECT_MEAN, sub_latency("connect", "mean")),
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
)
