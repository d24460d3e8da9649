"""The latency kind's packet sender (latency under load) against trafgen, in one run.

Run as root from the checkout: `python bench/latency_load_vs_trafgen.py [--seconds 3]
[--rounds 5] [--out bench/runs/latency_load_vs_trafgen-DATE.json]`.

One namespace testbed as document 004's: client – DUT – server, 100 emulated hosts a
side, offloads off. Full duplex, 64-byte frames, both ways at once:

- secperf: `kind = "latency"` with `probe_every = 100` (the whole stream on the
  AF_PACKET sender, one frame in 100 a kernel-stamped probe; the load frames counted
  and dropped where they arrive by the receiving engine's socket filter, as trafgen's
  by nft, the probes read), its record's achieved and received frames/s per direction,
  and the sender's own ceiling it measured before the load (unpaced to a blackhole);
- trafgen (netsniff-ng): one trafgen in the client towards the server's 100 hosts and
  one in the server towards the client's, the same 64-byte frames with sources and
  destinations stepping over the 100 hosts (dinc), counted where they arrive by an nft
  counter in each end's input hook (which drops them: no socket reads them, so its
  receiving side costs less than secperf's), and where they leave (veth tx_packets),
  over a window that starts 0.5 s after both trafgens started.

Each asked at 148,810 frames/s a direction (10 % of 1 Gbit/s, document 004) and at
"max" (secperf asked for 2,000,000 frames/s; trafgen without --rate), in interleaved
rounds. Prints each run and the medians, with secperf/trafgen ratios. The testbed
and every process are removed on the way out.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from secperf.engine import run_test, start_server
from secperf.testbed.testbed import Host, Testbed
from secperf.testbed.topology import Topology

PAPER_PPS = 148_810  # 10 % of 1 Gbit/s in 64-byte frames (+20 B preamble and gap)
MAX_ASK = 2_000_000
CONTROL = 5201
TRAFGEN_PORT = 9
HOSTS = 100
SETTLE_S = 0.5


def nft_count_setup(host: Host) -> None:
    host.run(
        ["nft", "-f", "-"],
        input="table inet bench_count { chain input { type filter hook input priority -10; "
        f"policy accept; udp dport {TRAFGEN_PORT} counter drop; }}; }}\n",
    )


def counter(host: Host) -> int:
    out = host.run(["nft", "-j", "list", "table", "inet", "bench_count"]).stdout
    for item in json.loads(out)["nftables"]:
        for expr in item.get("rule", {}).get("expr", []):
            if "counter" in expr:
                return int(expr["counter"]["packets"])
    raise RuntimeError("no counter in the namespace")


def tx_packets(host: Host, ifname: str) -> int:
    return int(host.run(["cat", f"/sys/class/net/{ifname}/statistics/tx_packets"]).stdout)


def mac(host: Host, ifname: str) -> list[int]:
    text = host.run(["cat", f"/sys/class/net/{ifname}/address"]).stdout.strip()
    return [int(b, 16) for b in text.split(":")]


def trafgen_conf(path: Path, dst_mac: list[int], src_mac: list[int], src: str, dst: str) -> Path:
    """64-byte frames (60 + FCS) from src.X to dst.X, X stepping over the hosts together."""
    s, d = src.split(".")[:3], dst.split(".")[:3]
    first = 10
    last = first + HOSTS - 1
    macs = ", ".join(f"0x{b:02x}" for b in dst_mac + src_mac)
    path.write_text(
        "{\n"
        f"  {macs}, c16(0x0800),\n"
        "  0x45, 0x00, c16(46), drnd(2), c16(0x4000), 64, 17, csumip(14, 33),\n"
        f"  {', '.join(s)}, dinc({first}, {last}),\n"
        f"  {', '.join(d)}, dinc({first}, {last}),\n"
        f"  c16(40000), c16({TRAFGEN_PORT}), c16(26), csumudp(14, 34),\n"
        "  fill(0x00, 18)\n"
        "}\n"
    )
    return path


def run_trafgen(tb: Testbed, confs: dict[str, Path], rate: int | None, seconds: float) -> dict:
    """Both trafgens at once; rates over the window from SETTLE_S to SETTLE_S + seconds."""
    ends = {"client": ("client-dut", "server"), "server": ("dut-server", "client")}
    procs = []
    for side, (link, _peer) in ends.items():
        argv = ["trafgen", "--dev", tb.ifname(link, side), "--conf", str(confs[side])]
        argv += ["--cpus", "1", "--no-sock-mem"]
        if rate is not None:
            argv += ["--rate", f"{rate}pps"]
        total = seconds + SETTLE_S + 2
        procs.append(
            tb.host(side).spawn(
                ["timeout", "-s", "INT", str(total), *argv],
                stderr=subprocess.PIPE,
                label="trafgen",
            )
        )
    try:
        time.sleep(SETTLE_S)
        t0 = time.monotonic()
        c0 = {s: counter(tb.host(s)) for s in ends}
        x0 = {s: tx_packets(tb.host(s), tb.ifname(link, s)) for s, (link, _) in ends.items()}
        time.sleep(seconds)
        c1 = {s: counter(tb.host(s)) for s in ends}
        x1 = {s: tx_packets(tb.host(s), tb.ifname(link, s)) for s, (link, _) in ends.items()}
        window = time.monotonic() - t0
    finally:
        errs = []
        for p in procs:
            _out, err = p.popen.communicate(timeout=seconds + 30)
            if p.popen.returncode not in (0, 124, 130) and err:
                errs.append(err.strip()[-300:])
    out: dict[str, Any] = {"window_s": window, "errors": errs}
    for d, (src, dst) in {"c2s": ("client", "server"), "s2c": ("server", "client")}.items():
        out[d] = {
            "sent_pps": (x1[src] - x0[src]) / window,
            "received_pps": (c1[dst] - c0[dst]) / window,
        }
    return out


def run_secperf(tb: Testbed, rate: float, seconds: float) -> dict:
    topo = tb.topology
    spec = {
        "kind": "latency",
        "server": f"{topo.primary_address('server', 4)}:{CONTROL}",
        "rate_pps": rate,
        "duration": seconds,
        "warmup": SETTLE_S,
        "interval": 0,
        "sources": list(topo.emulated_addresses("client")),
        "destinations": list(topo.emulated_addresses("server")),
        "probe_every": 100,
    }
    r = run_test(tb.host("client"), spec).result
    out: dict[str, Any] = {}
    for d in ("c2s", "s2c"):
        load = r[d]["load"]
        secs = load["sent"] / load["achieved_pps"] if load["achieved_pps"] else seconds
        out[d] = {
            "sent_pps": load["achieved_pps"],
            "received_pps": load["received_pps"],
            "forfeited": load["forfeited"],
            "window_s": secs,
            "delay_p50_us": r[d]["delay_us"]["p50"],
            "delay_p99_us": r[d]["delay_us"]["p99"],
            "probes": r[d]["delay_us"]["count"],
            "ceiling_pps": load.get("ceiling_pps"),
            "counted_by": load.get("counted_by"),
        }
    return out


def med(rows: list[dict], tool: str, asked: str, d: str, key: str) -> float:
    return statistics.median(r[d][key] for r in rows if r["tool"] == tool and r["asked"] == asked)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write every run and the medians here (JSON)")
    args = parser.parse_args()
    secs: float = args.seconds
    rows: list[dict[str, Any]] = []
    topo = Topology.standard(emulated_hosts=HOSTS, offloads="off")
    with Testbed.build(topo) as tb, tempfile.TemporaryDirectory() as tmp:
        srv = start_server(tb.host("server"), f"0.0.0.0:{CONTROL}", data_ports=(5300, 5399))
        try:
            for side in ("client", "server"):
                nft_count_setup(tb.host(side))
            c_if, s_if = tb.ifname("client-dut", "client"), tb.ifname("dut-server", "server")
            dut_c, dut_s = tb.ifname("client-dut", "dut"), tb.ifname("dut-server", "dut")
            client_a, server_a = (
                topo.emulated_addresses("client"),
                topo.emulated_addresses("server"),
            )
            confs = {
                "client": trafgen_conf(
                    Path(tmp) / "c2s.cfg",
                    mac(tb.host("dut"), dut_c),
                    mac(tb.host("client"), c_if),
                    client_a[0],
                    server_a[0],
                ),
                "server": trafgen_conf(
                    Path(tmp) / "s2c.cfg",
                    mac(tb.host("dut"), dut_s),
                    mac(tb.host("server"), s_if),
                    server_a[0],
                    client_a[0],
                ),
            }
            # Warm the neighbour caches both ways (the DUT resolves every emulated host).
            for a in (client_a[0], server_a[0]):
                tb.host("dut").run(["ping", "-c", "1", "-W", "1", a], check=False)
            for rnd in range(args.rounds):
                for asked in (str(PAPER_PPS), "max"):
                    rate = PAPER_PPS if asked != "max" else None
                    s = run_secperf(tb, float(rate or MAX_ASK), secs)
                    rows.append({"round": rnd, "tool": "secperf", "asked": asked, **s})
                    t = run_trafgen(tb, confs, rate, secs)
                    rows.append({"round": rnd, "tool": "trafgen", "asked": asked, **t})
                    for d in ("c2s", "s2c"):
                        c = s[d]["ceiling_pps"]
                        print(
                            f"round {rnd} secperf {d}: sender ceiling "
                            + (f"{c:.0f} frames/s" if c else "not measured")
                            + f", load counted by {s[d]['counted_by']}",
                            flush=True,
                        )
                    for r in rows[-2:]:
                        print(
                            f"round {rnd} {r['tool']:8} asked {asked:>7}: "
                            + "  ".join(
                                f"{d} sent {r[d]['sent_pps']:9.0f} recv {r[d]['received_pps']:9.0f}"
                                for d in ("c2s", "s2c")
                            ),
                            flush=True,
                        )
        finally:
            srv.stop()
    summary: dict[str, Any] = {}
    print(f"\nmedians over {args.rounds} rounds, {secs:g} s each, frames/s per direction:")
    print(
        f"{'asked':>8} {'dir':4} {'secperf sent':>13} {'trafgen sent':>13} {'ratio':>6}"
        f" {'secperf recv':>13} {'trafgen recv':>13}"
    )
    for asked in (str(PAPER_PPS), "max"):
        for d in ("c2s", "s2c"):
            sp = med(rows, "secperf", asked, d, "sent_pps")
            tg = med(rows, "trafgen", asked, d, "sent_pps")
            spr = med(rows, "secperf", asked, d, "received_pps")
            tgr = med(rows, "trafgen", asked, d, "received_pps")
            ratio = sp / tg if tg else float("nan")
            summary[f"{asked}/{d}"] = {
                "secperf_sent_pps": sp,
                "trafgen_sent_pps": tg,
                "ratio_sent": ratio,
                "secperf_received_pps": spr,
                "trafgen_received_pps": tgr,
            }
            print(f"{asked:>8} {d:4} {sp:13.0f} {tg:13.0f} {ratio:6.2f} {spr:13.0f} {tgr:13.0f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": platform.node(),
            "kernel": platform.release(),
            "loadavg": Path("/proc/loadavg").read_text().split()[:3],
            "seconds": secs,
            "rounds": args.rounds,
            "command": " ".join(sys.argv),
        }
        args.out.write_text(json.dumps({"meta": meta, "rows": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
