"""Which CPU placement gives quick.toml its tightest intervals (run as root, on a quiet machine).

Runs scenarios/quick.toml's three workloads (TCP stream, rr, crr; plain forwarding
against a 1000-entry ACL, linear and as a set) once per placement and repetition,
the placements interleaved in a shuffled order each repetition, every run with the
same fixed number of rounds (no budget, no retries, no traced round), so that the
interval widths compare at equal n. Prints, per placement, each degradation's mean
and the half width of its 95 % interval in percentage points (the median over the
repetitions), the baseline's rate and each run's wall time; `--out` keeps the
figures as JSON.

    .venv/bin/python bench/placement.py [--rounds 8] [--repeats 2]
        [--placements one,shared] [--out bench/runs/placement-DATE.json]

"split" needs at least 3 CPUs and is left out below that. docs/methodology.md,
"Placement", says what each placement means; the default (`[testbed] cpus`) is the
placement this bench finds tightest.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from secperf import api

ROOT = Path(__file__).resolve().parents[1]
QUICK = ROOT / "scenarios" / "quick.toml"


def scenario(placement: str, rounds: int) -> dict[str, Any]:
    """quick.toml with this placement and a fixed number of rounds."""
    sc = api.load(QUICK).to_json_dict()
    sc["testbed"]["cpus"] = placement
    sc["repeat"].update(
        min=rounds,
        max=rounds,
        budget=86400,
        remeasure=0,
        trace_softirq=False,
        attribution=False,
        seed=None,
    )
    sc["name"] = f"placement-{placement}"
    return sc


def one_run(placement: str, rounds: int, out: Path) -> dict[str, Any]:
    began = time.monotonic()
    run = api.run(api.load(scenario(placement, rounds), base_dir=QUICK.parent), out)
    seconds = time.monotonic() - began
    summary = api.summary(run)
    figures: dict[str, Any] = {}
    for row in summary["rows"]:
        if not row["primary"]:
            continue
        key = f"{row['workload']} {row['variant']}"
        lo, hi = row.get("degradation_ci_low"), row.get("degradation_ci_high")
        figures[key] = {
            "mean": row["mean"],
            "degradation_pct": row.get("degradation_pct"),
            "halfwidth_pp": (hi - lo) / 2 if lo is not None and hi is not None else None,
            "value_halfwidth_pct": row.get("halfwidth_pct"),
            "bottleneck": (row.get("bottleneck") or {}).get("short"),
        }
    others = [n.get("others_pct_mean") for n in summary.get("noise") or []]
    return {
        "placement": placement,
        "seconds": seconds,
        "run_dir": str(run.path),
        "others_pct_max": max((o for o in others if o is not None), default=None),
        "figures": figures,
    }


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def report(runs: list[dict[str, Any]], placements: list[str]) -> None:
    keys = sorted({k for r in runs for k in r["figures"]})
    print(f"{'':34}" + "".join(f"{p:>28}" for p in placements))
    for key in keys:
        cells = []
        for p in placements:
            mine = [r["figures"][key] for r in runs if r["placement"] == p and key in r["figures"]]
            hw = median([f["halfwidth_pp"] for f in mine if f["halfwidth_pp"] is not None])
            d = median([f["degradation_pct"] for f in mine if f["degradation_pct"] is not None])
            m = median([f["mean"] for f in mine if f["mean"] is not None])
            if d is None:
                cells.append(f"{m:>16,.0f} (value)" if m is not None else "–")
            else:
                cells.append(f"{d:+7.1f} ±{hw:5.1f} pp" if hw is not None else f"{d:+7.1f}")
        print(f"{key:34}" + "".join(f"{c:>28}" for c in cells))
    for p in placements:
        secs = [r["seconds"] for r in runs if r["placement"] == p]
        noise = [r["others_pct_max"] for r in runs if r["placement"] == p]
        print(
            f"{p}: {len(secs)} runs, {statistics.mean(secs):.0f} s each; "
            f"others' CPU at most {noise} % of one CPU"
        )
    widest = {
        p: max(
            (
                f["halfwidth_pp"]
                for r in runs
                if r["placement"] == p
                for f in r["figures"].values()
                if f["halfwidth_pp"] is not None
            ),
            default=None,
        )
        for p in placements
    }
    print("widest degradation interval (pp) per placement:", widest)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8, help="rounds of every run (fixed)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per placement")
    ap.add_argument("--placements", default="", help="comma-separated; default all that fit")
    ap.add_argument("--out", type=Path, help="write every run's figures here (JSON)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/placement.py builds testbeds: run it as root", file=sys.stderr)
        return 2
    placements = [p for p in args.placements.split(",") if p] or ["one", "shared"] + (
        ["split"] if len(os.sched_getaffinity(0)) >= 3 else []
    )
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="secperf-placement-") as tmp:
        for repeat in range(args.repeats):
            order = list(placements)
            random.shuffle(order)  # interleaved: drift falls on every placement alike
            for p in order:
                print(f"repeat {repeat + 1}/{args.repeats}: {p} ...", flush=True)
                runs.append(one_run(p, args.rounds, Path(tmp)))
    report(runs, placements)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rounds": args.rounds, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
