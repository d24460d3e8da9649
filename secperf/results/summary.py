"""Statistics of a run, derived from run.json and records.jsonl alone.

`collect` groups the per-repetition metric values; `build_summary` turns them
into rows (one per workload point, variant and metric) with means, confidence
intervals and, for each variant, the paired degradation against the baseline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from secperf import stats
from secperf.results.checks import collect_checks
from secperf.results.metrics import (
    METRICS,
    CpuBreakdown,
    Metric,
    SearchReading,
    cpu_breakdown,
    extract,
    is_search_metric,
    metrics_for_kind,
    searches,
)
from secperf.results.rundir import RunDir

FORMAT = 1
BASELINE = "baseline"
DEFAULT_CONFIDENCE = 0.95
DEFAULT_HALFWIDTH_PCT = 2.0


@dataclass
class Group:
    """Every repetition of one workload point under one variant."""

    workload: str
    point_id: str
    variant: str
    label: str
    point: dict[str, Any]
    kind: str = ""
    # metric name -> rep -> value
    values: dict[str, dict[int, float]] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    # metric name -> rep -> the search's bracket (found or censored), search kinds only
    searches: dict[str, dict[int, SearchReading]] = field(default_factory=dict)
    # rep -> CPU by host over the measured window (records with host_cpu)
    cpu: dict[int, CpuBreakdown] = field(default_factory=dict)

    def series(self, metric: str) -> dict[int, float]:
        return self.values.get(metric, {})

    def censored(self, metric: str) -> dict[int, SearchReading]:
        """Rep -> reading of the searches that found no value (below / at least)."""
        return {r: s for r, s in self.searches.get(metric, {}).items() if s.outcome != "found"}

    def intervals(self, metric: str) -> dict[int, tuple[float, float]]:
        """Rep -> [lo, hi] of the searches that found a value."""
        return {
            r: s.interval
            for r, s in self.searches.get(metric, {}).items()
            if s.outcome == "found" and s.interval is not None
        }


GroupKey = tuple[str, str, str]  # (workload, point_id, variant)


def _point_index(point_id: str) -> float:
    """`tcp-rr#3` -> 3, so points sort as swept; no index sorts last."""
    _, _, tail = point_id.rpartition("#")
    try:
        return float(tail)
    except ValueError:
        return math.inf


def collect(run: RunDir) -> dict[GroupKey, Group]:
    """Group the run's result records, ordered: workloads in scenario order,
    points in sweep order, baseline first then variants in scenario order."""
    meta = run.read_run_json()
    scenario: Mapping[str, Any] = meta.get("scenario") or {}
    irq = irq_time_accounting(meta)
    groups: dict[GroupKey, Group] = {}
    seen_reps: dict[GroupKey, int] = {}
    for line in run.iter_records():
        record = line["record"]
        rtype = record.get("type")
        key = (str(line.get("workload", "")), str(line.get("point_id", "")), _variant(line))
        if rtype == "mechanism" and key in groups and isinstance(line.get("rep"), int):
            # what a mechanism reported after the test (a tunnel's daemon memory)
            for name, value in extract(record).items():
                groups[key].values.setdefault(name, {})[line["rep"]] = value
            continue
        if rtype not in ("result", "error"):
            continue
        group = groups.get(key)
        if group is None:
            point = line.get("point")
            group = Group(
                workload=key[0],
                point_id=key[1],
                variant=key[2],
                # nothing swept: the runner's label is "", the workload names the row
                label=str(line.get("label") or key[0] or key[1]),
                point=dict(point) if isinstance(point, Mapping) else {},
            )
            groups[key] = group
        rep_tag = line.get("rep")
        rep = rep_tag if isinstance(rep_tag, int) else seen_reps.get(key, 0)
        seen_reps[key] = max(seen_reps.get(key, 0), rep + 1)
        if rtype == "error":
            group.errors.append({"rep": rep, "seq": line.get("seq"), "error": record})
            continue
        group.kind = group.kind or str(record.get("kind", ""))
        for name, value in extract(record, irq_time_accounting=irq).items():
            group.values.setdefault(name, {})[rep] = value
        cpu = cpu_breakdown(record, irq_time_accounting=irq)
        if cpu is not None:
            group.cpu[rep] = cpu
        for name, reading in searches(record).items():
            group.searches.setdefault(name, {})[rep] = reading
            if reading.outcome != "found":  # a retried rep's censored search wins
                group.values.get(name, {}).pop(rep, None)
    return _ordered(groups, scenario)


def irq_time_accounting(meta: Mapping[str, Any]) -> bool:
    """run.json's host.irq_time_accounting (False when unknown: the tick charges
    interrupt work to the interrupted process, the common case without the option)."""
    host: Mapping[str, Any] = meta.get("host") or {}
    return host.get("irq_time_accounting") is True


def _variant(line: Mapping[str, Any]) -> str:
    return str(line.get("variant") or BASELINE)


def _ordered(groups: dict[GroupKey, Group], scenario: Mapping[str, Any]) -> dict[GroupKey, Group]:
    appearance = {key: i for i, key in enumerate(groups)}
    workload_rank: dict[str, float] = {}
    for i, w in enumerate(scenario.get("workloads") or []):
        if isinstance(w, Mapping) and isinstance(w.get("name"), str):
            workload_rank.setdefault(w["name"], i)
    first_seen: dict[str, int] = {}
    for key in groups:
        first_seen.setdefault(key[0], appearance[key])
    variant_rank = {name: i for i, name in enumerate(scenario.get("variants") or {})}

    def sort_key(key: GroupKey) -> tuple[float, int, float, int, int, float, int]:
        workload, point_id, variant = key
        in_scenario = workload in workload_rank
        return (
            0 if in_scenario else 1,
            # scenario order when the workloads are named, else the runner's order
            int(workload_rank[workload]) if in_scenario else first_seen[workload],
            _point_index(point_id),
            min(appearance[k] for k in groups if k[:2] == key[:2]),
            0 if variant == BASELINE else 1,
            variant_rank.get(variant, math.inf),
            appearance[key],
        )

    return {key: groups[key] for key in sorted(groups, key=sort_key)}


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _summarize(values: Sequence[float], confidence: float) -> stats.Summary | None:
    """stats.summarize, or None when there are too few values for an interval."""
    if len(values) < 2:
        return None
    return stats.summarize(values, confidence)


def _point_degradation(baseline: float, variant: float, higher_is_better: bool) -> float | None:
    if baseline == 0:
        return None
    change = (variant - baseline) / baseline * 100.0
    return -change if higher_is_better else change


def scenario_settings(meta: Mapping[str, Any]) -> tuple[float, float, str]:
    """(confidence, halfwidth target %, baseline kind) from run.json's scenario."""
    scenario: Mapping[str, Any] = meta.get("scenario") or {}
    repeat: Mapping[str, Any] = scenario.get("repeat") or {}
    testbed: Mapping[str, Any] = scenario.get("testbed") or {}
    confidence = float(repeat.get("confidence", DEFAULT_CONFIDENCE))
    target = float(repeat.get("halfwidth_pct", DEFAULT_HALFWIDTH_PCT))
    baseline = str(testbed.get("baseline", "forward"))
    return confidence, target, baseline


def _stops(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    stops = meta.get("stops")
    return [s for s in stops if isinstance(s, Mapping)] if isinstance(stops, list) else []


def _stop_for(stops: list[Mapping[str, Any]], point_id: str, variant: str) -> Mapping[str, Any]:
    """The runner's stop record for a point (a variant-specific one wins)."""
    found: Mapping[str, Any] = {}
    for stop in stops:
        if stop.get("point_id") != point_id:
            continue
        if stop.get("variant") == variant:
            return stop
        if "variant" not in stop:
            found = stop
    return found


def _t_halfwidth(values: Sequence[float], confidence: float) -> float:
    s = stats.summarize(values, confidence)
    return s.ci_high - s.mean


def _bracketed_interval(
    lows: Sequence[float], highs: Sequence[float], confidence: float
) -> tuple[float, float]:
    """The interval of a mean of quantities each known only to lie in [lo_i, hi_i]:
    their mean lies in [mean(lo), mean(hi)], widened on each side by the larger t
    half width of the lo and hi series. Never narrower than the mean bracket, so a
    search's resolution stays in the interval even when every repetition agreed."""
    hw = max(_t_halfwidth(lows, confidence), _t_halfwidth(highs, confidence))
    return sum(lows) / len(lows) - hw, sum(highs) / len(highs) + hw


def _degradation_bounds(
    base: tuple[float, float], variant: tuple[float, float], higher_is_better: bool
) -> tuple[float, float] | None:
    """The range of one pair's degradation % when both values are only bracketed."""
    (bl, bh), (vl, vh) = base, variant
    if bl <= 0 or bh <= 0:
        return None
    if higher_is_better:  # d = (b − v) / b: smallest with v high and b low
        return (1 - vh / bl) * 100.0, (1 - vl / bh) * 100.0
    return (vl / bh - 1) * 100.0, (vh / bl - 1) * 100.0


def _search_fields(group: Group, metric: str) -> dict[str, Any] | None:
    """The row's `search` object: how its repetitions' searches ended."""
    if not is_search_metric(metric):
        return None
    readings = group.searches.get(metric, {})
    found = group.intervals(metric)
    below = [s for s in readings.values() if s.outcome == "below"]
    above = [s for s in readings.values() if s.outcome == "at_least"]
    # what holds for every censored rep: below the highest bound, at least the lowest
    low_bound = max(below, key=lambda s: s.bound or 0.0) if below else None
    high_bound = min(above, key=lambda s: s.bound or 0.0) if above else None
    resolutions = [(hi / lo - 1) * 100.0 for lo, hi in found.values() if lo > 0]
    measures = sorted({s.measure for s in readings.values()})
    return {
        "measure": measures[0] if len(measures) == 1 else "mixed",
        "found_n": len(found),
        "bracket_low": sum(lo for lo, _ in found.values()) / len(found) if found else None,
        "bracket_high": sum(hi for _, hi in found.values()) / len(found) if found else None,
        "resolution_pct": max(resolutions) if resolutions else None,
        "below_n": len(below),
        "below_bound": low_bound.bound if low_bound else None,
        "below_asked": low_bound.asked if low_bound else None,
        "at_least_n": len(above),
        "at_least_bound": high_bound.bound if high_bound else None,
        "at_least_asked": high_bound.asked if high_bound else None,
    }


def _row(
    group: Group,
    metric: Metric,
    base: Group | None,
    confidence: float,
    target: float,
    stop: Mapping[str, Any],
) -> dict[str, Any]:
    series = group.series(metric.name)
    reps = sorted(series)
    values = [series[r] for r in reps]
    s = _summarize(values, confidence)
    search = _search_fields(group, metric.name)
    ci_low = _finite(s.ci_low) if s else None
    ci_high = _finite(s.ci_high) if s else None
    halfwidth = _finite(s.halfwidth_pct) if s else None
    target_met = bool(len(values) >= 2 and stats.ci_met(values, confidence, target))
    brackets = group.intervals(metric.name)
    if search is not None and s is not None and all(r in brackets for r in reps):
        # a search's value is known to its bracket only: the interval holds it
        ci_low, ci_high = _bracketed_interval(
            [brackets[r][0] for r in reps], [brackets[r][1] for r in reps], confidence
        )
        halfwidth = (ci_high - ci_low) / 2 / abs(s.mean) * 100.0 if s.mean else None
        target_met = halfwidth is not None and halfwidth <= target
    row: dict[str, Any] = {
        "workload": group.workload,
        "point_id": group.point_id,
        "label": group.label,
        "point": group.point,
        "kind": group.kind,
        "variant": group.variant,
        "metric": metric.name,
        "metric_label": metric.label,
        "unit": metric.unit,
        "higher_is_better": metric.higher_is_better,
        "primary": metric.primary,
        "n": len(values),
        "mean": _finite(s.mean) if s else (values[0] if values else None),
        "stddev": _finite(s.stddev) if s else None,
        "ci_low": ci_low,
        "ci_high": ci_high,
        "halfwidth_pct": halfwidth,
        "ci_target_met": target_met,
        # reported as repetition numbers, not list positions
        "outliers": [reps[i] for i in s.outliers] if s else [],
        "stop_reason": stop.get("reason"),
        "stop_reps": stop.get("reps"),
        "errors": len(group.errors),
        # repetitions whose search found no value; they are in no mean or interval
        "censored_n": len(group.censored(metric.name)),
        "search": search,
        "baseline_mean": None,
        "degradation_pct": None,
        "degradation_ci_low": None,
        "degradation_ci_high": None,
        "degradation_n": None,
        "significant": None,
    }
    if base is None:
        return row
    base_series = base.series(metric.name)
    base_values = [base_series[r] for r in sorted(base_series)]
    if base_values:
        row["baseline_mean"] = sum(base_values) / len(base_values)
    # only reps measured under both (for a search: found under both)
    paired = sorted(set(series) & set(base_series))
    row["degradation_n"] = len(paired)
    if len(paired) >= 2 and all(base_series[r] != 0 for r in paired):
        d = stats.degradation(
            [base_series[r] for r in paired],
            [series[r] for r in paired],
            higher_is_better=metric.higher_is_better,
            confidence=confidence,
        )
        row["degradation_pct"] = _finite(d.mean)
        row["degradation_ci_low"] = _finite(d.ci_low)
        row["degradation_ci_high"] = _finite(d.ci_high)
        row["significant"] = bool(stats.significant(d))
        if search is not None:
            _bracket_degradation(row, base, group, metric, paired, confidence)
    elif len(paired) == 1:  # one pair: a figure without an interval
        r = paired[0]
        row["degradation_pct"] = _point_degradation(
            base_series[r], series[r], metric.higher_is_better
        )
    return row


def _bracket_degradation(
    row: dict[str, Any],
    base: Group,
    group: Group,
    metric: Metric,
    paired: Sequence[int],
    confidence: float,
) -> None:
    """Widen a search metric's degradation interval by both sides' brackets; it is
    significant only if that interval excludes 0."""
    b, v = base.intervals(metric.name), group.intervals(metric.name)
    pairs = [
        _degradation_bounds(b[r], v[r], metric.higher_is_better)
        for r in paired
        if r in b and r in v
    ]
    bounds = [p for p in pairs if p is not None]
    if len(bounds) != len(paired):
        row["degradation_ci_low"] = row["degradation_ci_high"] = row["significant"] = None
        return
    lo, hi = _bracketed_interval([p[0] for p in bounds], [p[1] for p in bounds], confidence)
    row["degradation_ci_low"], row["degradation_ci_high"] = _finite(lo), _finite(hi)
    row["significant"] = lo > 0 or hi < 0


# A testbed whose parts miss more (or claim more) of the machine's busy time than this
# is flagged: other processes ran, or the accounting does not add up.
RECONCILIATION_GAP_PCT = 5.0


def _mean_ci(values: Sequence[float], confidence: float) -> dict[str, float | None]:
    s = _summarize(values, confidence)
    if s is None:
        return {"mean": values[0] if values else None, "ci_low": None, "ci_high": None}
    return {"mean": _finite(s.mean), "ci_low": _finite(s.ci_low), "ci_high": _finite(s.ci_high)}


def _cpu_row(group: Group, confidence: float, irq: bool) -> dict[str, Any]:
    """CPU per host and per unit of work for one point and variant, over its rounds."""
    reps = sorted(group.cpu)
    first = group.cpu[reps[0]]
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
    accounted = [a for r in reps if (a := group.cpu[r].accounted_pct) is not None]
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
    for line in run.iter_records():
        record = line["record"]
        if record.get("type") != "guest_cpu":
            continue
        key = (str(line.get("point_id", "")), _variant(line), str(record.get("host", "")))
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


def build_summary(run: RunDir, confidence: float | None = None) -> dict[str, Any]:
    """The run's statistics as a JSON-ready dict (see docs/data-format.md)."""
    meta = run.read_run_json()
    scen_conf, target, baseline_kind = scenario_settings(meta)
    conf = scen_conf if confidence is None else confidence
    stops = _stops(meta)
    groups = collect(run)
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for (workload, point_id, variant), group in groups.items():
        base = None if variant == BASELINE else groups.get((workload, point_id, BASELINE))
        names = [m.name for m in metrics_for_kind(group.kind)]
        names += [n for n in group.values if n not in names and n in METRICS]
        stop = _stop_for(stops, point_id, variant)
        for name in names:
            if not group.series(name) and not group.censored(name):
                continue  # e.g. loss for TCP
            rows.append(_row(group, METRICS[name], base, conf, target, stop))
        for err in group.errors:
            errors.append({"workload": workload, "point_id": point_id, "variant": variant, **err})
    scenario: Mapping[str, Any] = meta.get("scenario") or {}
    return {
        "format": FORMAT,
        # records.jsonl lines that could not be read (a last line cut short): their
        # round is missing from the figures, and the report says so.
        "dropped_records": list(run.dropped),
        "cpu": [_cpu_row(g, conf, irq_time_accounting(meta)) for g in groups.values() if g.cpu],
        "scenario": scenario.get("name"),
        "confidence": conf,
        "halfwidth_target_pct": target,
        "baseline": baseline_kind,
        "rows": rows,
        "errors": errors,
        # variants that could not be measured at a point, with why (run.json "failed")
        "failed": [dict(f) for f in meta.get("failed") or [] if isinstance(f, Mapping)],
        "checks": collect_checks(run),
        "guest_cpu": collect_guest_cpu(run, conf),
    }
