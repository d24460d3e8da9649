"""The inline IPS at speed: secperf-nfq with 1000 rules beside fwsnort's kernel string
match and an accept-all queue, in one run.

Run as root from the checkout: `python bench/ips_nfq_vs_fwsnort.py [--seconds 3]
[--rounds 5] [--rates 20000,30000,40000] [--out bench/runs/ips_nfq_vs_fwsnort-DATE.json]`.

One namespace testbed as document 004's: client – DUT – server, 100 emulated hosts a
side, offloads off. The load is the latency kind under load (`probe_every = 100`):
64-byte UDP frames from the AF_PACKET sender in both directions at once, each asked
at RATE frames/s (so 2 × RATE through the DUT), one in 100 a kernel-stamped probe,
counted where they arrive. Each variant in the DUT's FORWARD path:

- `none`: plain forwarding (what the path carries without a mechanism);
- `accept-all-queue`: every packet to secperf-nfq without rules (`--queue`, no
  `--rules`): it reads each packet's headers and accepts it in a batch verdict, the
  cost of the queue alone (FIELD-NOTES: an accept-all libnetfilter_queue program carried
  about 75 k packets/s here);
- `nfq-1000`: the ips mechanism, `engine = "nfq"`, 1000 generated rules (Hyperscan in
  user space; no rule fires on this traffic, so every packet is scanned against all);
- `nfq-1000-2q`: the same on two queues (`queues = 2`, `--queue-balance`, a thread
  each);
- `fwsnort-1000`: the ips mechanism, `engine = "fwsnort"`, the same 1000 rules as
  iptables string matches (kernel).

Interleaved rounds (every variant and rate once a round). Prints each run and the
medians: frames/s through the DUT (both ways), loss %, the probes' p99 one-way delay,
and whether the variant carried at least 60,000 frames/s with under 0.1 % loss (the
issue's figure for secperf-nfq with 1000 rules). The engine's control connection passes
beside the queue, as in a run. The testbed and every process are removed on the way
out.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from secperf.engine import run_test, start_server
from secperf.mechanisms import nfq
from secperf.mechanisms.base import (
    MechanismContext,
    RenderedFile,
    apply_files,
    reset_dut,
    traffic_plan,
)
from secperf.mechanisms.ips import Ips, IpsSpec
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology

CONTROL = 5201
HOSTS = 100
SETTLE_S = 0.5
RULES = 1000
TARGET_PPS = 60_000  # through the DUT, both ways together
TARGET_LOSS_PCT = 0.1
ACCEPT_QUEUE = 7
VARIANTS = ("none", "accept-all-queue", "nfq-1000", "nfq-1000-2q", "fwsnort-1000")


def context(tb: Testbed, files: Path, name: str) -> MechanismContext:
    return MechanismContext(
        plan=traffic_plan(tb.topology, 4),
        files_dir=files,
        name=name,
        table=f"secperf_{tb.prefix}",
        topology=tb.topology,
    )


def apply_variant(tb: Testbed, files: Path, name: str) -> Callable[[], dict[str, Any]]:
    """Puts the variant in the DUT's path; returns what takes it out again (and gives the
    daemon's counters, when there is one)."""
    dut = tb.host("dut")
    ctx = context(tb, files, name)
    if name == "none":
        return lambda: {}
    if name == "accept-all-queue":
        m = nfq.start_matcher(
            dut, ctx, nfq.daemon_queue_args(ACCEPT_QUEUE, 1, False), "accept-all", 10.0
        )
        ipt = files / f"{name}.iptables"
        ipt.write_text(
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
            + "".join(f"{line}\n" for line in nfq.control_bypass("FORWARD", ctx.plan))
            + f"-A FORWARD -j {nfq.queue_target(ACCEPT_QUEUE, 1, False)}\nCOMMIT\n"
        )
        try:
            apply_files(dut, [RenderedFile(ipt, "iptables-restore")], "iptables-nft", 4)
        except Exception:
            nfq.stop_matcher(m, {})
            raise

        def undo_queue() -> dict[str, Any]:
            reset_dut(dut, {"nft", "iptables-nft"})
            nfq.stop_matcher(m, {})
            return _last_stats(m.out)

        return undo_queue
    engine, queues = ("fwsnort", 1) if name.startswith("fwsnort") else ("nfq", 1)
    if name.endswith("-2q"):
        queues = 2
    ips = Ips(IpsSpec(engine=engine, rules=RULES, queues=queues))
    ctx.rendered = ips.render(ctx)
    try:
        ips.apply(dut, ctx)
    except Exception:
        ips.release(dut, ctx)
        reset_dut(dut, ips.backends())
        raise

    def undo_ips() -> dict[str, Any]:
        ips.release(dut, ctx)
        reset_dut(dut, ips.backends())
        return _last_stats(files / f"{name}.dut.ips-stats.jsonl")

    return undo_ips


def _last_stats(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    lines = path.read_text().splitlines()
    return json.loads(lines[-1]) if lines else {}


def run_load(tb: Testbed, rate: float, seconds: float) -> dict[str, Any]:
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
    sent = sum(r[d]["load"]["sent"] for d in ("c2s", "s2c"))
    received = sum(r[d]["load"]["received"] for d in ("c2s", "s2c"))
    comb = r["combined"]["load"]
    return {
        "sent_pps": comb["achieved_pps"],
        "received_pps": comb["received_pps"],
        "sent": sent,
        "received": received,
        "loss_pct": 100.0 * (sent - received) / sent if sent else None,
        "forfeited": comb["forfeited"],
        "ceiling_pps": comb.get("ceiling_pps"),
        "delay_p50_us": r["combined"].get("delay_us", {}).get("p50"),
        "delay_p99_us": r["combined"].get("delay_us", {}).get("p99"),
    }


def stats_brief(stats: dict[str, Any]) -> dict[str, Any]:
    """The daemon's counters that say where packets went (docs/data-format.md)."""
    kernel = stats.get("kernel") or {}
    return {
        k: v
        for k, v in {
            "packets": stats.get("packets"),
            "batches": stats.get("batches"),
            "queue_dropped": kernel.get("queue_dropped"),
            "user_dropped": kernel.get("user_dropped"),
        }.items()
        if v is not None
    }


def fmt(x: float | None, spec: str) -> str:
    return "not measured" if x is None else format(x, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--rates", default="20000,30000,40000", help="frames/s asked each way, comma-separated"
    )
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, help="write every run and the medians here (JSON)")
    args = parser.parse_args()
    rates = [float(x) for x in args.rates.split(",")]
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"--variants: unknown {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    rows: list[dict[str, Any]] = []
    topo = Topology.standard(emulated_hosts=HOSTS, offloads="off")
    with Testbed.build(topo) as tb, tempfile.TemporaryDirectory() as tmp:
        srv = start_server(tb.host("server"), f"0.0.0.0:{CONTROL}", data_ports=(5300, 5399))
        try:
            client_a, server_a = (
                topo.emulated_addresses("client"),
                topo.emulated_addresses("server"),
            )
            for a in (client_a[0], server_a[0]):
                tb.host("dut").run(["ping", "-c", "1", "-W", "1", a], check=False)
            for rnd in range(args.rounds):
                for variant in variants:
                    files = Path(tmp) / f"{variant}.{rnd}"
                    files.mkdir()
                    undo = apply_variant(tb, files, variant)
                    try:
                        runs = [(rate, run_load(tb, rate, args.seconds)) for rate in rates]
                    finally:
                        stats = undo()
                    for rate, r in runs:
                        row = {"round": rnd, "variant": variant, "asked_each_way": rate, **r}
                        row["daemon"] = stats_brief(stats)
                        rows.append(row)
                        print(
                            f"round {rnd} {variant:17} asked {2 * rate:7.0f}: "
                            f"sent {r['sent_pps']:8.0f} recv {r['received_pps']:8.0f} frames/s "
                            f"loss {fmt(r['loss_pct'], '.3f')} % "
                            f"p99 {fmt(r['delay_p99_us'], '.0f')} µs",
                            flush=True,
                        )
        finally:
            srv.stop()
    summary: dict[str, Any] = {}
    print(f"\nmedians over {args.rounds} rounds, {args.seconds:g} s each, both ways together:")
    print(
        f"{'variant':17} {'asked':>8} {'sent/s':>9} {'received/s':>11} {'loss %':>8}"
        f" {'p99 µs':>8}  ≥{TARGET_PPS // 1000} k at <{TARGET_LOSS_PCT} %"
    )
    for variant in variants:
        for rate in rates:
            mine = [r for r in rows if r["variant"] == variant and r["asked_each_way"] == rate]
            losses = [r["loss_pct"] for r in mine if r["loss_pct"] is not None]
            p99s = [r["delay_p99_us"] for r in mine if r["delay_p99_us"] is not None]
            s = {
                "asked_pps": 2 * rate,
                "sent_pps": statistics.median(r["sent_pps"] for r in mine),
                "received_pps": statistics.median(r["received_pps"] for r in mine),
                "loss_pct": statistics.median(losses) if losses else None,
                "delay_p99_us": statistics.median(p99s) if p99s else None,
            }
            s["meets_target"] = bool(
                s["loss_pct"] is not None
                and s["received_pps"] >= TARGET_PPS
                and s["loss_pct"] < TARGET_LOSS_PCT
            )
            summary[f"{variant}/{2 * rate:.0f}"] = s
            print(
                f"{variant:17} {2 * rate:8.0f} {s['sent_pps']:9.0f} {s['received_pps']:11.0f}"
                f" {fmt(s['loss_pct'], '8.3f')} {fmt(s['delay_p99_us'], '8.0f')}"
                f"  {'yes' if s['meets_target'] else 'no'}"
            )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": platform.node(),
            "kernel": platform.release(),
            "loadavg": Path("/proc/loadavg").read_text().split()[:3],
            "seconds": args.seconds,
            "rounds": args.rounds,
            "rates_each_way": rates,
            "rules": RULES,
            "command": " ".join(sys.argv),
        }
        args.out.write_text(json.dumps({"meta": meta, "runs": rows, "summary": summary}, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
