"""secperf-engine's HTTP and FTP clients against wrk and curl, on the same servers,
in one run (root: through the forwarding DUT of a client–dut–server testbed).

Interleaved pairs (engine, peer, engine, peer, ...) of each test; the ratio is the
median of the per-pair ratios:

  http keep-alive cC  engine http, keepalive, `parallel` C, T threads
                                                            vs  wrk -tT -cC
  http close cC       engine http, a new connection per fetch (nginx closes first
                      after its response, as for wrk's header)
                                                            vs  wrk -tT -cC -H "Connection: close"
                      for each C of --connections (default 1, 32 and 1,000); the engine
                      twice, as it is by default and with a busy poll of --busy-poll µs
                      (`busy_poll_us`, default 50; 0 leaves that run out)

Placement (--placement): `pinned` (the default) pins nginx and vsftpd to CPU 0 and the
client, either tool, to CPU 1 with one event-loop thread (T = 1): the server and the
client each have a CPU, the same for both tools, and the run-to-run spread of a
shared placement (three busy threads on two CPUs, wherever the scheduler puts them)
is gone. `shared` pins nothing and gives both tools T = min(C, --threads) threads
(default one per CPU). Both tools get the same response timeout (--timeout, 10 s).
  ftp small         engine mix (FTP only, 1 client, N fetches of 64 KiB, a new
                    control connection and login each)      vs  curl fetching the same
                                                                URL N times in one process
  ftp small each    the same                                 vs  one curl process per fetch
  ftp bulk          engine mix, one 64 MiB fetch             vs  curl, one 64 MiB fetch

All against one nginx and one vsftpd in the server namespace. CPU is taken alike
for both tools: utime+stime of the client process from /proc/PID/stat once it has
exited (before it is reaped), and the machine's busy time over the same window;
CPU per request = client CPU over every request the process made (warm-up
included on both sides). curl reuses its FTP control connection between URLs
(one login for all N), which the engine, like the NSTL clients, does not: the
small-file FTP test favours curl; one curl process per fetch (a new session each,
its children's CPU from getrusage) pays curl's start-up instead: the two bracket it.

The result JSON (every run of every pair) goes to --out; docs/performance.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_vs_peers as evp  # noqa: E402

# --placement pinned: the servers' CPU and the client's (a map placement).
SERVER_CPU = 0
CLIENT_CPU = 1
CPUS = {"pinned": {"server": str(SERVER_CPU), "client": str(CLIENT_CPU)}}
SMALL = 64 * 1024
BULK = 64 * 1024 * 1024
HTTP_FILE = 4096


@dataclass
class Run:
    tool: str
    ok: bool
    rate: float = 0.0  # requests/s (http, ftp small) or Mbit/s (ftp bulk)
    requests: float = 0.0  # over the process's lifetime
    cpu_client_s: float = 0.0
    machine_busy_s: float = 0.0
    error: str | None = None

    def cpu_us_per_request(self) -> float | None:
        return self.cpu_client_s * 1e6 / self.requests if self.ok and self.requests else None

    def machine_us_per_request(self) -> float | None:
        return self.machine_busy_s * 1e6 / self.requests if self.ok and self.requests else None


@dataclass
class Tool:
    name: str
    argv: Callable[[], list[str]]
    parse: Callable[[evp.ClientRun], tuple[float, ...]]


@dataclass
class Case:
    name: str
    unit: str
    # The engine's runs (one or more settings), then the peer's, last.
    tools: list[Tool]

    @property
    def peer_name(self) -> str:
        return self.tools[-1].name


@dataclass
class Result:
    case: str
    unit: str
    peer: str
    runs: list[Run] = field(default_factory=list)


def one(spawner: evp.NetnsSpawner, tool: str, argv: list[str], parse: Any, t: float) -> Run:
    busy0, _ = evp.machine_cpu_s()
    try:
        client = evp.run_client(spawner, argv, tool, t)
        busy1, _ = evp.machine_cpu_s()
        rate, requests, *cpu = parse(client)
    except evp.BenchError as exc:
        return Run(tool, False, error=str(exc))
    # A parser may give the CPU itself (a wrapper's children), else the process's.
    return Run(tool, True, rate, requests, cpu[0] if cpu else client.cpu_s, busy1 - busy0)


# One curl process per fetch (a new FTP session each, as the engine): the wrapper
# reports its children's CPU, which /proc/PID/stat of the wrapper does not hold.
CURL_EACH = r"""
import resource, subprocess, sys, time
n, url = int(sys.argv[1]), sys.argv[2]
t0 = time.monotonic()
for _ in range(n):
    out = subprocess.run(["curl", "-sS", "--ftp-pasv", "-o", "/dev/null", "-w", "%{size_download}",
                          url], capture_output=True, text=True, check=True)
    print(out.stdout.strip())
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print("cpu", ru.ru_utime + ru.ru_stime, time.monotonic() - t0)
"""


def curl_each(n: int) -> Callable[[evp.ClientRun], tuple[float, float, float]]:
    def parse(client: evp.ClientRun) -> tuple[float, float, float]:
        lines = client.stdout.split("\n")
        last = [ln for ln in lines if ln.startswith("cpu ")]
        sizes = [ln for ln in lines if ln.strip() and not ln.startswith("cpu ")]
        if client.rc != 0 or not last or len(sizes) != n or any(int(x) != SMALL for x in sizes):
            raise evp.BenchError(f"curl loop: {client.rc} {client.stderr.strip()[:300]}")
        _, cpu, wall = last[0].split()
        return n / float(wall), float(n), float(cpu)

    return parse


def engine_http(client: evp.ClientRun) -> tuple[float, float]:
    rec = evp._last_record(client, "engine")
    if rec.get("failed"):
        raise evp.BenchError(f"engine: {rec['failed']} fetches failed: {rec.get('errors')}")
    return float(rec["fetches_per_second"]), float(rec["totals"]["client"]["fetches"])


def wrk(client: evp.ClientRun) -> tuple[float, float]:
    out = client.stdout
    if client.rc != 0:
        raise evp.BenchError(f"wrk failed ({client.rc}): {client.stderr.strip()[:300]}")
    if "Non-2xx" in out or "Socket errors" in out:
        raise evp.BenchError(f"wrk saw errors: {out.strip()[-300:]}")
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    if not rate or not total:
        raise evp.BenchError(f"wrk: no rate in its output: {out.strip()[-300:]}")
    return float(rate.group(1)), float(total.group(1))


def engine_mix(client: evp.ClientRun) -> tuple[float, float]:
    rec = evp._last_record(client, "engine")
    if rec["transactions"] != rec["attempted"]:
        raise evp.BenchError(f"engine: failures {rec['failures']}")
    n = float(rec["transactions"])
    if n == 1:  # bulk: Mbit/s of the one transfer
        return float(rec["bits_per_second"]) / 1e6, n
    return n / float(rec["elapsed_s"]), n


def curl_small(n: int) -> Callable[[evp.ClientRun], tuple[float, float]]:
    def parse(client: evp.ClientRun) -> tuple[float, float]:
        sizes = [ln.split() for ln in client.stdout.splitlines() if ln.strip()]
        if client.rc != 0 or len(sizes) != n or any(int(s[0]) != SMALL for s in sizes):
            raise evp.BenchError(f"curl: {client.rc} {client.stderr.strip()[:300]}")
        # From the first transfer's start to the last's end, as the engine's figure.
        return n / client.wall_s, float(n)

    return parse


def curl_bulk(client: evp.ClientRun) -> tuple[float, float]:
    parts = client.stdout.split()
    if client.rc != 0 or len(parts) != 2 or int(parts[0]) != BULK:
        raise evp.BenchError(f"curl: {client.rc} {client.stderr.strip()[:300]}")
    return float(parts[1]) * 8 / 1e6, 1.0


def cases(engine: Path, addr: str, args: argparse.Namespace) -> list[Case]:
    d = args.duration

    def threads(c: int) -> int:
        return 1 if args.placement == "pinned" else max(1, min(c, int(args.threads)))

    def wrk_argv(c: int, *extra: str) -> list[str]:
        t = f"{args.timeout:g}s"
        return ["wrk", f"-t{threads(c)}", f"-c{c}", f"-d{d + 1:g}s", "--timeout", t, *extra]

    def engines(keepalive: bool, c: int) -> list[Tool]:
        polls = [0] + ([args.busy_poll] if args.busy_poll else [])
        return [
            Tool(
                "engine" if b == 0 else f"engine busy-poll {b} µs",
                lambda b=b: http_spec(keepalive, c, b),  # type: ignore[misc]
                engine_http,
            )
            for b in polls
        ]

    def http_cases(c: int) -> list[Case]:
        return [
            Case(
                f"http keep-alive c{c}",
                "req/s",
                [*engines(True, c), Tool("wrk", lambda: wrk_argv(c, url), wrk)],
            ),
            Case(
                f"http close c{c}",
                "req/s",
                [
                    *engines(False, c),
                    Tool("wrk", lambda: wrk_argv(c, "-H", "Connection: close", url), wrk),
                ],
            ),
        ]

    url = f"http://{addr}:5380/files/{HTTP_FILE}.bin"

    def http_spec(keepalive: bool, c: int, busy_poll: int) -> list[str]:
        spec = {
            "kind": "http",
            "server": f"{addr}:5380",
            "urls": [f"/files/{HTTP_FILE}.bin"],
            "keepalive": keepalive,
            "parallel": c,
            "threads": threads(c),
            "duration": d,
            "warmup": 1.0,
            "interval": 0,
            "timeout": args.timeout,
            "busy_poll_us": busy_poll,
        }
        return [str(engine), "run", "--spec", json.dumps(spec)]

    def mix_spec(n: int, size: int) -> list[str]:
        spec = {
            "kind": "mix",
            "servers": [{"address": addr, "hit": 1, "http_share": 0}],
            "clients": [0],
            "requests": n,
            "ftp_files": [size],
            "timeout": 30,
        }
        return [str(engine), "run", "--spec", json.dumps(spec)]

    ftp = f"ftp://{addr}:5321/files/"
    n = args.ftp_fetches
    return [
        *(case for c in args.connections for case in http_cases(c)),
        Case(
            f"ftp {SMALL // 1024} KiB x{n}",
            "fetch/s",
            [
                Tool("engine", lambda: mix_spec(n, SMALL), engine_mix),
                Tool(
                    "curl",
                    lambda: (
                        ["curl", "-sS", "--ftp-pasv"]
                        + [
                            a
                            for _ in range(n)
                            for a in ("-o", "/dev/null", "-w", "%{size_download}\\n")
                        ]
                        + [f"{ftp}{SMALL}.bin"] * n
                    ),
                    curl_small(n),
                ),
            ],
        ),
        Case(
            f"ftp {SMALL // 1024} KiB x{n} each",
            "fetch/s",
            [
                Tool("engine", lambda: mix_spec(n, SMALL), engine_mix),
                Tool(
                    "curl",
                    lambda: ["python3", "-c", CURL_EACH, str(n), f"{ftp}{SMALL}.bin"],
                    curl_each(n),
                ),
            ],
        ),
        Case(
            f"ftp {BULK // 2**20} MiB",
            "Mbit/s",
            [
                Tool("engine", lambda: mix_spec(1, BULK), engine_mix),
                Tool(
                    "curl",
                    lambda: [
                        "curl",
                        "-sS",
                        "--ftp-pasv",
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{size_download} %{speed_download}",
                        f"{ftp}{BULK}.bin",
                    ],
                    curl_bulk,
                ),
            ],
        ),
    ]


def median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarize(results: list[Result]) -> list[dict[str, Any]]:
    """A row per engine setting of each case, against the case's peer: medians, and
    the median of the per-pair ratios (a pair: the runs of one round)."""
    rows = []
    for r in results:
        peer = [x for x in r.runs if x.tool == r.peer]
        for tool in dict.fromkeys(x.tool for x in r.runs if x.tool != r.peer):
            eng = [x for x in r.runs if x.tool == tool]
            row: dict[str, Any] = {"case": r.case, "tool": tool, "unit": r.unit, "peer": r.peer}
            getters: tuple[tuple[str, Callable[[Run], float | None]], ...] = (
                ("rate", lambda x: x.rate if x.ok else None),
                ("cpu_us_per_request", Run.cpu_us_per_request),
                ("machine_us_per_request", Run.machine_us_per_request),
            )
            for key, get in getters:
                e, p = median([get(x) for x in eng]), median([get(x) for x in peer])
                row[f"engine_{key}"], row[f"peer_{key}"] = e, p
                pairs = [(get(a), get(b)) for a, b in zip(eng, peer, strict=False)]
                ratios = [a / b if a is not None and b else None for a, b in pairs]
                row[f"{key}_ratio"] = median(ratios)
                if key == "rate":
                    row["rate_ratios"] = ratios
            row["pairs"] = sum(1 for a, b in zip(eng, peer, strict=False) if a.ok and b.ok)
            row["failed_runs"] = sum(not x.ok for x in eng) + sum(not x.ok for x in peer)
            rows.append(row)
    return rows


def fmt(v: float | None, digits: int = 4) -> str:
    return "—" if v is None else f"{v:.{digits}g}"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'test':<44} {'engine':>10} {'peer':>10} {'ratio':>6}   "
        f"{'CPU µs/req engine':>17} {'peer':>8} {'ratio':>6}   {'machine µs/req e/p':>18}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['case'] + ' ' + r['tool']:<44} "
            f"{fmt(r['engine_rate']):>10} {fmt(r['peer_rate']):>10} "
            f"{fmt(r['rate_ratio'], 3):>6}   {fmt(r['engine_cpu_us_per_request']):>17} "
            f"{fmt(r['peer_cpu_us_per_request']):>8} {fmt(r['cpu_us_per_request_ratio'], 3):>6}"
            f"   {fmt(r['engine_machine_us_per_request'])}/{fmt(r['peer_machine_us_per_request'])}"
            f"  ({r['unit']}, vs {r['peer']})"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds (http)")
    ap.add_argument(
        "--connections",
        default="1,32,1000",
        help="comma list of connections in flight, one pair of http tests each (default 1,32,1000)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="event-loop threads of the engine and of wrk, at most the connections "
        "(default one per CPU)",
    )
    ap.add_argument(
        "--placement",
        choices=("pinned", "shared"),
        default="pinned",
        help="pinned: servers on CPU 0, the client on CPU 1, one thread (default); "
        "shared: nothing pinned, --threads threads",
    )
    ap.add_argument(
        "--busy-poll",
        type=int,
        default=50,
        help="the engine's second run per pair: busy_poll_us (default 50; 0: no second run)",
    )
    ap.add_argument(
        "--timeout", type=float, default=10.0, help="response timeout of both tools (s)"
    )
    ap.add_argument("--ftp-fetches", type=int, default=200)
    ap.add_argument("--tests", default="", help="comma list of test-name prefixes")
    ap.add_argument("--engine", type=Path, default=evp.DEFAULT_ENGINE)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    try:
        args.connections = [int(c) for c in args.connections.split(",") if c.strip()]
    except ValueError:
        ap.error(
            f"--connections: give a comma list of counts, e.g. 1,32,1000 (got {args.connections})"
        )
    if not args.connections or any(not 1 <= c <= 10_000 for c in args.connections):
        ap.error("--connections: each count must be 1..10000 (the engine's http limit)")
    if not 1 <= args.threads <= 64:
        ap.error("--threads must be 1..64")
    if not 0 <= args.busy_poll <= 10_000:
        ap.error("--busy-poll must be 0..10000 µs")
    if args.placement == "pinned" and not {SERVER_CPU, CLIENT_CPU} <= os.sched_getaffinity(0):
        ap.error(
            f"--placement pinned needs CPUs {SERVER_CPU} and {CLIENT_CPU}: use --placement shared"
        )
    from secperf.services.nginx import start_nginx
    from secperf.services.vsftpd import start_vsftpd
    from secperf.testbed.testbed import Testbed, install_teardown_handlers
    from secperf.testbed.topology import Topology

    results: list[Result] = []
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with (
        tempfile.TemporaryDirectory(prefix="secperf-bench-") as tmp,
        # pinned: the testbed's own map placement (a cpuset per host), so that nginx,
        # vsftpd and every process they start run on the server's CPU, either client
        # tool on the client's.
        Testbed.build(Topology.standard(), cpus=CPUS.get(args.placement)) as tb,
        install_teardown_handlers(tb),
    ):
        addr = evp.FORWARD_SERVER
        web = start_nginx(tb.host("server"), Path(tmp) / "nginx", addr)
        ftpd = start_vsftpd(tb.host("server"), Path(tmp) / "ftp", addr)
        spawner = evp.NetnsSpawner(tb)
        try:
            web.serve([HTTP_FILE])
            ftpd.serve([SMALL, BULK])
            want = [t for t in args.tests.split(",") if t]
            todo = [
                c
                for c in cases(args.engine, addr, args)
                if not want or any(c.name.startswith(w) for w in want)
            ]
            for case in todo:
                res = Result(case.name, case.unit, case.peer_name)
                for i in range(args.pairs):
                    # Every other round in the reverse order, so that no tool always
                    # runs first (A B C, C B A, ...).
                    for tool in case.tools if i % 2 == 0 else reversed(case.tools):
                        run = one(spawner, tool.name, tool.argv(), tool.parse, args.duration + 120)
                        res.runs.append(run)
                        print(
                            f"{case.name} round {i + 1}/{args.pairs} {tool.name}: "
                            + (f"{run.rate:.1f} {case.unit}" if run.ok else f"FAILED {run.error}"),
                            file=sys.stderr,
                            flush=True,
                        )
                results.append(res)
        finally:
            spawner.stop_all()
            web.stop()
            ftpd.stop()
    rows = summarize(results)
    print(table(rows))
    if args.out:
        evp.write_result(
            args.out,
            "http_ftp_vs_peers",
            started,
            args,
            rows=rows,
            runs={r.case: [asdict(x) for x in r.runs] for r in results},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
