"""The NSTL load of document 001: virtual clients fetching over HTTP and FTP from
every server host of the graph, through whatever the DUT is.

Every server host runs nginx (HTTP, port 5380) and vsftpd (FTP, port 5321, passive
and active), started once per testbed and serving one file per size of the size
sets. The virtual clients are spread round-robin over the client hosts and run in
secperf-engine (kind `mix`, one engine process per client host, one thread per
virtual client); each does `requests` fetches one after the other, `think` seconds
apart (default none): a server drawn by the hit table (`hits`: one weight per server
host in graph order, for every client or per client zone as the paper's Table 2;
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secperf.engine import EngineTest, Record
from secperf.errors import EngineError, SecperfError
from secperf.scenario.sweep import WorkloadPoint
from secperf.services.nginx import HTTP_PORT, Nginx, start_nginx
from secperf.services.vsftpd import FTP_PORT, Vsftpd, start_vsftpd
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext

FAILURE_KINDS = ("connect", "timeout", "short", "refused")
# Table 1 of the paper: servers alternate a 90/10 and a 10/90 HTTP/FTP mix.
DEFAULT_SHARES = (0.9, 0.1)

_SERVERS: dict[str, dict[str, tuple[Nginx, Vsftpd]]] = {}


class MixError(SecperfError):
    """The mix workload cannot run on this testbed as configured."""


def _ints(value: object) -> list[int]:
    return [int(str(v)) for v in value] if isinstance(value, list) else []


def _floats(value: object) -> list[float]:
    return [float(str(v)) for v in value] if isinstance(value, list) else []


def hit_weights(topology: Topology, client: str, servers: list[str], hits: object) -> list[float]:
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
        return _per_server(_floats(hits[zone]), servers, f"hits.{zone}", [])
    if isinstance(hits, list) and hits:
        return _per_server(_floats(hits), servers, "hits", [])
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
            web = start_nginx(host, root / "mix" / name / "nginx", addr)
            ftp = start_vsftpd(host, root / "mix" / name / "vsftpd", addr)
            pair = running[name] = (web, ftp)
        pair[0].serve(sizes)
        pair[1].serve(sizes)
    return running


def forget(prefix: str) -> None:
    for web, ftp in _SERVERS.pop(prefix, {}).values():
        web.stop()
        ftp.stop()


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

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        p = point.params
        topo = ctx.topology
        clients = list(topo.hosts_with(role="client"))
        servers = list(topo.hosts_with(role="server"))
        if not clients or not servers:
            raise MixError(
                "the mix workload needs client and server hosts in [topology]",
                fix="give [topology.zones.NAME] clients and servers",
            )
        html, gif, ftp = (_ints(p.get(k)) for k in ("html_files", "gif_files", "ftp_files"))
        hits = p.get("hits")
        default_shares = [DEFAULT_SHARES[i % 2] for i in range(len(servers))]
        shares = _per_server(_floats(p.get("http_share")), servers, "http_share", default_shares)
        servers_for(ctx, sorted(set(html + gif + ftp)))
        n = int(str(p["virtual_clients"]))
        requests = int(str(p["requests"]))
        timeout = float(str(p["timeout"]))
        think = float(str(p.get("think") or 0))
        seed = f"{ctx.variant}/{point.point_id}/{time.monotonic_ns()}"
        cpu_before = {
            name: ctx.testbed.host(name).cpu_seconds()
            for name in topo.roles
            if not topo.host(name).is_switch
        }
        # A circuit-level proxy (SOCKS) is not transparent: the clients name it.
        socks = None
        for mech, mctx in ctx.mechanisms:
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
                        "ftp_mode": str(p.get("ftp_mode") or "passive"),
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
        record["ftp_mode"] = str(p.get("ftp_mode") or "passive")
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
