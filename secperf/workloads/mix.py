"""The NSTL load of document 001: virtual clients fetching over HTTP and FTP from
every server host of the graph, through whatever the DUT is.

Every server host runs nginx (HTTP, port 5380) and vsftpd (FTP, port 5321, passive
and active), started once per testbed and serving one file per size of the size
sets. The virtual clients are spread round-robin over the client hosts and run in
secperf-engine (kind `mix`, one engine process per client host, each virtual client
a state machine of its event loop, a thread per CPU); each does `requests` fetches
one after the other, `think` seconds apart (default none): a server drawn by the
hit table (`hits`: one weight per server host in graph order, for every client or
per client zone as the paper's Table 2;
absent, even odds over the servers outside the client's own zone, so every fetch
crosses the DUT), a protocol by that server's HTTP share (`http_share`; default the
paper's Table 1, alternately 90/10 and 10/90 HTTP/FTP), and a file from the
protocol's size set (HTTP: HTML or GIF, even odds). HTTP is one GET per new
connection (`Connection: close`), FTP an anonymous login, a passive (or, with
`ftp_mode = "active"`, active) RETR and QUIT per fetch.

Result: transactions per minute (successful fetches over the wall time from the
first request to the last answer, over every client host), failures in % of
attempts by kind (connect, timeout, short transfer, refused: an HTTP status other
than 2xx or an FTP error reply), Mbit/s of payload received, fetch time percentiles
per protocol. The engines report every fetch; this module merges them.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, PlainValidator, model_validator

from secperf.engine import EngineTest, Record
from secperf.errors import EngineError, ScenarioError, SecperfError
from secperf.mechanisms.capabilities import SocksEndpoint
from secperf.metric import (
    Metric,
    MetricRow,
    field,
    path,
    ratio_pct,
    service_demand,
    throughput,
)
from secperf.metric import Record as RecordView
from secperf.schema.fields import (
    FileSizes,
    Timeout,
    bounded,
    check_file_sets_total,
    one_or_sweep,
    parse_count,
)
from secperf.services.nginx import HTTP_PORT, NGINX, Nginx, forget_testbed, testbed_nginx
from secperf.services.vsftpd import FTP_PORT, VSFTPD, Vsftpd, start_vsftpd
from secperf.testbed.topology import Topology
from secperf.workloads.base import (
    CheckContext,
    MeasureContext,
    WorkloadKind,
    WorkloadPoint,
    WorkloadSpec,
    scalar,
)

# Virtual clients: machines of each client host's engine event loop, not threads.
VirtualClients = Annotated[
    int | list[int],
    PlainValidator(one_or_sweep(bounded(parse_count, 1, 10_000, "virtual clients"))),
]
Share = Annotated[float, Field(ge=0, le=1)]
Weight = Annotated[float, Field(ge=0)]


class MixWorkload(WorkloadSpec):
    """Document 001's NSTL load: virtual clients over the client hosts, each doing
    `requests` HTTP or FTP fetches from the server hosts (a server by the hit table,
    a protocol by that server's HTTP share, a file from the size sets), no think
    time: transactions per minute, failures by kind, Mbit/s. `duration` and
    `warmup` do not apply: a point lasts until every request is answered."""

    sweepable: ClassVar[dict[str, str]] = {"virtual_clients": "count"}

    kind: Literal["mix"]
    virtual_clients: VirtualClients = 1
    """NSTL virtual clients fetching at once, each from every server host in turn."""
    requests: int = Field(default=100, ge=1, le=100_000)
    """1 … 100000 fetches per virtual client."""
    # One weight per server host (graph order) for every client, or a list per client
    # zone (the paper's Table 2); empty: even odds over the servers of other zones.
    hits: list[Weight] | dict[str, list[Weight]] = Field(default_factory=list)
    """One weight ≥ 0 per server host (graph order), or one for all."""
    http_share: list[Share] = Field(default_factory=list)
    """0 … 1 per server host, or one for all."""
    # The paper's file sets (KiB): HTML 1-80, GIF 0.5-208, FTP (ZIP) 32-256.
    html_files: FileSizes = Field(
        default_factory=lambda: [k * 1024 for k in (1, 2, 4, 8, 10, 20, 40, 80)]
    )
    """The HTML files' sizes (the paper's HTML set, 1 … 80 KiB)."""
    gif_files: FileSizes = Field(
        default_factory=lambda: [512] + [k * 1024 for k in (1, 2, 4, 10, 26, 52, 104, 208)]
    )
    """The GIF files' sizes (the paper's GIF set, 0.5 … 208 KiB)."""
    ftp_files: FileSizes = Field(default_factory=lambda: [k * 1024 for k in (32, 64, 128, 256)])
    """The three sets: 1 B … 1 GiB each file, distinct in a set, at most 1 GiB in all."""
    timeout: Timeout = 10.0  # idle timeout of every step of a fetch (connect, each read)
    """> 0 … 120: the longest any one step of a fetch may wait (connect, a reply, each read), as a
    socket timeout.
    """
    think: float = Field(default=0.0, ge=0, le=3600)  # seconds between a client's requests
    """0 … 3600: pause between a virtual client's requests."""
    ftp_mode: Literal["passive", "active"] = "passive"  # who opens FTP's data connection
    """`"passive"` (the client opens the data connection), `"active"` (PORT: the server, or the
    proxy, connects back).
    """

    @model_validator(mode="after")
    def _files_total(self) -> MixWorkload:
        check_file_sets_total(self.file_sets())
        return self

    def file_sets(self) -> dict[str, list[int]]:
        return {
            "html_files": self.html_files,
            "gif_files": self.gif_files,
            "ftp_files": self.ftp_files,
        }

    def default_name(self) -> str:
        return "mix"


FAILURE_KINDS = ("connect", "timeout", "short", "refused")
# Table 1 of the paper: servers alternate a 90/10 and a 10/90 HTTP/FTP mix.
DEFAULT_SHARES = (0.9, 0.1)

_SERVERS: dict[str, dict[str, tuple[Nginx, Vsftpd]]] = {}


class MixError(SecperfError):
    """The mix workload cannot run on this testbed as configured."""


Hits = list[float] | dict[str, list[float]]


def hit_weights(topology: Topology, client: str, servers: list[str], hits: Hits) -> list[float]:
    """The client's weight for each server: `hits` as a list for every client, a
    dict of lists by the client's zone, or absent: even odds over the servers
    outside the client's zone (all of them when that leaves none)."""
    zone = topology.host(client).zone
    if isinstance(hits, dict):
        if zone not in hits:
            raise MixError(
                f"mix workload: hits has no list for zone {zone!r} (client host {client})",
                fix=f"add hits.{zone} = [one weight per server host], or give one list",
            )
        return _per_server([float(v) for v in hits[zone]], servers, f"hits.{zone}", [])
    if hits:
        return _per_server([float(v) for v in hits], servers, "hits", [])
    other = [1.0 if topology.host(s).zone != zone else 0.0 for s in servers]
    return other if any(other) else [1.0] * len(servers)


def _per_server(
    values: list[float], servers: list[str], key: str, default: list[float]
) -> list[float]:
    if not values:
        return default
    if len(values) == 1:
        return values * len(servers)
    if len(values) != len(servers):
        raise MixError(
            f"mix workload: {key} has {len(values)} values but the testbed has "
            f"{len(servers)} server hosts ({', '.join(servers)})",
            fix=f"give {key} one value per server host in graph order, or one for all",
        )
    return values


def servers_for(ctx: MeasureContext, sizes: list[int]) -> dict[str, tuple[Nginx, Vsftpd]]:
    """nginx and vsftpd on every server host, started once per testbed."""
    key = ctx.testbed.prefix
    running = _SERVERS.setdefault(key, {})
    base = ctx.extra.get("files_dir")
    root = Path(base) if base else Path(tempfile.mkdtemp(prefix=f"secperf-{key}-mix-"))
    for name in ctx.topology.hosts_with(role="server"):
        pair = running.get(name)
        if pair is None or not (pair[0].alive() and pair[1].alive()):
            host = ctx.testbed.host(name)
            addr = ctx.topology.primary_address(name)
            # the host's one nginx, shared with the http workload (same port)
            web = testbed_nginx(key, host, root / "web" / name, addr)
            ftp = start_vsftpd(host, root / "mix" / name / "vsftpd", addr)
            pair = running[name] = (web, ftp)
        pair[0].serve(sizes)
        pair[1].serve(sizes)
    return running


def forget(prefix: str) -> None:
    for _web, ftp in _SERVERS.pop(prefix, {}).values():
        ftp.stop()
    forget_testbed(prefix)


def proc_stat() -> tuple[list[int], int]:
    """/proc/stat's aggregate CPU line (ticks) and the number of CPUs."""
    lines = Path("/proc/stat").read_text().splitlines()
    cpus = sum(1 for ln in lines if ln.startswith("cpu") and not ln.startswith("cpu "))
    return [int(x) for x in lines[0].split()[1:9]], cpus


def machine_cpu(
    before: tuple[list[int], int], after: tuple[list[int], int], window: float
) -> Record:
    """The machine's CPU between two proc_stat() readings, as the engine reports it:
    busy = all but idle, iowait and steal."""
    hz = float(os.sysconf("SC_CLK_TCK"))
    d = [(b - a) / hz for a, b in zip(before[0], after[0], strict=True)]
    total = sum(d)
    return {
        "busy_s": max(0.0, total - d[3] - d[4] - d[7]),
        "total_s": total,
        "softirq_s": d[6],
        "irq_s": d[5],
        "cpus": after[1],
        "window_s": window,
    }


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarize(rows: list[list[Any]], virtual_clients: int) -> Record:
    """The result record from every fetch's [proto, failure, bytes, start, end]."""
    attempted = len(rows)
    ok = [r for r in rows if r[1] is None]
    start = min((r[3] for r in rows), default=0.0)
    end = max((r[4] for r in rows), default=0.0)
    elapsed = end - start
    nbytes = sum(int(r[2]) for r in ok)
    failures = {k: sum(1 for r in rows if r[1] == k) for k in FAILURE_KINDS}
    per_proto: dict[str, Any] = {}
    for proto in ("http", "ftp"):
        mine = [r for r in rows if r[0] == proto]
        times = [(r[4] - r[3]) * 1e3 for r in mine if r[1] is None]
        per_proto[proto] = {
            "attempted": len(mine),
            "ok": len(times),
            "failed": len(mine) - len(times),
            "bytes": sum(int(r[2]) for r in mine if r[1] is None),
            "fetch_ms": {
                "count": len(times),
                "p50": _percentile(times, 0.5),
                "p95": _percentile(times, 0.95),
                "p99": _percentile(times, 0.99),
                "mean": sum(times) / len(times) if times else None,
            },
        }
    measured = elapsed > 0 and attempted > 0
    return {
        "type": "result",
        "kind": "mix",
        "virtual_clients": virtual_clients,
        "attempted": attempted,
        "transactions": len(ok),
        "elapsed_s": elapsed if measured else None,
        "tpm": len(ok) / elapsed * 60 if measured else None,
        "bytes": nbytes,
        "bits_per_second": nbytes * 8 / elapsed if measured else None,
        "failure_ratio": (attempted - len(ok)) / attempted if attempted else None,
        "failures": failures,
        "protocols": per_proto,
    }


@dataclass(frozen=True)
class MixExecutor:
    hosts: frozenset[str] = frozenset()

    def measure(self, ctx: MeasureContext, point: WorkloadPoint[MixWorkload]) -> Record:
        p = point.spec
        topo = ctx.topology
        clients = list(topo.hosts_with(role="client"))
        servers = list(topo.hosts_with(role="server"))
        if not clients or not servers:
            raise MixError(
                "the mix workload needs client and server hosts in [topology]",
                fix="give [topology.zones.NAME] clients and servers",
            )
        html, gif, ftp = p.html_files, p.gif_files, p.ftp_files
        hits = p.hits
        default_shares = [DEFAULT_SHARES[i % 2] for i in range(len(servers))]
        shares = _per_server(list(p.http_share), servers, "http_share", default_shares)
        servers_for(ctx, sorted(set(html + gif + ftp)))
        n = scalar(p.virtual_clients)
        requests = p.requests
        timeout = p.timeout
        think = p.think
        # Common random numbers: in a round every variant (and the baseline) makes the
        # same requests, each virtual client the same files from the same servers, so
        # the paired difference holds the mechanism's cost, not two different draws of
        # 32-256 KB files; the next round draws anew, and the run's seed ([repeat]
        # seed, order_seed in run.json) draws the same again.
        seed = f"{ctx.seed}/{point.point_id}/round {ctx.rep}"
        cpu_before = {
            name: ctx.testbed.host(name).cpu_seconds()
            for name in topo.roles
            if not topo.host(name).is_switch
        }
        # A circuit-level proxy (SOCKS) is not transparent: the clients name it.
        socks = None
        for mech, mctx in ctx.mechanisms:
            if isinstance(mech, SocksEndpoint):
                socks = mech.socks_endpoint(mctx) or socks
        stat_before, t_before = proc_stat(), time.monotonic()
        specs: list[tuple[str, dict[str, Any]]] = []
        for i, name in enumerate(clients):
            ids = list(range(i, n, len(clients)))
            if not ids:
                continue
            weights = hit_weights(topo, name, servers, hits)
            specs.append(
                (
                    name,
                    {
                        "kind": "mix",
                        "clients": ids,
                        "requests": requests,
                        "seed": seed,
                        "timeout": timeout,
                        "think": think,
                        "ftp_mode": p.ftp_mode,
                        "http_port": HTTP_PORT,
                        "ftp_port": FTP_PORT,
                        "html_files": html,
                        "gif_files": gif,
                        "ftp_files": ftp,
                        "servers": [
                            {"address": topo.primary_address(s), "hit": w, "http_share": sh}
                            for s, w, sh in zip(servers, weights, shares, strict=True)
                            if w > 0
                        ],
                        # The workload reads every host's CPU itself, over all engines.
                        "cpu_groups": [],
                        **({"socks": socks} if socks else {}),
                    },
                )
            )
        # An idle timeout per step: a fetch is a handful of steps; think time between.
        budget = requests * (timeout * 3 + think + 1) + 30
        started: list[tuple[str, EngineTest]] = []
        try:
            for name, spec in specs:
                started.append((name, EngineTest(ctx.testbed.host(name), spec, timeout=budget)))
            results = [(name, test.collect().result) for name, test in started]
        except EngineError:
            for _, test in started:
                test.stop()
            raise
        rows: list[list[Any]] = []
        per_host: dict[str, Any] = {}
        for name, res in results:
            fetches = res.get("fetches")
            if not isinstance(fetches, list):
                raise MixError(f"the mix engine in {name} returned no fetches")
            rows += [[r[0], r[1], r[2], r[3], r[4]] for r in fetches]
            per_host[name] = {
                k: res.get(k) for k in ("virtual_clients", "attempted", "transactions", "tpm")
            }
        record = summarize(rows, n)
        record["client_hosts"] = per_host
        record["ftp_mode"] = p.ftp_mode
        if socks:
            record["socks"] = socks
        host_cpu: dict[str, float] = {}
        for name, before in cpu_before.items():
            after = ctx.testbed.host(name).cpu_seconds()
            if before is not None and after is not None:
                host_cpu[name] = after - before
        if host_cpu:
            record["host_cpu"] = host_cpu
            record["machine_cpu"] = machine_cpu(
                stat_before, proc_stat(), time.monotonic() - t_before
            )
        ctx.keep(record)
        return record


def check_hits(spec: MixWorkload, ctx: CheckContext) -> None:
    """The hit table and HTTP shares need one value per server host of the scenario's
    graph (or a single value for all), and hit lists keyed by zone need a list for
    every zone with clients: refused at check time, naming the key."""
    topo = ctx.topology()
    servers = list(topo.hosts_with(role="server"))
    zones = sorted({str(topo.host(c).zone) for c in topo.hosts_with(role="client")})
    i = ctx.index

    def refuse(path: tuple[str | int, ...], what: str, fix: str) -> None:
        key = "workloads[{}].{}".format(path[1], ".".join(str(p) for p in path[2:]))
        raise ScenarioError(f"{key}: {what}", where=ctx.where(path), fix=fix)

    order = ", ".join(servers)
    lists: list[tuple[tuple[str | int, ...], list[float]]] = []
    if isinstance(spec.hits, dict):
        for zone in zones:
            if zone not in spec.hits:
                refuse(
                    ("workloads", i, "hits"),
                    f"no hit list for zone {zone!r}, which has client hosts",
                    f"add {zone} = [one weight per server host: {order}]",
                )
        for zone, values in spec.hits.items():
            if zone not in zones:
                refuse(
                    ("workloads", i, "hits", zone),
                    f"zone {zone!r} has no client hosts (zones with clients: {', '.join(zones)})",
                    "key each list by a zone that has clients",
                )
            lists.append((("workloads", i, "hits", zone), [float(v) for v in values]))
    elif spec.hits:
        lists.append((("workloads", i, "hits"), [float(v) for v in spec.hits]))
    if spec.http_share:
        lists.append((("workloads", i, "http_share"), [float(v) for v in spec.http_share]))
    for path_, values in lists:
        if len(values) not in (1, len(servers)):
            refuse(
                path_,
                f"has {len(values)} values but the graph has {len(servers)} server hosts ({order})",
                "give one value per server host in that order, or a single value for all",
            )


TPM = Metric("tpm", "Transactions per minute", "TPM", True, True)
MIX_MBPS = Metric("mix_throughput", "Transfer rate", "Mbit/s", True, False)
MIX_FAILURES = Metric("mix_failure_pct", "Failures", "%", False, False)
MIX_FAIL_KIND = {
    kind: Metric(f"mix_failure_{kind}_pct", f"Failures: {kind}", "%", False, False)
    for kind in FAILURE_KINDS
}
MIX_P95 = {
    proto: Metric(f"{proto}_fetch_p95_ms", f"{proto.upper()} fetch p95", "ms", False, False)
    for proto in ("http", "ftp")
}
SD_TRANSACTION = Metric("sd_cpu_us_per_transaction", "Service demand", "CPU µs/trans", False, False)


def _failure_pct(kind: str) -> Callable[[RecordView], float | None]:
    def get(r: RecordView) -> float | None:
        n, attempted = path(r, "failures", kind), path(r, "attempted")
        return None if n is None or not attempted else n / attempted * 100.0

    return get


METRICS: tuple[MetricRow, ...] = (
    (TPM, field("tpm")),
    (MIX_FAILURES, ratio_pct),
    (MIX_MBPS, throughput),
    *((MIX_FAIL_KIND[k], _failure_pct(k)) for k in MIX_FAIL_KIND),
    # None when none of the protocol's fetches succeeded
    *((MIX_P95[p], field("protocols", p, "fetch_ms", "p95")) for p in MIX_P95),
    (SD_TRANSACTION, service_demand(field("transactions"))),
)

# What a fetch costs beyond its bytes (connect, request, a proxy's look-up), seconds.
FETCH_S = 0.02


def planned_seconds(spec: MixWorkload, link_bps: int | None) -> float:
    """A point lasts until every request is answered: every client's fetches (the
    files' mean size at the scenario's slowest link rate, else 1 Gbit/s, shared by the
    clients at once) and each client's own fetches one after another."""
    sizes = [*spec.html_files, *spec.gif_files, *spec.ftp_files]
    mean_bytes = sum(sizes) / len(sizes)
    fetches = spec.requests * int(scalar(spec.virtual_clients))
    rate = link_bps or 1_000_000_000
    return fetches * mean_bytes * 8 / rate + spec.requests * (FETCH_S + spec.think)


KIND = WorkloadKind(
    name="mix",
    model=MixWorkload,
    executor=MixExecutor(),
    test_seconds=planned_seconds,
    metrics=METRICS,
    work_unit=("trans", field("transactions")),
    preflight=check_hits,
    tools=lambda _spec: (NGINX, VSFTPD),
)
