"""How repeatable the threshold search is: MLRsearch (RFC 9971, secperf's default)
against the bisection (`search = "bisect"`), on the same DUT, in the same time.

One testbed (the standard client – DUT – server, the DUT's receive processing on
`--dut-cpus` so that a DUT that cannot keep up drops frames), an nftables ACL of
1000 linear rules on the DUT's forward hook (none matches the test frames, so each
frame walks all of them), and RFC 2544 throughput at 64-byte frames (the `rfc2544`
kind, `tests = ["throughput"]`), searched `--repeats` times by each method in
interleaved pairs whose order alternates. The bisection runs its `max_trials`;
MLRsearch gets the same wall time (`search_time` = the mean of the bisections so
far; the first pair runs the bisection first). Printed and kept: every search's
found rate (None: it found no value, its bound beside), its wall time, the spread
of each method's found rates (min, max, stdev) and the ratio of the spreads
(bisection / MLRsearch: above 1, MLRsearch repeats better).

Choose `--line-rate` (the rates' scale, the search's top) above what the DUT holds
and within what the packet sender reaches on the machine: a bisection that answers
"at least" with an achieved rate far below its ask met the sender's limit, not
the DUT's (then raise `--rules`).

Run alone on a quiet machine (nothing else running): `python
bench/search_repeatability.py --out bench/runs/search_repeatability-DATE.json`.
Needs root.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from secperf.scenario.sweep import one_point  # noqa: E402
from secperf.testbed.testbed import Testbed  # noqa: E402
from secperf.testbed.topology import Topology  # noqa: E402
from secperf.workloads.base import MeasureContext  # noqa: E402
from secperf.workloads.registry import WORKLOADS  # noqa: E402

PORT = 5201  # the rfc2544 kind's default test port


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def acl(rules: int) -> str:
    """`rules` accepts the test frames never match (other sources, other ports), then
    the forward policy accept: each test frame is compared with every rule."""
    lines = "".join(
        f"\t\tip saddr 10.{i // 250}.{i % 250}.1 udp dport {1024 + i} drop\n" for i in range(rules)
    )
    return (
        "table inet secperf_bench_acl {\n"
        "\tchain forward {\n"
        "\t\ttype filter hook forward priority filter; policy accept;\n"
        f"{lines}"
        "\t}\n"
        "}\n"
    )


def point(method: str, a: argparse.Namespace, search_time: float | None) -> Any:
    table: dict[str, Any] = {
        "kind": "rfc2544",
        "frame": 64,
        "tests": ["throughput"],
        "line_rate": a.line_rate,
        "duration": a.duration,
        "settle": a.settle,
        "resolution_pct": a.resolution_pct,
        "max_trials": a.max_trials,
        "dut_cpus": a.dut_cpus,
        "search": method,
    }
    if search_time is not None and method == "mlrsearch":
        table["search_time"] = search_time
    return one_point(table)


def spread(values: list[float | None]) -> dict[str, Any]:
    found = [v for v in values if v is not None]
    return {
        "found_n": len(found),
        "min": min(found) if found else None,
        "max": max(found) if found else None,
        "stdev": statistics.stdev(found) if len(found) > 1 else None,
        "mean": statistics.fmean(found) if found else None,
    }


def run(a: argparse.Namespace) -> dict[str, Any]:
    """The interleaved searches on one testbed."""
    rows: list[dict[str, Any]] = []
    bisect_times: list[float] = []
    executor = WORKLOADS.get("rfc2544").executor
    with (
        tempfile.TemporaryDirectory() as state,
        # the links unshaped: `line_rate` is the rates' scale, not a limit of the path
        Testbed.build(Topology.standard(), state_dir=Path(state), cpus="one") as tb,
    ):
        tb.host("dut").run(["nft", "-f", "-"], input=acl(a.rules))
        ctx = MeasureContext.on(tb, f"198.18.2.2:{PORT}", variant=f"acl-{a.rules}")
        for i in range(a.repeats):
            order = ("bisect", "mlrsearch") if i % 2 == 0 else ("mlrsearch", "bisect")
            for method in order:
                budget = statistics.fmean(bisect_times) if bisect_times else None
                started = time.monotonic()
                rec = executor.measure(ctx, point(method, a, budget))
                took = time.monotonic() - started
                if method == "bisect":
                    bisect_times.append(took)
                s = rec["throughput"]["search"]
                row = {
                    "pair": i + 1,
                    "method": method,
                    "fps": s.get("value"),
                    "outcome": s.get("outcome"),
                    "bound": s.get("bound"),
                    "seconds": took,
                    "trials": len(s.get("trials") or s.get("steps") or []),
                    "search_time": budget if method == "mlrsearch" else None,
                    "stopped": s.get("stopped"),
                }
                rows.append(row)
                print(
                    f"pair {i + 1} {method:9}: {row['outcome']} {row['fps'] or row['bound']} "
                    f"frames/s in {took:.1f} s, {row['trials']} trials",
                    flush=True,
                )
    by = {m: spread([r["fps"] for r in rows if r["method"] == m]) for m in ("mlrsearch", "bisect")}
    sm, sb = by["mlrsearch"]["stdev"], by["bisect"]["stdev"]
    return {
        "searches": rows,
        "spread": by,
        "stdev_ratio_bisect_over_mlrsearch": sb / sm if sm and sb is not None else None,
        "seconds": {
            m: sum(r["seconds"] for r in rows if r["method"] == m) for m in ("mlrsearch", "bisect")
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rules", type=int, default=1000)
    ap.add_argument("--duration", default="2s", help="the final (bisection: every) trial's length")
    ap.add_argument("--settle", default="0.5s")
    ap.add_argument("--line-rate", default="1gbit")
    ap.add_argument("--resolution-pct", type=float, default=2.0)
    ap.add_argument("--max-trials", type=int, default=12)
    ap.add_argument("--dut-cpus", default="1")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    result = {
        "bench": "search_repeatability",
        "started": started,
        "cpu": cpu_model(),
        "cpus": len(Path("/proc/cpuinfo").read_text().split("processor\t")) - 1,
        "kernel": platform.release(),
        "dut": f"nftables, {a.rules} linear rules on the forward hook",
        "workload": "rfc2544 throughput, 64-byte frames",
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        **run(a),
    }
    by = result["spread"]
    for m in ("mlrsearch", "bisect"):
        s = by[m]
        print(
            f"{m:9}: found {s['found_n']}/{a.repeats}, min {s['min']}, max {s['max']}, "
            f"stdev {s['stdev']}, {result['seconds'][m]:.0f} s in all"
        )
    print(
        "spread ratio (bisect stdev / MLRsearch stdev):",
        result["stdev_ratio_bisect_over_mlrsearch"],
    )
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"kept: {a.out}")


if __name__ == "__main__":
    main()
