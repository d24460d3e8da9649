"""The NSTL load of document 001: virtual clients fetching over HTTP and FTP from
every server host of the graph, through whatever the DUT is.

Every server host runs nginx (HTTP, port 5380) and vsftpd (FTP, port 5321, passive),
started once per testbed and serving one file per size of the size sets. The
virtual clients are spread round-robin over the client hosts; each does `requests`
fetches one after the other, no think time: a server drawn by the hit table (`hits`:
one weight per server host in graph order, for every client or per client zone as
the paper's Table 2; absent, even odds over the servers outside the client's own
zone, so every fetch crosses the DUT), a protocol by
that server's HTTP share (`http_share`; default the paper's Table 1, alternately
90/10 and 10/90 HTTP/FTP), and a file from the protocol's size set (HTTP: HTML or
GIF, even odds). HTTP is one HTTP/1.0-style GET per new connection, FTP an
anonymous login, a passive RETR and QUIT per fetch.

The clients are a small Python driver (`http.client`, `ftplib` from the standard
library) run in each client host, one thread per virtual client: secperf-engine has
no FTP client yet (docs/methodology.md, "Application proxy"). Its CPU counts for
the client hosts; at high client counts it, not the DUT, may be the limit, which
the record's host_cpu shows.

Result: transactions per minute (successful fetches over the wall time from the
first request to the last answer), failures in % of attempts by kind (connect,
timeout, short transfer, refused: an HTTP status other than 200 or an FTP error
reply), Mbit/s of payload received, fetch time percentiles per protocol.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secperf.engine import Record
from secperf.errors import SecperfError
from secperf.scenario.sweep import WorkloadPoint
from secperf.services.nginx import HTTP_PORT, Nginx, start_nginx
from secperf.services.vsftpd import FTP_PORT, Vsftpd, start_vsftpd
from secperf.testbed.testbed import ManagedProcess
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext

FAILURE_KINDS = ("connect", "timeout", "short", "refused")
# Table 1 of the paper: servers alternate a 90/10 and a 10/90 HTTP/FTP mix.
DEFAULT_SHARES = (0.9, 0.1)

_SERVERS: dict[str, dict[str, tuple[Nginx, Vsftpd]]] = {}


class MixError(SecperfError):
    """The mix workload cannot run on this testbed as configured."""


DRIVER = r"""
import ftplib, http.client, json, random, socket, sys, threading, time
a = json.loads(sys.argv[1])
out = []
lock = threading.Lock()

def http_get(addr, size):
    c = http.client.HTTPConnection(addr, a["http_port"], timeout=a["timeout"])
    try:
        c.request("GET", "/files/%d.bin" % size, headers={"Connection": "close"})
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            return "refused", len(body)
        return (None if len(body) == size else "short"), len(body)
    finally:
        c.close()

def ftp_get(addr, size):
    got = [0]
    f = ftplib.FTP(timeout=a["timeout"])
    f.connect(addr, a["ftp_port"])
    try:
        f.login()
        f.retrbinary("RETR files/%d.bin" % size, lambda b: got.__setitem__(0, got[0] + len(b)))
        try:
            f.quit()
        except Exception:
            pass
    finally:
        f.close()
    return (None if got[0] == size else "short"), got[0]

def client(i):
    rng = random.Random("%s/%d" % (a["seed"], i))
    servers = a["servers"]
    weights = [s["hit"] for s in servers]
    mine = []
    for _ in range(a["requests"]):
        s = rng.choices(servers, weights)[0]
        proto = "http" if rng.random() < s["http_share"] else "ftp"
        if proto == "http":
            size = rng.choice(a["html"] if rng.random() < 0.5 else a["gif"])
        else:
            size = rng.choice(a["ftp"])
        t0 = time.time()
        try:
            fail, n = (http_get if proto == "http" else ftp_get)(s["addr"], size)
        except socket.timeout:
            fail, n = "timeout", 0
        except (ConnectionRefusedError, ConnectionResetError) as e:
            fail, n = ("connect" if isinstance(e, ConnectionRefusedError) else "short"), 0
        except ftplib.Error:
            fail, n = "refused", 0
        except OSError as e:
            fail, n = ("timeout" if "timed out" in str(e) else "connect"), 0
        except (http.client.HTTPException, EOFError):
            fail, n = "short", 0
        mine.append([proto, fail, n, t0, time.time()])
    with lock:
        out.extend(mine)

threads = [threading.Thread(target=client, args=(i,)) for i in a["ids"]]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(out))
"""


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
        seed = f"{ctx.variant}/{point.point_id}/{time.monotonic_ns()}"
        started: list[tuple[str, ManagedProcess]] = []
        cpu_before = {
            name: ctx.testbed.host(name).cpu_seconds()
            for name in topo.roles
            if not topo.host(name).is_switch
        }
        for i, name in enumerate(clients):
            ids = list(range(i, n, len(clients)))
            if not ids:
                continue
            weights = hit_weights(topo, name, servers, hits)
            args = {
                "ids": ids,
                "requests": requests,
                "seed": seed,
                "timeout": timeout,
                "http_port": HTTP_PORT,
                "ftp_port": FTP_PORT,
                "html": html,
                "gif": gif,
                "ftp": ftp,
                "servers": [
                    {"addr": topo.primary_address(s), "hit": w, "http_share": sh}
                    for s, w, sh in zip(servers, weights, shares, strict=True)
                    if w > 0
                ],
            }
            proc = ctx.testbed.host(name).spawn(
                ["python3", "-c", DRIVER, json.dumps(args)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                label="mix-driver",
            )
            started.append((name, proc))
        budget = requests * (timeout * 3 + 1) + 30
        rows: list[list[Any]] = []
        for name, proc in started:
            try:
                out, err = proc.popen.communicate(timeout=budget)
            except subprocess.TimeoutExpired:
                for _, other in started:
                    other.stop()
                raise MixError(
                    f"the mix driver in {name} did not finish within {budget:.0f} s"
                ) from None
            proc.stop()
            if proc.returncode != 0:
                raise MixError(f"the mix driver in {name} failed: {err.strip()[-500:]}")
            rows += json.loads(out)
        record = summarize(rows, n)
        host_cpu: dict[str, float] = {}
        for name, before in cpu_before.items():
            after = ctx.testbed.host(name).cpu_seconds()
            if before is not None and after is not None:
                host_cpu[name] = after - before
        if host_cpu:
            record["host_cpu"] = host_cpu
        ctx.keep(record)
        return record
