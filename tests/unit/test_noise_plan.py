"""The precision planner (secperf.run.noise): a noise fitted from simulated tests of
known spread and correlation, the duration it plans, what a budget resolves, and
where the rounds go."""

from __future__ import annotations

import math

import numpy as np
import pytest

from secperf.run.budget import priority
from secperf.run.noise import (
    CALIBRATION_DURATIONS,
    CALIBRATION_TESTS,
    NoiseModel,
    PointPlan,
    Spread,
    allocate,
    best_duration,
    fit,
    forecast,
)

OVERHEAD_S = 0.6  # warm-up and set-up of one test


def simulate(
    rng: np.random.Generator, durations: tuple[float, ...], tests: int, *, fast: float, drift: float
) -> list[Spread]:
    """Tests of a rate of 1000 one after the other: `fast` is the spread of a 1 s
    test's white noise (it averages as 1 / sqrt(d)), `drift` that of a slow AR(1)
    process (correlation 0.8 from one test to the next) that a test does not average."""
    level = 0.0
    out = []
    for d in durations:
        values = []
        for _ in range(tests):
            level = 0.8 * level + math.sqrt(1 - 0.8**2) * rng.normal(0.0, drift)
            white = rng.normal(0.0, fast / math.sqrt(d))
            values.append(1000.0 * math.exp(level + white))
        out.append(Spread(d, tuple(values)))
    return out


def test_spread_measures_spread_and_correlation() -> None:
    rng = np.random.default_rng(1)
    (white,) = simulate(rng, (1.0,), 400, fast=0.05, drift=0.0)
    assert white.cv == pytest.approx(0.05, rel=0.15)
    assert abs(white.rho) < 0.15
    assert white.paired_var == pytest.approx(2 * 0.05**2, rel=0.2)
    (slow,) = simulate(rng, (1.0,), 400, fast=0.0, drift=0.05)
    assert slow.rho == pytest.approx(0.8, abs=0.1)
    # pairing neighbours cancels most of a drift: 2 σ² (1 - ρ)
    assert slow.paired_var == pytest.approx(2 * 0.05**2 * 0.2, rel=0.35)


def test_fit_separates_fast_noise_from_drift() -> None:
    rng = np.random.default_rng(2)
    fast = fit(simulate(rng, (0.5, 2.0), 200, fast=0.05, drift=0.0), OVERHEAD_S)
    assert fast.fast == pytest.approx(2 * 0.05**2, rel=0.3)
    assert fast.floor < 0.2 * fast.fast
    slow = fit(simulate(rng, (0.5, 2.0), 200, fast=0.0, drift=0.05), OVERHEAD_S)
    assert slow.fast < 0.2 * slow.floor * 2.0
    assert slow.floor == pytest.approx(2 * 0.05**2 * 0.2, rel=0.4)


def test_plan_picks_longer_tests_for_fast_noise_and_short_ones_for_drift() -> None:
    """From calibrations of the size a run measures (CALIBRATION_TESTS at each
    duration), from the scenario's 1 s: fast noise gets tests of 3 s or more, drift
    keeps short ones, in most of 60 simulated machines (a few tests estimate a
    variance roughly: the F test keeps a floor that is not there from shortening)."""
    kw = {"tests": 3, "target_pp": 2.0, "confidence": 0.95, "least": 3, "current": 1.0}
    longer = shorter = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        fast = simulate(rng, CALIBRATION_DURATIONS, CALIBRATION_TESTS, fast=0.15, drift=0.0)
        slow = simulate(rng, CALIBRATION_DURATIONS, CALIBRATION_TESTS, fast=0.002, drift=0.08)
        longer += best_duration(fit(fast, OVERHEAD_S), **kw) >= 3.0
        shorter += best_duration(fit(slow, OVERHEAD_S), **kw) <= 1.0
    assert longer >= 0.75 * 60
    assert shorter >= 0.95 * 60


def test_a_close_call_keeps_the_scenario_duration() -> None:
    """Where another duration saves less than KEEP_MARGIN the written one stays."""
    model = NoiseModel(fast=2 * 0.03**2, floor=2 * 0.004**2, overhead_s=OVERHEAD_S)
    kw = {"tests": 3, "target_pp": 2.0, "confidence": 0.95, "least": 3}
    free = best_duration(model, **kw)
    assert best_duration(model, **kw, current=free) == free
    near = [d for d in (1.0, 2.0, 3.0, 5.0) if d != free]
    kept = [d for d in near if best_duration(model, **kw, current=d) == d]
    assert kept, "no duration near the best is within the margin"


def test_plan_duration_minimises_time_to_target() -> None:
    white = NoiseModel(fast=2 * 0.2**2, floor=0.0, overhead_s=OVERHEAD_S)
    drift = NoiseModel(fast=0.0, floor=2 * 0.02**2, overhead_s=OVERHEAD_S)
    kw = {"tests": 3, "target_pp": 2.0, "confidence": 0.95, "least": 3}
    assert best_duration(white, **kw) == 10.0  # the longest: overhead is all it costs
    assert best_duration(drift, **kw) == 0.5  # the shortest: length buys nothing


def _plan(pid: str, model: NoiseModel, duration: float = 1.0, tests: int = 3) -> PointPlan:
    return PointPlan(pid, model, duration, tests, 2.0, 0.95, 3, 1000)


def test_halfwidth_shrinks_as_root_n() -> None:
    p = _plan("a", NoiseModel(0.0, 2 * 0.03**2, OVERHEAD_S))
    h10, h40 = p.halfwidth_pp(10), p.halfwidth_pp(40)
    assert h40 == pytest.approx(h10 / 2, rel=0.15)  # and the t quantile's own shrinking
    need = p.rounds_to_target()
    assert need is not None and p.halfwidth_pp(need) <= 2.0 < p.halfwidth_pp(need - 1)


def test_forecast_says_what_the_budget_resolves() -> None:
    p = _plan("a", NoiseModel(0.0, 2 * 0.04**2, OVERHEAD_S))
    need = p.rounds_to_target()
    assert need is not None
    short = forecast([p], budget_s=need * p.round_s / 4, target_pp=2.0)
    # "needs" at the best duration for the target (drift: the shortest), not the plan's
    fastest = p.seconds_to_target()
    assert fastest is not None and fastest < need * p.round_s
    assert short.needs_s == pytest.approx(fastest)
    assert not short.within_budget
    # a quarter of the rounds: about twice the half width
    assert 3.2 < short.budget_pp < 5.5
    assert short.text().startswith("±2 points needs about ")
    assert "budget gives about ±" in short.text()
    enough = forecast([p], budget_s=need * p.round_s * 2, target_pp=2.0)
    assert enough.within_budget and enough.budget_pp <= 2.0
    assert "within the" in enough.text()


def test_allocation_gives_rounds_to_the_widest_relative_row() -> None:
    quiet = _plan("quiet", NoiseModel(0.0, 2 * 0.01**2, OVERHEAD_S))
    noisy = _plan("noisy", NoiseModel(0.0, 2 * 0.05**2, OVERHEAD_S))
    rounds = allocate([quiet, noisy], budget_s=60 * quiet.round_s)
    assert rounds["quiet"] == quiet.rounds_to_target()  # stops once within target
    assert rounds["noisy"] > rounds["quiet"]


def test_priority_is_relative_distance_per_second() -> None:
    assert priority(1.9, 2.0, 5.0) is None  # within target: nothing to buy
    a = priority(4.0, 2.0, 10.0)  # 1 target away, 10 s a round
    b = priority(3.0, 2.0, 2.0)  # half a target away, 2 s a round
    assert a is not None and b is not None and b > a
    inf = priority(math.inf, 2.0, 10.0)
    assert inf is not None and inf > b


def test_model_round_trips_through_json() -> None:
    rng = np.random.default_rng(6)
    m = fit(simulate(rng, CALIBRATION_DURATIONS, 4, fast=0.05, drift=0.01), OVERHEAD_S)
    back = NoiseModel.from_json(m.to_json())
    assert back.fast == m.fast and back.floor == m.floor and back.spreads == m.spreads


def test_a_small_budget_keeps_tests_its_minimum_rounds_fit() -> None:
    """Fast noise wants long tests, but not ones whose minimum rounds alone overrun
    the point's share of the budget (a 20 s budget once got 10 s tests: 62 s)."""
    white = NoiseModel(fast=2 * 0.2**2, floor=0.0, overhead_s=OVERHEAD_S)
    kw = {"tests": 2, "target_pp": 2.0, "confidence": 0.95, "least": 3, "most": 6}
    small = best_duration(white, **kw, budget_s=20.0)
    assert 3 * 2 * (small + OVERHEAD_S) <= 20.0
    assert best_duration(white, **kw) == 10.0
