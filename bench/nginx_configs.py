"""How nginx's way of writing a response sets the rate of a plain-HTTP test: the
engine's `http` kind against three nginx configurations on the same forwarding path
(root: a client–dut–server testbed), so that the server is not what a test measures.

  sendfile, cork     sendfile on; tcp_nopush on   (secperf's nginx until 2026-11-26)
  sendfile, no cork  sendfile on; tcp_nopush off
  no sendfile        sendfile off                 (secperf's nginx now)

With sendfile nginx writes the header and then sends the body from the file: two
writes, which the cork (TCP_CORK) joins but holds back on a kept-alive connection,
and which without it leave as two segments. Each configuration serves four tests,
in rounds that alternate the configurations; fetches/s of each. The result JSON
goes to --out; docs/performance.md ("HTTP and FTP") quotes it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_vs_peers as evp  # noqa: E402

from secperf.services import nginx  # noqa: E402
from secperf.testbed.testbed import Testbed, install_teardown_handlers  # noqa: E402
from secperf.testbed.topology import Topology  # noqa: E402

# Each configuration as the edit of secperf's own nginx.conf that makes it.
CONFIGS: dict[str, list[tuple[str, str]]] = {
    "sendfile, cork": [("sendfile off;", "sendfile on; tcp_nopush on;")],
    "sendfile, no cork": [("sendfile off;", "sendfile on; tcp_nopush off;")],
    "no sendfile": [],
}
# (name, file size, fetches a connection (None: kept alive throughout; 1: a new
# connection per fetch), connections in flight)
TESTS: list[tuple[str, int, int | None, int]] = [
    ("1 KiB, 10 a connection, 32", 1024, 10, 32),
    ("4 KiB kept alive, 8", 4096, None, 8),
    ("256 KiB, 10 a connection, 32", 262144, 10, 32),
    ("1 KiB, a connection per fetch, 32", 1024, 1, 32),
]


def configured(edits: list[tuple[str, str]]):  # type: ignore[no-untyped-def]
    """render_config with `edits` applied (each must match)."""
    original = nginx.render_config

    def render(*a, **k):  # type: ignore[no-untyped-def]
        text = original(*a, **k)
        for old, new in edits:
            if old not in text:
                raise SystemExit(f"nginx.conf no longer has {old!r}: update CONFIGS")
            text = text.replace(old, new)
        return text

    return render


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=2.0, help="measured seconds a test")
    ap.add_argument("--threads", type=int, default=2, help="the engine's event-loop threads")
    ap.add_argument("--engine", type=Path, default=evp.DEFAULT_ENGINE)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rates: dict[str, dict[str, list[float]]] = {c: {t[0]: [] for t in TESTS} for c in CONFIGS}
    started = datetime.now(UTC).isoformat(timespec="seconds")
    original = nginx.render_config
    with (
        tempfile.TemporaryDirectory(prefix="secperf-bench-") as tmp,
        Testbed.build(Topology.standard()) as tb,
        install_teardown_handlers(tb),
    ):
        addr = evp.FORWARD_SERVER
        for rnd in range(args.rounds):
            for i, (config, edits) in enumerate(CONFIGS.items()):
                nginx.render_config = configured(edits)
                try:
                    web = nginx.start_nginx(tb.host("server"), Path(tmp) / f"nginx-{rnd}-{i}", addr)
                finally:
                    nginx.render_config = original
                try:
                    for name, size, per, conns in TESTS:
                        (url,) = web.serve([size], per if per and per > 1 else None)
                        spec = {
                            "kind": "http",
                            "server": f"{addr}:{nginx.HTTP_PORT}",
                            "urls": [url],
                            "keepalive": per != 1,
                            "parallel": conns,
                            "threads": args.threads,
                            "duration": args.duration,
                            "warmup": 0.5,
                            "interval": 0,
                        }
                        cmd = [str(args.engine), "run", "--spec", json.dumps(spec)]
                        out = tb.host("client").run(cmd, timeout=args.duration + 60, check=False)
                        rec = json.loads(out.stdout.splitlines()[-1]) if out.stdout else {}
                        if rec.get("type") != "result" or not rec.get("fetches"):
                            raise SystemExit(f"{config} / {name}: no result: {out.stderr[-400:]}")
                        rate = float(rec["fetches_per_second"])
                        rates[config][name].append(rate)
                        print(
                            f"round {rnd + 1} {config:18} {name:36} {rate:10.0f} fetches/s",
                            file=sys.stderr,
                            flush=True,
                        )
                finally:
                    web.stop()
    print(f"{'fetches/s':18} " + " | ".join(t[0] for t in TESTS))
    for config in CONFIGS:
        cells = [f"{min(v):,.0f}–{max(v):,.0f}" for v in rates[config].values()]
        print(f"{config:18} " + " | ".join(cells))
    if args.out:
        evp.write_result(args.out, "nginx_configs", started, args, rates=rates)
    return 0


if __name__ == "__main__":
    sys.exit(main())
