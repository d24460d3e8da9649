"""secperf-engine's HTTPS client against wrk (built with OpenSSL) on the same nginx,
in one run (root: through the forwarding DUT of a client–dut–server testbed).

Interleaved pairs (engine, wrk, engine, wrk, ...) of each test, medians compared:

  https keep-alive tT    engine: tls, keepalive, C in flight,  vs  wrk -tT -cC https://...
                         T threads
  https close, full tT   a connection and a full TLS 1.3 handshake per fetch, nginx with
                         session resumption off (no cache, no tickets): neither client
                         can resume, both pay the certificate and the signature
  https close, resumed tT  a connection per fetch, nginx with resumption on; the engine
                         with `resumption = true`, wrk as it is: it reuses its SSL
                         objects (SSL_clear keeps the session) and so offers the last
                         session's ticket on every new connection

for each T of --threads (default 1 and 2): both tools get the same event-loop threads.
Until 2026-11-26 (afternoon) the engine ran its default (a thread per CPU, 2 here)
against wrk -t1: on two CPUs shared with nginx the second thread costs more than it
gives (keep-alive: engine 2 threads ~53 k req/s, 1 thread ~61 k; wrk 1 thread ~58 k,
2 threads ~43 k), and the 0.85x kept that morning was that difference.

Until 2026-11-26 this bench ran the engine with resumption off against wrk on a
server with resumption on, believing wrk resumed nothing: wrk resumed every
handshake and the engine none, and the 0.37x it printed was that difference
(docs/performance.md). The server's setting now decides, for both alike.

Both negotiate TLS 1.3 with nginx's default suite (AES-256-GCM here; the engine
offers every suite, as wrk does), against a certificate made for the run by
secperf.services.pki. CPU is taken alike for both tools (bench/http_ftp_vs_peers.py:
utime+stime of the client process, the machine's busy time over the same window).
The result JSON (every run of every pair) goes to --out; docs/performance.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_vs_peers as evp  # noqa: E402
import http_ftp_vs_peers as hfp  # noqa: E402

from secperf.services.nginx import Nginx  # noqa: E402

HTTP_FILE = 4096
HTTPS_PORT = 5381


@dataclass
class Web:
    """The running nginx and whether it resumes sessions."""

    server: Nginx
    resumes: bool


def cases(engine: Path, addr: str, ca: Path, args: argparse.Namespace) -> list[hfp.Case]:
    d, c = args.duration, args.connections
    url = f"https://{addr}:{HTTPS_PORT}/files/{HTTP_FILE}.bin"

    def spec(keepalive: bool, resumption: bool, threads: int) -> list[str]:
        s = {
            "kind": "http",
            "server": f"{addr}:{HTTPS_PORT}",
            "urls": [f"/files/{HTTP_FILE}.bin"],
            "keepalive": keepalive,
            "parallel": c,
            "threads": threads,
            "duration": d,
            "warmup": 1.0,
            "interval": 0,
            "tls": True,
            "ca_file": str(ca),
            "resumption": resumption,
        }
        return [str(engine), "run", "--spec", json.dumps(s)]

    out: list[hfp.Case] = []
    for t in args.threads:
        wrk_base = ["wrk", f"-t{t}", f"-c{c}", f"-d{d + 1:g}s"]
        close = [*wrk_base, "-H", "Connection: close", url]
        tests = (
            ("https keep-alive", True, False, [*wrk_base, url]),
            ("https close, full", False, False, close),
            ("https close, resumed", False, True, close),
        )
        for name, keepalive, resumption, peer in tests:
            # Default arguments pin this iteration's values in each lambda.
            out.append(
                hfp.Case(
                    f"{name} t{t}",
                    "req/s",
                    lambda k=keepalive, r=resumption, t=t: spec(k, r, t),
                    lambda peer=peer: peer,
                    "wrk",
                    hfp.engine_http,
                    hfp.wrk,
                )
            )
    return out


# The server's session resumption, per test: a full handshake needs it off for both.
def server_resumes(case: str) -> bool:
    return not case.startswith("https close, full")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds")
    ap.add_argument("--connections", type=int, default=4, help="connections in flight")
    ap.add_argument(
        "--threads",
        default="1,2",
        help="comma list of event-loop thread counts, each given to both tools alike "
        "(the engine's `threads`, wrk's -t); one set of tests each (default 1,2)",
    )
    ap.add_argument("--tests", default="", help="comma list of test-name prefixes")
    ap.add_argument("--engine", type=Path, default=evp.DEFAULT_ENGINE)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    try:
        args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        ap.error(f"--threads must be a comma list of integers (got {args.threads!r})")
    if not args.threads or not all(1 <= t <= args.connections for t in args.threads):
        ap.error(f"each of --threads must be 1..--connections ({args.connections})")
    from secperf.services import pki
    from secperf.services.nginx import start_nginx
    from secperf.testbed.testbed import Testbed, install_teardown_handlers
    from secperf.testbed.topology import Topology

    results: list[hfp.Result] = []
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with (
        tempfile.TemporaryDirectory(prefix="secperf-bench-") as tmp,
        Testbed.build(Topology.standard()) as tb,
        install_teardown_handlers(tb),
    ):
        addr = evp.FORWARD_SERVER
        certs = Path(tmp) / "pki"
        ca = pki.make_ca(certs, "ca", "secperf bench CA")
        tls = pki.issue(certs, ca, "server", [addr])
        web = None
        spawner = evp.NetnsSpawner(tb)
        try:
            want = [t for t in args.tests.split(",") if t]
            todo = [
                c
                for c in cases(args.engine, addr, ca.cert, args)
                if not want or any(c.name.startswith(w) for w in want)
            ]
            for case in todo:
                resumes = server_resumes(case.name)
                if web is None or web.resumes != resumes:
                    if web is not None:
                        web.server.stop()
                    server = start_nginx(
                        tb.host("server"),
                        Path(tmp) / "nginx",
                        addr,
                        tls=tls,
                        tls_resumption=resumes,
                    )
                    server.serve([HTTP_FILE])
                    web = Web(server, resumes)
                res = hfp.Result(case.name, case.unit, case.peer_name)
                for i in range(args.pairs):
                    for tool in ("engine", case.peer_name):
                        cmd = case.engine() if tool == "engine" else case.peer()
                        parse = case.parse_engine if tool == "engine" else case.parse_peer
                        run = hfp.one(spawner, tool, cmd, parse, args.duration + 120)
                        res.runs.append(run)
                        print(
                            f"{case.name} pair {i + 1}/{args.pairs} {tool}: "
                            + (f"{run.rate:.1f} {case.unit}" if run.ok else f"FAILED {run.error}"),
                            file=sys.stderr,
                            flush=True,
                        )
                results.append(res)
        finally:
            spawner.stop_all()
            if web is not None:
                web.server.stop()
    rows = hfp.summarize(results)
    print(hfp.table(rows))
    if args.out:
        evp.write_result(
            args.out,
            "https_vs_peers",
            started,
            args,
            rows=rows,
            runs={r.case: [asdict(x) for x in r.runs] for r in results},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
