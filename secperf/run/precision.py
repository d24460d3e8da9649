"""The precision plan of a run: each calibrated point's noise (measured now or
cached), the test duration and rounds it plans, and what the budget resolves, said
before the first round and kept in run.json `precision` (the answer says it again
beside what the run reached).

A point's planned duration replaces the scenario's only where the workload does not
give `duration` itself (Scenario.pinned_durations); every plan says which it kept
and why (secperf.run.noise.PointPlan.why).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from secperf.plan import expanded_variants
from secperf.results.metrics import metrics_for_kind
from secperf.run import calibrate
from secperf.run.estimate import calibration_seconds, traced_rounds
from secperf.run.noise import (
    PointPlan,
    best_duration,
    eta,
    forecast,
)
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import WorkloadPoint, expand_scenario


@dataclass
class Planned:
    """The run's plan: one PointPlan per calibrated point, and where each model came
    from (point_id -> "measured" or the cache's age in seconds)."""

    plans: list[PointPlan] = field(default_factory=list)
    source: dict[str, str | float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # seconds of the budget the rounds cannot have: the traced and attribution rounds
    set_aside_s: float = 0.0

    def forecast_json(self, scenario: Scenario) -> dict[str, Any] | None:
        if not self.plans:
            return None
        rep = scenario.repeat
        rounds_s = max(0.0, rep.budget - self.set_aside_s)
        out = forecast(self.plans, rounds_s, rep.degradation_pp).to_json()
        out["budget_s"] = rep.budget
        out["set_aside_s"] = self.set_aside_s
        return out

    def line(self, scenario: Scenario) -> str | None:
        """The run's first line about precision: what the budget resolves, and the
        flag that would reach the target."""
        fc = self.forecast_json(scenario)
        if fc is None:
            return None
        text = str(fc["text"])
        if fc["needs_s"] is None:
            text += f" ([repeat] max = {scenario.repeat.max} stops the rounds first)"
        elif "budget gives" in text:
            text += " (--until-target runs on until it is reached, or --budget sets another)"
        return f"precision: {text}"

    def durations_line(self) -> str:
        """ "tcp-stream#0 5 s: mostly fast noise (…); tcp-rr#0 1 s as the scenario pins it" """
        return "; ".join(f"{p.point_id} {p.why}" for p in self.plans)

    def to_json(self, scenario: Scenario) -> dict[str, Any]:
        return {
            "calibrate": scenario.repeat.calibrate,
            "forecast": self.forecast_json(scenario),
            "points": [{**p.to_json(), "source": self.source.get(p.point_id)} for p in self.plans],
            "notes": self.notes,
        }


# One baseline test of a point: its metrics and the seconds it took.
Measure = Callable[[WorkloadPoint, int], tuple[dict[str, float], float]]


def plan_point(
    scenario: Scenario,
    point: WorkloadPoint,
    tests: int,
    measure: Measure,
    planned: Planned,
    *,
    share_s: float | None = None,
    use_cache: bool | None = None,
) -> WorkloadPoint:
    """Calibrate one point (or take its cached noise: `use_cache`, by default as
    `[repeat] calibrate` says) and plan it; the point as its rounds will run it (its
    duration planned unless the scenario pins it)."""
    rep = scenario.repeat
    if rep.calibrate == "off" or tests < 2 or not calibrate.calibrates(scenario, point):
        return point
    metrics = [m.name for m in metrics_for_kind(point.kind) if m.primary]
    if not metrics:
        return point
    key = calibrate.cache_key(scenario, point)
    cache = rep.calibrate == "cached" if use_cache is None else use_cache
    cached = calibrate.load(key) if cache else None
    source: str | float
    if cached is not None:
        model, source = cached.model, cached.age_s
    else:
        got = calibrate.measure_noise(point, metrics, measure)
        if got is None:
            planned.notes.append(f"{point.point_id}: the calibration gave no values to pair")
            return point
        metric, model = got
        calibrate.save(key, metric, model)
        source = "measured"
    least, most = point.min_rounds(rep.min), point.max_rounds(rep.max)
    pin = calibrate.pinned(scenario, point)
    duration = (
        point.spec.duration
        if pin
        else best_duration(
            model,
            tests=tests,
            target_pp=rep.degradation_pp,
            confidence=rep.confidence,
            least=least,
            most=most,
            budget_s=rep.budget if share_s is None else share_s,
            current=point.spec.duration,
        )
    )
    plan = PointPlan(
        point.point_id,
        model,
        duration,
        tests,
        rep.degradation_pp,
        rep.confidence,
        least,
        most,
        pinned=pin,
        scenario_duration=point.spec.duration,
    )
    planned.plans.append(plan)
    planned.source[point.point_id] = source
    # its traced rounds (profiled ones take longer: counted as plain rounds, at least)
    planned.set_aside_s += traced_rounds(scenario, point) * plan.round_s
    return point if duration == point.spec.duration else calibrate.with_duration(point, duration)


def cached_forecast(scenario: Scenario, points: list[tuple[WorkloadPoint, int]]) -> str | None:
    """What `secperf check` can say before any testbed: the forecast from this
    machine's cached calibrations of the scenario's points (None: none cached)."""
    if scenario.repeat.calibrate == "off":
        return None
    planned = Planned()
    missing = 0

    def nothing(_point: WorkloadPoint, _rep: int) -> tuple[dict[str, float], float]:
        raise LookupError

    for point, tests in points:
        if tests < 2 or not calibrate.calibrates(scenario, point):
            continue
        if calibrate.load(calibrate.cache_key(scenario, point)) is None:
            missing += 1
            continue
        share = scenario.repeat.budget / len(points)
        plan_point(scenario, point, tests, nothing, planned, share_s=share, use_cache=True)
    if not planned.plans:
        return None
    line = planned.line(scenario)
    if missing:
        line = f"{line} ({missing} point(s) not calibrated yet on this machine)"
    return line


def precision_said(scenario: Scenario) -> str | None:
    """What `secperf check` says of the precision: the cached calibrations' forecast,
    or how to get one (None: nothing to calibrate)."""
    points = expand_scenario(scenario)
    names = [name for name, _m, _s in expanded_variants(scenario)]
    pairs = [(p, 1 + sum(p.measures(n) for n in names)) for p in points]
    mine = [(p, t) for p, t in pairs if t >= 2 and calibrate.calibrates(scenario, p)]
    if not mine:
        return None
    if scenario.repeat.calibrate == "off":
        return (
            'precision: not planned ([repeat] calibrate = "off"); --calibrate cached '
            "measures this machine's noise first and says what the budget resolves"
        )
    line = cached_forecast(scenario, mine)
    if line is not None:
        return line
    took = sum(calibration_seconds(p) for p, _t in mine)
    return (
        f"precision: this machine's noise is not calibrated yet for this testbed: the run "
        f"measures it first ({eta(took)}) and says then what the budget resolves"
    )
