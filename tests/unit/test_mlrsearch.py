"""MLRsearch (RFC 9971) against simulated devices: a deterministic one and a noisy
one, and the search keys that choose it or the bisection."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable

import pytest

from secperf.workloads.parts.mlrsearch import (
    Goal,
    Measured,
    Target,
    classify,
    conditional_throughput,
    mlrsearch,
    targets,
)
from secperf.workloads.parts.search import SearchNotRun, Trial, bisect_rate
from secperf.workloads.parts.search_method import SearchKeys, find

CAPACITY = 50_000.0
Measurer = Callable[[float, float], Trial]


def goal(**kw: float) -> Goal:
    base: dict[str, float] = {
        "loss_ratio": 0.0,
        "exceed_ratio": 0.5,
        "final_duration": 2.0,
        "duration_sum": 6.0,
        "width": 0.02,
        "initial_duration": 0.5,
    }
    return Goal(**(base | kw))  # type: ignore[arg-type]


def forwarder(capacity: float = CAPACITY) -> Measurer:
    """A device that forwards up to `capacity` and loses the rest, every trial alike."""

    def measure(load: float, _duration: float) -> Trial:
        loss = max(0.0, 1.0 - capacity / load)
        return Trial(loss == 0.0, load * (1 - loss), {}, loss=loss)

    return measure


class Noisy:
    """A device of `CAPACITY` on a shared machine: its capacity jitters by 1 % from
    trial to trial, and a neighbour's burst costs a trial some loss at any load with
    a chance that grows with the trial's length (0.08 a second). The measurer also
    keeps the trial seconds, the search's clock."""

    def __init__(self, seed: int, bursts_per_s: float = 0.08) -> None:
        self.rng = random.Random(seed)
        self.bursts = bursts_per_s
        self.seconds = 0.0

    def __call__(self, load: float, duration: float) -> Trial:
        self.seconds += duration
        loss = max(0.0, 1.0 - CAPACITY * (1 + self.rng.gauss(0, 0.01)) / load)
        if self.rng.random() < 1 - math.exp(-self.bursts * duration):
            loss = max(loss, 0.001)
        return Trial(loss == 0.0, load * (1 - loss), {}, loss=loss)


def trials(*spec: tuple[float, float]) -> list[Measured]:
    """(duration, loss ratio) pairs at one load."""
    return [Measured(1000.0, d, Trial(loss == 0, None, {}, loss=loss)) for d, loss in spec]


def test_load_classification_follows_the_rfc() -> None:
    t = Target(loss_ratio=0.0, exceed_ratio=0.5, duration=2.0, duration_sum=6.0, width=0.02)
    # one good full-length trial of three needed: undecided either way
    assert classify(trials((2, 0)), t) == "undecided"
    # two of three good: even a bad third leaves the bad share at 1/3 ≤ 0.5
    assert classify(trials((2, 0), (2, 0)), t) == "lower"
    assert classify(trials((2, 0.1), (2, 0.1)), t) == "upper"
    # one bad of three: the median decides, still open
    assert classify(trials((2, 0), (2, 0.1)), t) == "undecided"
    # exceed ratio 0: one bad trial is an upper bound at once
    strict = Target(0.0, 0.0, 2.0, 6.0, 0.02)
    assert classify(trials((2, 0), (2, 0), (2, 0.001)), strict) == "upper"
    # short bad trials count only beyond what short good ones balance
    assert classify(trials((1, 0.1), (1, 0), (2, 0), (2, 0)), t) == "lower"
    assert classify(trials((1, 0.1), (1, 0.1), (1, 0.1), (1, 0.1)), t) == "upper"
    # a loss within the goal loss ratio is low-loss
    pdr = Target(0.005, 0.5, 2.0, 6.0, 0.02)
    assert classify(trials((2, 0.004), (2, 0.004)), pdr) == "lower"


def test_conditional_throughput_is_the_exceed_ratio_quantile() -> None:
    t = Target(0.01, 0.5, 2.0, 6.0, 0.02)
    at = trials((2, 0.0), (2, 0.004), (2, 0.02))
    assert conditional_throughput(1000.0, at, t) == pytest.approx(1000 * (1 - 0.004))
    # short trials are no part of it; missing seconds count as full loss
    assert conditional_throughput(1000.0, trials((1, 0.0), (2, 0.0)), t) == 0.0


def test_targets_grow_the_trial_duration_and_narrow_the_width() -> None:
    ts = targets(goal(initial_duration=0.25, final_duration=2.0))
    assert [t.duration for t in ts] == pytest.approx([0.25, 0.5, 1.0, 2.0])
    assert [t.width for t in ts] == pytest.approx([0.16, 0.08, 0.04, 0.02])
    assert [t.duration_sum for t in ts] == pytest.approx([0.25, 0.5, 1.0, 6.0])


def test_finds_the_rate_of_a_deterministic_device_within_its_width() -> None:
    g = goal()
    r = mlrsearch(forwarder(), [g], low=1000, high=200_000)
    p = r.primary
    assert (p.outcome, r.stopped) == ("found", "goals reached")
    assert p.lower is not None and p.upper is not None and p.width is not None
    assert p.lower <= CAPACITY < p.upper
    assert p.width <= g.width
    assert p.value == p.lower and p.conditional_throughput == pytest.approx(p.lower)
    d = r.as_dict()
    assert d["method"] == "mlrsearch" and d["interval"] == [p.lower, p.upper]
    assert d["goals"][0]["goal"]["exceed_ratio"] == 0.5 and d["goals"][0]["width_met"] is True
    assert {"load", "duration", "loss_ratio"} <= set(d["trials"][0])
    # integer loads stay integers
    n = mlrsearch(forwarder(3333), [goal(width=0.05)], low=100, high=10_000, integer=True)
    assert all(float(m.load).is_integer() for m in n.trials)
    assert n.primary.lower is not None and n.primary.lower <= 3333 < n.primary.upper  # type: ignore[operator]


def test_trial_durations_grow_from_the_initial_to_the_final_one() -> None:
    g = goal(initial_duration=0.25, final_duration=2.0)
    r = mlrsearch(forwarder(), [g], low=1000, high=200_000)
    durations = [m.duration for m in r.trials]
    assert durations[0] == pytest.approx(0.25)
    assert durations == sorted(durations)  # never shorter again
    assert durations[-1] == pytest.approx(2.0)
    # most trials are short ones: the full-length ones are spent near the answer
    full = [m for m in r.trials if m.duration == pytest.approx(2.0)]
    assert len(full) < len(r.trials) / 2
    assert all(0.9 * CAPACITY <= m.load <= 1.1 * CAPACITY for m in full)


def test_the_goal_exceed_ratio_decides_a_load_that_sometimes_fails() -> None:
    # below 40k the device never loses; from 40k to 50k every third trial loses a
    # little (a timer that fires now and then); above 50k every trial loses
    def flaky() -> Measurer:
        count = {"n": 0}

        def measure(load: float, _duration: float) -> Trial:
            if load <= 40_000:
                return Trial(True, load, {}, loss=0.0)
            if load <= CAPACITY:
                count["n"] += 1
                loss = 0.001 if count["n"] % 3 == 0 else 0.0
                return Trial(loss == 0, load, {}, loss=loss)
            return Trial(False, load, {}, loss=0.2)

        return measure

    tolerant = mlrsearch(flaky(), [goal()], low=1000, high=200_000)
    strict = mlrsearch(flaky(), [goal(exceed_ratio=0.0)], low=1000, high=200_000)
    lo, hi = tolerant.primary.lower, strict.primary.lower
    assert lo is not None and hi is not None
    assert 40_000 < lo <= CAPACITY  # a load failing a third of its seconds passes at 0.5
    assert hi <= 40_000  # and fails at 0: one bad trial is enough
    # at the relevant lower bound, the bad full-length seconds are within the ratio
    at = [m for m in tolerant.trials if m.load == lo and m.duration >= 2.0]
    bad = sum(m.duration for m in at if m.trial.loss_ratio > 0)
    assert bad <= 0.5 * max(6.0, sum(m.duration for m in at))


def test_more_repeatable_than_the_bisection_on_a_noisy_device() -> None:
    """20 seeds: MLRsearch's found rate spreads less than the bisection's, with the
    bisection given the same trial seconds (its steps until MLRsearch's time)."""
    found_mlr: list[float] = []
    found_bisect: list[float] = []
    for seed in range(20):
        dut = Noisy(seed)
        r = mlrsearch(dut, [goal()], low=1000, high=200_000, integer=True)
        assert r.primary.outcome == "found" and r.primary.value is not None
        found_mlr.append(r.primary.value)
        budget = dut.seconds
        again = Noisy(seed + 1000)
        steps = max(int(budget / 2.0), 2)
        b = bisect_rate(
            lambda x, m=again: m(x, 2.0),  # type: ignore[misc]
            low=1000,
            high=200_000,
            resolution_pct=2,
            max_steps=steps,
            integer=True,
        )
        # a search that lost its lowest trial to a burst answers nothing: count it
        # as the range's bottom, the worst a repeat can be off
        found_bisect.append(b.value if b.value is not None else 1000.0)
    spread_mlr = statistics.stdev(found_mlr)
    spread_bisect = statistics.stdev(found_bisect)
    assert spread_mlr * 3 < spread_bisect
    assert min(found_mlr) > 0.9 * CAPACITY and max(found_mlr) <= 1.02 * CAPACITY


def test_open_bounds_are_bounds_never_values() -> None:
    up = mlrsearch(forwarder(1e9), [goal()], low=1000, high=200_000)
    assert (up.primary.outcome, up.primary.value, up.primary.bound) == ("at_least", None, 200_000)
    down = mlrsearch(forwarder(10), [goal()], low=1000, high=200_000)
    assert (down.primary.outcome, down.primary.value, down.primary.bound) == ("below", None, 1000)
    assert down.as_dict()["relevant_lower_bound"] is None


def test_a_load_the_tool_cannot_run_bounds_the_search_but_is_no_failure() -> None:
    def limited(load: float, _duration: float) -> Trial:
        if load > 18_000:
            return Trial(False, None, {"error": "descriptors"}, measured=False)
        return Trial(True, load, {}, loss=0.0)

    r = mlrsearch(limited, [goal(width=0.1)], low=10_000, high=100_000, integer=True)
    p = r.primary
    assert p.outcome == "at_least" and p.bound is not None and 15_000 < p.bound <= 18_000
    assert p.ceiling is not None and p.ceiling.load > 18_000
    assert r.as_dict()["ceiling"]["error"] == "descriptors"
    with pytest.raises(SearchNotRun, match="could not be run"):
        mlrsearch(lambda _l, _d: Trial(False, None, {}, measured=False), [goal()], low=1, high=10)


def test_ndr_and_pdr_in_one_search() -> None:
    # loss grows slowly past 50k: 0.5 % loss is reached near 50,251
    r = mlrsearch(forwarder(), [goal(), goal(loss_ratio=0.005)], low=1000, high=200_000)
    ndr, pdr = r.goals
    assert ndr.lower is not None and pdr.lower is not None
    assert ndr.lower <= CAPACITY < pdr.upper  # type: ignore[operator]
    assert CAPACITY <= pdr.lower <= CAPACITY / (1 - 0.005)
    assert pdr.conditional_throughput == pytest.approx(CAPACITY, rel=0.001)


def test_limits_stop_the_search_and_say_so() -> None:
    r = mlrsearch(forwarder(), [goal()], low=1000, high=200_000, max_trials=5)
    assert r.stopped == "trial limit" and len(r.trials) == 5
    clock = {"t": 0.0}

    def timed(load: float, duration: float) -> Trial:
        clock["t"] += duration
        return forwarder()(load, duration)

    t = mlrsearch(
        timed, [goal()], low=1000, high=200_000, max_seconds=4.0, clock=lambda: clock["t"]
    )
    assert t.stopped == "time limit" and t.seconds >= 4.0
    assert t.as_dict()["width_met"] in (None, False)


def test_the_search_key_chooses_the_method() -> None:
    def run(keys: SearchKeys) -> dict[str, object]:
        return find(
            keys,
            forwarder(),
            low=1000,
            high=200_000,
            duration=2.0,
            resolution_pct=2.0,
            max_steps=12,
            loss_ratio=0.0,
        ).as_dict()

    bisect = run(SearchKeys(search="bisect"))
    mlr = run(SearchKeys())
    assert bisect["method"] == "bisect" and "goals" not in bisect
    assert mlr["method"] == "mlrsearch" and mlr["outcome"] == "found"
    (g,) = mlr["goals"]  # type: ignore[misc]
    assert g["goal"]["final_trial_duration"] == 2.0
    assert g["goal"]["duration_sum"] == 6.0 and g["goal"]["initial_trial_duration"] == 0.5
    # resolution hi/lo − 1 = 2 % is the goal width (hi − lo) / hi = 2/102
    assert g["goal"]["width"] == pytest.approx(0.02 / 1.02)
