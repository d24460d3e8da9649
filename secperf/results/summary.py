"""Statistics of a run, derived from run.json and records.jsonl alone.

`collect` groups the per-repetition metric values; `build_summary` turns them
into rows (one per workload point, variant and metric) with means, confidence
intervals and, for each variant, the paired degradation against the baseline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from secperf import stats
from secperf.results import attribution, behaviour, bracketed, evidence
from secperf.results.bottleneck import comparison
from secperf.results.checks import ValidationRounds, collect_checks
from secperf.results.cpu import collect_guest_cpu, cpu_row
from secperf.results.delays import DIRECTIONS
from secperf.results.delays import collect as collect_delays
from secperf.results.delays import to_json as delays_json
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
from secperf.results.paper import paper_verdicts
from secperf.results.records import RecordLine, as_line
from secperf.results.rundir import RunDir
from secperf.results.shortfall import planned_precision, shortfall
from secperf.results.upgrade import FORMAT

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
    # rep -> the machine's CPUs over the test (`machine` records; a round measured
    # again: its last attempt) and the shaped links (`links` records)
    machine: dict[int, dict[str, Any]] = field(default_factory=dict)
    links: dict[int, dict[str, Any]] = field(default_factory=dict)
    # the traced round: its result and its `softirq` record
    traced: dict[str, dict[str, Any]] = field(default_factory=dict)
    # validation criteria: the rounds checked, FAILED and noted
    validation: ValidationRounds = field(default_factory=ValidationRounds)
    invalid_metrics: set[str] = field(default_factory=set)  # the FAILED rounds' metrics

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


def collect(
    run: RunDir, lines: Iterable[Mapping[str, Any] | RecordLine] | None = None
) -> dict[GroupKey, Group]:
    """Group the run's result records (`lines`: the run's, read here when None),
    ordered: workloads in scenario order, points in sweep order, baseline first then
    variants in scenario order."""
    meta = run.read_run_json()
    scenario: Mapping[str, Any] = meta.get("scenario") or {}
    irq = irq_time_accounting(meta)
    groups: dict[GroupKey, Group] = {}
    seen_reps: dict[GroupKey, int] = {}
    for given in run.iter_lines() if lines is None else lines:
        line = as_line(given)
        record, rtype, phase = line.record, line.rtype, line.phase
        key = (line.workload, line.point_id, line.variant)
        if phase is not None:
            # outside the measured rounds: the closed-loop calibration of an open-loop
            # point, the traced round (its softirq time, not its rates)
            if phase == "traced" and key in groups and rtype in ("result", "softirq"):
                groups[key].traced[str(rtype)] = record
            continue
        if rtype in ("machine", "links") and key in groups and line.rep is not None:
            into = groups[key].machine if rtype == "machine" else groups[key].links
            into[line.rep] = record
            continue
        if rtype == "mechanism" and key in groups and line.rep is not None:
            # what a mechanism reported after the test (a tunnel's daemon memory)
            for name, value in extract(record).items():
                groups[key].values.setdefault(name, {})[line.rep] = value
            continue
        if rtype not in ("result", "error"):
            continue
        group = groups.get(key)
        if group is None:
            group = Group(
                workload=key[0],
                point_id=key[1],
                variant=key[2],
                # nothing swept: the runner's label is "", the workload names the row
                label=line.label or key[0] or key[1],
                point=dict(line.point),
            )
            groups[key] = group
        rep = line.rep if line.rep is not None else seen_reps.get(key, 0)
        seen_reps[key] = max(seen_reps.get(key, 0), rep + 1)
        if rtype == "error":
            group.errors.append({"rep": rep, "seq": line.seq, "error": record})
            continue
        group.kind = group.kind or str(record.get("kind", ""))
        if not group.validation.see(rep, record):  # FAILED: the criteria, not a number
            group.invalid_metrics.update(extract(record))
            for series in group.values.values():
                series.pop(rep, None)
            continue
        for name, value in extract(record, irq_time_accounting=irq).items():
            group.values.setdefault(name, {})[rep] = value
        cpu = cpu_breakdown(record, irq_time_accounting=irq)
        if cpu is not None:
            group.cpu[rep] = cpu
        for name, reading in searches(record).items():
            group.searches.setdefault(name, {})[rep] = reading
            if reading.outcome != "found":  # a retried rep's censored search wins
                group.values.get(name, {}).pop(rep, None)
    return _ordered(groups, scenario, meta.get("variant_sweeps") or {})


def irq_time_accounting(meta: Mapping[str, Any]) -> bool:
    """run.json's host.irq_time_accounting (False when unknown: the tick charges
    interrupt work to the interrupted process, the common case without the option)."""
    host: Mapping[str, Any] = meta.get("host") or {}
    return host.get("irq_time_accounting") is True


def variant_order(
    scenario: Mapping[str, Any], sweeps: Mapping[str, Any]
) -> dict[str, tuple[float, tuple[float, ...], int]]:
    """Variant -> its place: the scenario's order, and a swept variant beside its family
    by its swept values (linear[rules=1] … linear[rules=10000], then set[…]); a value
    that is not a number keeps the order the sweep made."""
    rank: dict[str, tuple[float, tuple[float, ...], int]] = {
        str(name): (float(i), (), 0) for i, name in enumerate(scenario.get("variants") or {})
    }
    for i, (name, info) in enumerate(sweeps.items()):
        if not isinstance(info, Mapping):
            continue
        family = rank.get(str(info.get("family")), (math.inf, (), 0))[0]
        values = tuple(
            float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.inf
            for k, v in info.items()
            if k != "family"
        )
        rank[str(name)] = (family, values, i)
    return rank


def in_variant_order(
    rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """Summary rows with each point's variants in the order `collect` gives them now
    (a summary.json written before swept variants were ordered lists them as the first
    round met them); points and metrics keep their order."""
    rank = variant_order(meta.get("scenario") or {}, meta.get("variant_sweeps") or {})
    unranked = (math.inf, (), 0)
    first: dict[tuple[str, str], int] = {}
    for i, r in enumerate(rows):
        first.setdefault((str(r.get("workload")), str(r.get("point_id"))), i)

    def key(item: tuple[int, Mapping[str, Any]]) -> tuple[Any, ...]:
        i, r = item
        variant = str(r.get("variant"))
        return (
            first[(str(r.get("workload")), str(r.get("point_id")))],
            0 if variant == BASELINE else 1,
            rank.get(variant, unranked),
            i,
        )

    return [r for _, r in sorted(enumerate(rows), key=key)]


def _ordered(
    groups: dict[GroupKey, Group], scenario: Mapping[str, Any], sweeps: Mapping[str, Any]
) -> dict[GroupKey, Group]:
    appearance = {key: i for i, key in enumerate(groups)}
    workload_rank: dict[str, float] = {}
    for i, w in enumerate(scenario.get("workloads") or []):
        if isinstance(w, Mapping) and isinstance(w.get("name"), str):
            workload_rank.setdefault(w["name"], i)
    first_seen: dict[str, int] = {}
    for key in groups:
        first_seen.setdefault(key[0], appearance[key])
    variant_rank = variant_order(scenario, sweeps)
    unranked = (math.inf, (), 0)

    def sort_key(
        key: GroupKey,
    ) -> tuple[float, int, float, int, int, tuple[float, tuple[float, ...], int], int]:
        workload, point_id, variant = key
        in_scenario = workload in workload_rank
        return (
            0 if in_scenario else 1,
            # scenario order when the workloads are named, else the runner's order
            int(workload_rank[workload]) if in_scenario else first_seen[workload],
            _point_index(point_id),
            min(appearance[k] for k in groups if k[:2] == key[:2]),
            0 if variant == BASELINE else 1,
            variant_rank.get(variant, unranked),
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
    """(confidence, a value's halfwidth target %, baseline kind) from run.json's scenario."""
    scenario: Mapping[str, Any] = meta.get("scenario") or {}
    repeat: Mapping[str, Any] = scenario.get("repeat") or {}
    testbed: Mapping[str, Any] = scenario.get("testbed") or {}
    confidence = float(repeat.get("confidence", DEFAULT_CONFIDENCE))
    target = float(repeat.get("halfwidth_pct", DEFAULT_HALFWIDTH_PCT))
    baseline = str(testbed.get("baseline", "forward"))
    return confidence, target, baseline


def degradation_target(meta: Mapping[str, Any]) -> float:
    """A degradation's halfwidth target in percentage points."""
    repeat: Mapping[str, Any] = (meta.get("scenario") or {}).get("repeat") or {}
    return float(repeat.get("degradation_pp", DEFAULT_HALFWIDTH_PCT))


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
    target_pp: float | None = None,
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
        ci_low, ci_high = stats.bracketed_interval(
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
        "stop_rounds_s": stop.get("rounds_s"),  # the point's rounds' measuring time
        "errors": len(group.errors),
        # repetitions whose search found no value; they are in no mean or interval
        "censored_n": len(group.censored(metric.name)),
        "search": search,
        "validation": group.validation.summary(),
        "baseline_mean": None,
        "degradation_pct": None,
        "degradation_ci_low": None,
        "degradation_ci_high": None,
        "degradation_n": None,
        # "ratio": the log of the paired ratio, back-transformed; "difference": arithmetic
        "degradation_scale": "ratio" if metric.ratio_scale else "difference",
        "significant": None,
        # the degradation's half width against its target (percentage points)
        "degradation_halfwidth_pp": None,
        "degradation_target_met": None,
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
            ratio=metric.ratio_scale,
        )
        lo, hi = _finite(d.ci_low), _finite(d.ci_high)
        b, v = base.intervals(metric.name), group.intervals(metric.name)
        if search is not None and lo is not None:  # the interval holds both sides' brackets
            bracketed_pairs = all(r in b and r in v for r in paired)
            iv = bracketed.pair_interval(
                [b[r] for r in paired if bracketed_pairs],
                [v[r] for r in paired if bracketed_pairs],
                higher_is_better=metric.higher_is_better,
                ratio=metric.ratio_scale,
                confidence=confidence,
            )
            lo, hi = (None, None) if iv is None else (_finite(iv[0]), _finite(iv[1]))
        row["degradation_pct"] = _finite(d.mean)
        row["degradation_ci_low"], row["degradation_ci_high"] = lo, hi
        row["significant"] = None if lo is None or hi is None else lo > 0 or hi < 0
        row["degradation_target_met"] = False
        if lo is not None and hi is not None and row["degradation_pct"] is not None:
            half = stats.halfwidth_pp(row["degradation_pct"], lo, hi)
            row["degradation_halfwidth_pp"] = half
            row["degradation_target_met"] = half <= (target if target_pp is None else target_pp)
    elif len(paired) == 1:  # one pair: a figure without an interval
        r = paired[0]
        row["degradation_pct"] = _point_degradation(
            base_series[r], series[r], metric.higher_is_better
        )
        row["degradation_target_met"] = False
    return row


def _noting_delays(
    lines: Iterable[RecordLine], into: list[Any], attributed: list[Any]
) -> Iterator[RecordLine]:
    """The lines, as they are, keeping aside the measured results with delay histograms
    and the attribution round's `profile` and `rule_counts` records."""
    for line in lines:
        if line.phase is None:
            if any(d in line.record for d, _ in DIRECTIONS):
                into.append(line)
        elif line.rtype in attribution.ATTRIBUTED:
            attributed.append(line)
        yield line


def build_summary(
    run: RunDir, confidence: float | None = None, *, paper: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The run's statistics as a JSON-ready dict (see docs/data-format.md); its verdicts
    against the paper by `paper`'s [[paper]] rows where given, else the run's own."""
    meta = run.read_run_json()
    scen_conf, target, baseline_kind = scenario_settings(meta)
    target_pp = degradation_target(meta)
    conf = scen_conf if confidence is None else confidence
    stops = _stops(meta)
    # one pass over records.jsonl: the groups, and the delay histograms beside them
    delay_lines: list[RecordLine] = []
    attributed: list[RecordLine] = []
    groups = collect(run, _noting_delays(run.iter_lines(), delay_lines, attributed))
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    limits = {
        key: evidence.limit(g, meta, [m.name for m in metrics_for_kind(g.kind) if m.primary])
        for key, g in groups.items()
        if g.kind
    }
    noise: list[dict[str, Any]] = []
    for (workload, point_id, variant), group in groups.items():
        base = None if variant == BASELINE else groups.get((workload, point_id, BASELINE))
        names = [m.name for m in metrics_for_kind(group.kind)]
        names += [n for n in group.values if n not in names and n in METRICS]
        stop = _stop_for(stops, point_id, variant)
        limit = limits.get((workload, point_id, variant))
        base_limit = limits.get((workload, point_id, BASELINE))
        cannot = (
            comparison(base_limit, limit)
            if limit is not None and base_limit is not None and base is not None
            else None
        )
        for name in names:
            if not (group.series(name) or group.censored(name) or name in group.invalid_metrics):
                continue  # e.g. loss for TCP
            row = _row(group, METRICS[name], base, conf, target, stop, target_pp)
            row["bottleneck"] = limit.describe() if limit is not None else None
            row["comparison"] = cannot
            rows.append(row)
        for err in group.errors:
            errors.append({"workload": workload, "point_id": point_id, "variant": variant, **err})
        seen = evidence.noise(group)
        if seen is not None:
            noise.append({"workload": workload, "point_id": point_id, "variant": variant, **seen})
    bases = {
        (r["workload"], r["point_id"], r["metric"]): r for r in rows if r["variant"] == BASELINE
    }
    for row in (r for r in rows if r["variant"] != BASELINE):
        # a found value against a censored one: a bound, not "not measured"
        base_row = bases.get((row["workload"], row["point_id"], row["metric"]))
        paired = row["degradation_pct"] is not None
        row["degradation_bound"] = None if paired else bracketed.censored_bound(row, base_row)
        row["degradation_shortfall"] = shortfall(row, target_pp)  # the target it missed
    scenario: Mapping[str, Any] = meta.get("scenario") or {}
    cpu = [cpu_row(g, conf, irq_time_accounting(meta)) for g in groups.values() if g.cpu]
    for c in cpu:
        limit = limits.get((str(c["workload"]), str(c["point_id"]), str(c["variant"])))
        c["bottleneck"] = limit.describe() if limit is not None else None
    traced = [
        {
            "workload": g.workload,
            "label": g.label,
            **r,
            # the measured rounds' limit: the traced round's own rates are in no figure
            "bottleneck": limits[key].describe() if key in limits else None,
        }
        for key, g in groups.items()
        if (r := evidence.softirq_row(g)) is not None
    ]
    return {
        "format": FORMAT,
        # records.jsonl lines that could not be read: their rounds are missing (said)
        "dropped_records": list(run.dropped),
        "cpu": cpu,
        "scenario": scenario.get("name"),
        "confidence": conf,
        "halfwidth_target_pct": target,
        "degradation_target_pp": target_pp,
        "baseline": baseline_kind,
        "rows": rows,
        "errors": errors,
        # variants that could not be measured at a point, with why (run.json "failed")
        "failed": [dict(f) for f in meta.get("failed") or [] if isinstance(f, Mapping)],
        "checks": collect_checks(run),
        "guest_cpu": collect_guest_cpu(run, conf),
        "placement": meta.get("placement"),
        "budget_s": ((scenario.get("repeat") or {}).get("budget")),
        "offered": meta.get("offered") or {},
        "noise": noise,
        # the noise calibration's plan and forecast, beside what the run reached
        "precision": planned_precision(meta.get("precision"), rows),
        # the traced round: the kernel's softirq time per unit, and each variant's own cost
        "softirq": evidence.mechanism_cost(traced, cpu),
        "softirq_note": (meta.get("softirq") or {}).get("why"),
        "attribution": attribution.summarise(attributed),  # where the cost goes
        # the latency workloads' delay histograms, repetitions merged (Fig. 4 and 8
        # of document 004): a kept run draws its distributions from these
        "distributions": delays_json(collect_delays(delay_lines)),
        "behaviour": behaviour.behaviour(meta),  # a rule-set review: each flow's decisions
        # the scenario's [[paper]] rows, each with the run's figure and a verdict
        "paper": paper_verdicts(
            paper or scenario, rows, {k: g.values for k, g in groups.items()}, conf
        ),
    }
