"""The flows workload's own overhead, and what a 1000-rule real-shaped set costs.

1. **flows vs crr**: one TCP flow of the flows workload (a rule-set review's traffic:
   bind, connect, 64-byte request, 64-byte response, the server closes first) against
   the engine's crr at the same sizes and close, one connection at a time, through the
   same plain forwarding DUT, on one testbed (placement "one", as a run's), in
   interleaved pairs whose order alternates. The ratio flows/crr per pair, its
   geometric mean with a 95 % t interval on the log ratios.
2. **a 1000-rule set**: `secperf review`'s machinery on a generated router-shaped file
   (interfaces, `ct state` first, 1000 per-host accepts `iifname "lan0" ip saddr HOST
   tcp dport PORT accept`, masquerade, policy drop) against plain forwarding with its
   coverage traffic (one flow per rule), until the run's precision target (±2 points)
   or the budget: the degradation with its interval, as the answer prints it; the same
   set with a masquerade beside it (every flow's source rewritten to the DUT's one
   address, so the servers see one client where production has many).

Run alone on a quiet machine (nothing else running): `python bench/flows_vs_crr.py
--out bench/runs/flows_vs_crr-DATE.json`. Needs root.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scipy import stats as sps  # noqa: E402

import secperf.api as sp  # noqa: E402
from secperf.engine import CONTROL_PORT, start_server  # noqa: E402
from secperf.rulesets.model import Flow, PlacedFlow  # noqa: E402
from secperf.scenario.sweep import one_point  # noqa: E402
from secperf.testbed.testbed import Testbed  # noqa: E402
from secperf.testbed.topology import Topology  # noqa: E402
from secperf.workloads.base import MeasureContext  # noqa: E402
from secperf.workloads.registry import WORKLOADS  # noqa: E402

CLIENT, SERVER = "198.18.1.2", "198.18.2.2"
SIZE = 64
PORT = 5400  # the flow's port: outside the engine server's control and data ports


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def interval(ratios: list[float]) -> dict[str, float]:
    logs = [math.log(r) for r in ratios]
    m = statistics.fmean(logs)
    if len(logs) < 3:
        return {"geomean": math.exp(m)}
    h = sps.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return {"geomean": math.exp(m), "low": math.exp(m - h), "high": math.exp(m + h)}


def overhead(pairs: int, duration: float) -> dict[str, Any]:
    """Part 1: flows and crr, interleaved on one bed."""
    flow = Flow("one", "tcp", CLIENT, SERVER, PORT, None, None, request=SIZE, response=SIZE)
    placed = (PlacedFlow(flow, "client", "server", CLIENT, SERVER, SERVER, PORT),)
    flows_point = one_point(
        {"kind": "flows", "duration": duration, "warmup": 0.5, "parallel": 1, "timeout": 1}
    )
    crr_point = one_point(
        {"kind": "crr", "duration": duration, "warmup": 0.5, "request": SIZE, "response": SIZE}
    )
    rows: list[dict[str, float]] = []
    with (
        tempfile.TemporaryDirectory() as state,
        Testbed.build(Topology.standard(), state_dir=Path(state), cpus="one") as tb,
    ):
        server = start_server(tb.host("server"), f"0.0.0.0:{CONTROL_PORT}")
        try:
            ctx = MeasureContext.on(tb, f"{SERVER}:{CONTROL_PORT}", variant="baseline")
            ctx = dataclasses.replace(ctx, plan=dataclasses.replace(ctx.plan, flows=placed))
            for i in range(pairs):
                got: dict[str, float] = {}
                order = ("flows", "crr") if i % 2 == 0 else ("crr", "flows")
                for kind in order:
                    point = flows_point if kind == "flows" else crr_point
                    rec = WORKLOADS.get(kind).executor.measure(ctx, point)
                    got[kind] = float(
                        rec["flow_rate"] if kind == "flows" else rec["transactions_per_second"]
                    )
                got["ratio"] = got["flows"] / got["crr"]
                rows.append(got)
                print(
                    f"pair {i + 1}: flows {got['flows']:.0f}/s crr {got['crr']:.0f}/s", flush=True
                )
        finally:
            server.stop()
    return {
        "pairs": rows,
        "flows_median": statistics.median(r["flows"] for r in rows),
        "crr_median": statistics.median(r["crr"] for r in rows),
        "ratio": interval([r["ratio"] for r in rows]),
    }


def router_1000(nat: bool = True) -> str:
    rules = "".join(
        f'\t\tiifname "lan0" oifname "wan0" ip saddr 10.20.{i // 250}.{i % 250 + 1} '
        f"tcp dport {443 if i % 2 else 80} accept\n"
        for i in range(1000)
    )
    return (
        "flush ruleset\n"
        "table inet filter {\n"
        "\tchain forward {\n"
        "\t\ttype filter hook forward priority filter; policy drop;\n"
        "\t\tct state established,related accept\n"
        "\t\tct state invalid drop\n"
        f"{rules}"
        '\t\tiifname "wan0" drop\n'
        "\t}\n"
        "}\n"
    ) + (
        ""
        if not nat
        else "table ip nat {\n"
        "\tchain postrouting {\n"
        "\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
        '\t\toifname "wan0" ip saddr 10.20.0.0/16 masquerade\n'
        "\t}\n"
        "}\n"
    )


def thousand_rules(budget: str) -> dict[str, Any]:
    """Part 2: the 1000-rule set against plain forwarding, to the precision target."""
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "router-1000.nft"
        rules.write_text(router_1000(nat=False))
        natted = Path(tmp) / "router-1000-nat.nft"
        natted.write_text(router_1000(nat=True))
        scenario = sp.load(
            {
                "name": "bench-1000-rules",
                "description": "a router-shaped 1000-rule set against plain forwarding",
                "repeat": {"budget": budget},
                "variants": {
                    name: {
                        "mechanisms": [
                            {
                                "kind": "ruleset",
                                "file": str(path),
                                "interfaces": {"lan0": "client", "wan0": "server"},
                            }
                        ]
                    }
                    for name, path in (("router-1000", rules), ("router-1000-nat", natted))
                },
                "workloads": [{"kind": "flows", "traffic": "coverage", "duration": "1s"}],
            }
        )
        run = sp.run(scenario, out=Path(tmp) / "results")
        summary = sp.summary(run)
    rows = [
        {
            k: r.get(k)
            for k in (
                "variant",
                "metric",
                "n",
                "mean",
                "baseline_mean",
                "degradation_pct",
                "degradation_ci_low",
                "degradation_ci_high",
                "ci_target_met",
                "bottleneck",
            )
        }
        for r in summary["rows"]
        if str(r.get("variant")).startswith("router-1000")
    ]
    return {"rows": rows, "stops": summary.get("stops")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--budget", default="5min")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    result = {
        "bench": "flows_vs_crr",
        "started": started,
        "cpu": cpu_model(),
        "kernel": platform.release(),
        "load_at_start": Path("/proc/loadavg").read_text().split()[:3],
        "overhead": overhead(a.pairs, a.duration),
        "thousand_rules": thousand_rules(a.budget),
    }
    r = result["overhead"]["ratio"]
    print(
        f"flows / crr (one connection at a time, {SIZE}/{SIZE} B, server closes first): "
        f"x{r['geomean']:.3f}" + (f" [{r['low']:.3f}, {r['high']:.3f}]" if "low" in r else "")
    )
    for row in result["thousand_rules"]["rows"]:
        print(
            f"{row['variant']}, {row['metric']}: {row['degradation_pct']} % "
            f"[{row['degradation_ci_low']}, {row['degradation_ci_high']}] n={row['n']}"
        )
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
