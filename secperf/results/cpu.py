"""CPU per host and per unit of work, for the summary's `cpu` rows, and a VM guest's
own view of its CPU (docs/data-format.md)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from secperf import stats
from secperf.results.evidence import GroupView
from secperf.results.rundir import RunDir


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


# A testbed whose parts miss more (or claim more) of the machine's busy time than this
# is flagged: other processes ran, or the accounting does not add up.
RECONCILIATION_GAP_PCT = 5.0


def _mean_ci(values: Sequence[float], confidence: float) -> dict[str, float | None]:
    s = stats.summarize(values, confidence) if len(values) >= 2 else None
    if s is None:
        return {"mean": values[0] if values else None, "ci_low": None, "ci_high": None}
    return {"mean": _finite(s.mean), "ci_low": _finite(s.ci_low), "ci_high": _finite(s.ci_high)}


def _exact(group: GroupView, rep: int) -> tuple[float, float | None] | None:
    """The machine's busy time on the testbed's CPUs over the measured window, from the
    exact counters around the test (the rep's `machine` record: cpuidle residency, the
    cgroups, ksoftirqd), and the testbed's exact share of it; None without a record (an
    older run: tick-sampled).

    The record spans the whole test (start-up and teardown, quieter than the window),
    so its busy time is not scaled down to the window: the window's is the testbed's own
    CPU there over the testbed's exact share of the span's busy time. It is thereby never
    below the testbed's CPU (a share above 100 %, counters that disagree, is flagged by
    the reconciliation, not taken)."""
    rec = group.machine.get(rep)
    if rec is None or rec.get("source") in (None, "none"):
        return None
    busy, span = rec.get("busy_s"), rec.get("span_s")
    if not isinstance(busy, int | float) or not isinstance(span, int | float) or span <= 0:
        return None
    raw = rec.get("accounted_pct")
    accounted = float(raw) if isinstance(raw, int | float) and raw > 0 else None
    cpu = group.cpu[rep]
    if accounted is None:  # no share: the span's busy time at its average pace
        return max(cpu.testbed, busy / span * cpu.window_s), None
    return cpu.testbed * 100.0 / min(100.0, accounted), accounted


def cpu_row(group: GroupView, confidence: float, irq: bool) -> dict[str, Any]:
    """CPU per host and per unit of work for one point and variant, over its rounds.

    `machine` and `accounted` come from the exact counters around each test (the
    `machine` record) where the run has them, else from the engine's tick-sampled
    /proc/stat over the window (older runs: it undercounts softirq-heavy work)."""
    reps = sorted(group.cpu)
    first = group.cpu[reps[0]]
    exact = {r: e for r in reps if (e := _exact(group, r)) is not None}
    if exact:
        group.cpu = {
            r: dataclasses.replace(group.cpu[r], machine=exact[r][0]) if r in exact else c
            for r, c in group.cpu.items()
        }
    parts = list(dict.fromkeys(p for r in reps for p in group.cpu[r].parts()))
    per_unit: dict[str, Any] = {}
    percent: dict[str, Any] = {}
    for part in parts:
        per_unit[part] = _mean_ci(
            [group.cpu[r].parts().get(part, 0.0) * 1e6 / group.cpu[r].units for r in reps],
            confidence,
        )
        percent[part] = _mean_ci(
            [group.cpu[r].parts().get(part, 0.0) / group.cpu[r].window_s * 100 for r in reps],
            confidence,
        )
    accounted = [
        a
        for r in reps
        if (a := exact[r][1] if r in exact else group.cpu[r].accounted_pct) is not None
    ]
    mean_accounted = sum(accounted) / len(accounted) if accounted else None
    return {
        "workload": group.workload,
        "point_id": group.point_id,
        "label": group.label,
        "variant": group.variant,
        "kind": group.kind,
        "unit": first.unit,
        "n": len(reps),
        "hosts": list(first.hosts),
        # µs of CPU per unit of work and % of one CPU, by part: host:<name>, softirq,
        # testbed (the hosts, plus softirq where the kernel keeps it out of them), machine
        "per_unit_us": per_unit,
        "percent": percent,
        "softirq_in_hosts": not irq,
        # machine and accounted: exact counters (cpuidle) or /proc/stat's ticks
        "machine_source": "exact" if exact else "ticks",
        "accounted_pct": mean_accounted,
        "accounted_min_pct": min(accounted) if accounted else None,
        "accounted_max_pct": max(accounted) if accounted else None,
        "reconciliation_flag": bool(
            accounted and any(abs(a - 100.0) > RECONCILIATION_GAP_PCT for a in accounted)
        ),
    }


def collect_guest_cpu(run: RunDir, confidence: float) -> list[dict[str, Any]]:
    """Per point and variant: a VM host's own /proc/stat over each test (`guest_cpu`
    records, warm-up included), as % of the guest's CPUs busy and in softirq."""
    acc: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for line in run.iter_lines():
        record = line.record
        if line.rtype != "guest_cpu":
            continue
        key = (line.point_id, line.variant, str(record.get("host", "")))
        into = acc.setdefault(key, {"busy": [], "softirq": []})
        for part, key_ in (("busy", "busy_fraction"), ("softirq", "softirq_fraction")):
            value = record.get(key_)
            if isinstance(value, int | float):
                into[part].append(float(value) * 100)
    return [
        {
            "point_id": point_id,
            "variant": variant,
            "host": host,
            "n": len(parts["busy"]),
            "busy_pct": _mean_ci(parts["busy"], confidence),
            "softirq_pct": _mean_ci(parts["softirq"], confidence),
        }
        for (point_id, variant, host), parts in acc.items()
        if parts["busy"]
    ]
