"""Throughput through each VPN tunnel: secperf-engine against iperf3, same run, same testbed.

The engine must not be what limits a tunnel's figure (issue 11): for each
implementation the bench brings the tunnel up host to host between the client and
the server of a client–dut–server testbed (the DUT forwards; links unshaped by
default, so the tunnel daemon, not a link, is the limit), then measures TCP
throughput to the server's inner address in interleaved pairs (engine, iperf3,
engine, iperf3, ...), both with 128 KiB writes of random data, a 1 s warm-up left
out (engine `warmup`, iperf3 `-O 1`) and the receiver's count (the engine with
`rcvlowat` 1, as the seed003 scenarios run it: its default low-water mark of one
128 KiB message starves the window on a tunnel's round trip; `--rcvlowat default`
shows that); the pairs alternate which tool goes first. ratio = the median of the
pairs' engine / iperf3 ratios (the ratio of the two medians beside it), target
>= 0.95. The plain path (no tunnel) is measured the same way first.

    .venv/bin/python bench/vpn_vs_iperf3.py [--pairs 5] [--duration 3] [--rate 100mbit]
        [--only wireguard,openvpn] [--rcvlowat 1|N|default] [--out bench/runs/....json]

Needs root, the release engine, iperf3 and the VPN packages (scripts/setup.sh).
Exit status 0 whether or not the targets are met (the verdicts are printed); every
process, tunnel and namespace it made is removed on the way out, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without an installed secperf too

from secperf.engine import run_test, start_server  # noqa: E402
from secperf.mechanisms.vpn import TunnelEnd, make, tunnel_addresses, tunnel_name  # noqa: E402
from secperf.schema.units import fmt_rate, parse_rate  # noqa: E402
from secperf.testbed.hosts import Host  # noqa: E402
from secperf.testbed.testbed import Testbed, install_teardown_handlers  # noqa: E402
from secperf.testbed.topology import Topology  # noqa: E402

CONTROL = 5301
DATA_PORTS = (5310, 5399)
IPERF_PORT = 5201
MESSAGE = 128 * 1024
WARMUP_S = 1.0
TARGET = 0.95
# (label, implementation, parameters): one tunnel each, the ciphers seed003 measures.
TUNNELS: list[tuple[str, str, dict[str, Any]]] = [
    ("wireguard", "wireguard", {}),
    ("openvpn-aes256", "openvpn", {"cipher": "aes-256-gcm"}),
    ("ipsec-aes256", "ipsec", {"cipher": "aes-256-gcm"}),
    ("tinc", "tinc", {}),
    ("vtun-aes128", "vtun", {"cipher": "aes-128-ecb"}),
]


def engine_once(client: Host, addr: str, duration: float, rcvlowat: int | None = None) -> float:
    spec: dict[str, Any] = {
        "kind": "stream",
        "server": f"{addr}:{CONTROL}",
        "duration": duration,
        "warmup": WARMUP_S,
        "interval": 0,
        "message": MESSAGE,
        "payload": "random",
    }
    if rcvlowat is not None:
        spec["rcvlowat"] = rcvlowat
    res = run_test(client, spec, timeout=duration + 60).result
    return float(res["bits_per_second"])


def iperf3_once(client: Host, addr: str, duration: float) -> float:
    argv = ["iperf3", "-c", addr, "-p", str(IPERF_PORT), "-J", "-l", str(MESSAGE)]
    argv += ["-t", f"{duration:g}", "-O", f"{WARMUP_S:g}"]
    for attempt in range(3):
        proc = client.run(argv, check=False, timeout=duration + 60)
        data = json.loads(proc.stdout or "{}")
        if "error" not in data and proc.returncode == 0:
            break
        # iperf3 -s serves one test at a time and resets a client that comes while it
        # is still closing the last one: try again after a moment
        if attempt == 2 or "unable to connect" not in str(data.get("error")):
            raise RuntimeError(f"iperf3 failed: {data.get('error') or proc.stderr.strip()}")
        time.sleep(1.0)
    # The receiver's count, as the engine's figure is.
    return float(data["end"]["sum_received"]["bits_per_second"])


def measure(
    client: Host, addr: str, pairs: int, duration: float, rcvlowat: int | None = None
) -> dict[str, Any]:
    """Interleaved pairs, the order alternating (engine first, then iperf3 first, ...), so
    that drift on the shared machine hits both tools alike; `ratio` is the median of the
    pairs' own ratios (what drift between pairs cannot move), `ratio_of_medians` beside it."""
    engine: list[float] = []
    iperf: list[float] = []
    for n in range(pairs):
        if n % 2 == 0:
            engine.append(engine_once(client, addr, duration, rcvlowat))
            iperf.append(iperf3_once(client, addr, duration))
        else:
            iperf.append(iperf3_once(client, addr, duration))
            engine.append(engine_once(client, addr, duration, rcvlowat))
    e, i = statistics.median(engine), statistics.median(iperf)
    ratios = [a / b for a, b in zip(engine, iperf, strict=True) if b > 0]
    return {
        "engine_bps": engine,
        "iperf3_bps": iperf,
        "engine_median_bps": e,
        "iperf3_median_bps": i,
        "pair_ratios": ratios,
        "ratio": statistics.median(ratios) if ratios else None,
        "ratio_of_medians": e / i if i > 0 else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3.0, help="seconds measured per test")
    ap.add_argument("--rate", default="unlimited", help="every link's rate (tc units)")
    ap.add_argument("--only", default="", help="comma-separated labels (default: all)")
    ap.add_argument(
        "--rcvlowat",
        default="1",
        help="the engine's rcvlowat in bytes, as seed003 sets it (1), or 'default' for the "
        "engine's own (the message size, 128 KiB, here)",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rate = parse_rate(args.rate)
    args.rcvlowat = None if args.rcvlowat == "default" else int(args.rcvlowat)
    only = {x for x in args.only.split(",") if x}
    tunnels = [t for t in TUNNELS if not only or t[0] in only]
    started = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    with (
        Testbed.build(Topology.standard(link_rate_bps=rate)) as tb,
        install_teardown_handlers(tb),
        tempfile.TemporaryDirectory(prefix="secperf-vpnbench-") as tmp,
    ):
        client, server = tb.host("client"), tb.host("server")
        engine = start_server(server, f"0.0.0.0:{CONTROL}", data_ports=DATA_PORTS)
        iperf = server.spawn(["iperf3", "-s", "-p", str(IPERF_PORT)], label="iperf3")
        try:
            deadline = time.monotonic() + 10
            while not server.run(["ss", "-Hltn", f"sport = :{IPERF_PORT}"]).stdout.strip():
                if time.monotonic() > deadline:
                    raise RuntimeError("iperf3 -s did not listen within 10 s")
                time.sleep(0.05)
            plain = tb.topology.address("server", "dut-server")
            rows.append(
                {
                    "path": "plain",
                    **measure(client, plain, args.pairs, args.duration, args.rcvlowat),
                }
            )
            print(f"plain path: {fmt(rows[-1])}", flush=True)
            (a4, b4), _six = tunnel_addresses(0)
            a = TunnelEnd(client, "client", tb.topology.address("client", "client-dut"), a4)
            b = TunnelEnd(server, "server", plain, b4)
            for label, impl, params in tunnels:
                vpn = make(impl, **params)
                vpn.render(a, b, Path(tmp) / label, tunnel_name(tb.prefix, 0))
                vpn.start(a, b)
                try:
                    got = measure(client, b.ip4, args.pairs, args.duration, args.rcvlowat)
                    rows.append({"path": label, "tunnel": vpn.describe(), **got})
                finally:
                    vpn.stop()
                print(f"{label}: {fmt(rows[-1])}", flush=True)
        finally:
            iperf.stop()
            engine.stop()
    result = {
        "bench": "vpn_vs_iperf3",
        "started": started.isoformat(timespec="seconds"),
        "machine": {"kernel": platform.release(), "cpus": _cpus()},
        "pairs": args.pairs,
        "duration_s": args.duration,
        "warmup_s": WARMUP_S,
        "message_bytes": MESSAGE,
        "engine_rcvlowat": args.rcvlowat,
        "link_rate": fmt_rate(rate),
        "target_ratio": TARGET,
        "rows": rows,
    }
    print()
    head = (
        f"{'path':<16} {'engine Mbit/s':>14} {'iperf3 Mbit/s':>14} {'ratio':>7} {'of medians':>11}"
    )
    print(f"{head}  verdict (ratio = median of the pairs' ratios, target >= {TARGET})")
    for r in rows:
        ratio = r["ratio"]
        verdict = "PASS" if ratio is not None and ratio >= TARGET else "MISS"
        print(
            f"{r['path']:<16} {r['engine_median_bps'] / 1e6:>14.1f} "
            f"{r['iperf3_median_bps'] / 1e6:>14.1f} {ratio:>7.3f} "
            f"{r['ratio_of_medians']:>11.3f}  {verdict}"
        )
    out = args.out or ROOT / "bench" / "runs" / f"vpn_vs_iperf3-{started:%Y-%m-%dT%H%M}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nkept: {out}")
    return 0


def fmt(row: dict[str, Any]) -> str:
    e, i = row["engine_median_bps"] / 1e6, row["iperf3_median_bps"] / 1e6
    return f"engine {e:.1f} Mbit/s, iperf3 {i:.1f} Mbit/s, ratio {row['ratio']:.3f}"


def _cpus() -> int:
    return os.cpu_count() or 0


if __name__ == "__main__":
    sys.exit(main())
