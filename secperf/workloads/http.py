"""http_load against nginx in the server host: fetches/s, bytes/s, latencies, errors.

nginx starts once per testbed (on the first measurement) and stays up; it is
spawned through the server host, so the testbed's ledger owns it and teardown
stops it. Files are written into its web root as workloads ask for them.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secperf.engine import Record, run_test
from secperf.scenario.sweep import WorkloadPoint
from secperf.services.nginx import HTTP_PORT, Nginx, start_nginx
from secperf.workloads.base import MeasureContext

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


def engine_spec(params: dict[str, Any], urls: list[str], server: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "http",
        "server": server,
        "urls": urls,
        "parallel": params.get("parallel", 1),
        "keepalive": bool(params.get("keepalive", False)),
        "timeout": float(params.get("timeout") or 5.0),
        "duration": float(str(params.get("duration", 5.0))),
        "warmup": float(str(params.get("warmup", 1.0))),
        "interval": 0,
    }
    if params.get("rate") is not None:
        spec["rate"] = float(str(params["rate"]))
    return spec


@dataclass(frozen=True)
class HttpExecutor:
    hosts: frozenset[str] = frozenset()

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        server = nginx_for(ctx)
        files = point.params.get("files")
        sizes = [int(str(s)) for s in files] if isinstance(files, list) else [10240]
        urls = server.serve(sizes)
        spec = engine_spec(dict(point.params), urls, hostport(target_address(ctx), HTTP_PORT))
        budget = spec["duration"] + spec["warmup"] + 2 * spec["timeout"] + 15
        return run_test(
            ctx.testbed.host(ctx.client), spec, on_record=ctx.keep, timeout=budget
        ).result
