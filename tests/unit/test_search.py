"""The one rate search every search kind uses, and its bracket."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from secperf.workloads.parts.search import (
    SearchNotRun,
    Trial,
    bisect_rate,
    narrow_enough,
    next_rate,
    passes,
)


def limit_at(limit: float, achieved: float = 1.0) -> Callable[[float], Trial]:
    """A trial that passes up to `limit` and achieves `achieved` × what it asked."""

    def trial(rate: float) -> Trial:
        return Trial(rate <= limit, rate * achieved, {})

    return trial


def test_bisection_brackets_the_limit_with_its_resolution() -> None:
    r = bisect_rate(limit_at(3333), low=100, high=10000, resolution_pct=2, max_steps=30)
    assert r.outcome == "found"
    assert r.interval is not None
    lo, hi = r.interval
    assert lo <= 3333 < hi
    assert hi / lo - 1 <= 0.02
    assert r.value == lo and r.bound is None
    assert r.resolution_pct == pytest.approx((hi / lo - 1) * 100)
    assert [s.asked for s in r.steps][:3] == [10000, 100, 1000]  # geometric middle
    d = r.as_dict()
    assert d["outcome"] == "found" and d["interval"] == [lo, hi] and d["range"] == [100, 10000]
    assert d["passed_at"] == {"asked": lo, "achieved": lo}
    assert all({"asked", "achieved", "passed"} <= set(s) for s in d["steps"])


def test_high_passing_and_low_failing_are_censored_not_numbers() -> None:
    up = bisect_rate(limit_at(1e9), low=1, high=10)
    assert (up.outcome, up.value, up.bound, len(up.steps)) == ("at_least", None, 10, 1)
    assert up.as_dict()["failed_at"] is None
    down = bisect_rate(limit_at(0.5), low=1, high=10)
    assert (down.outcome, down.value, down.bound, len(down.steps)) == ("below", None, 1, 2)
    assert down.as_dict()["passed_at"] is None


def test_an_achieved_measure_places_the_bound_at_what_was_achieved() -> None:
    # a flood that reaches 3/4 of its ask and never denies: the bound is what it reached
    up = bisect_rate(
        limit_at(1e9, achieved=0.75),
        low=1000,
        high=200_000,
        measure="achieved",
        reports="failed",
        integer=True,
    )
    assert up.outcome == "at_least" and up.bound == 150_000
    assert up.as_dict()["passed_at"] == {"asked": 200_000, "achieved": 150_000}
    # found: the value is the failing end (the lowest rate that denies), as achieved
    r = bisect_rate(
        limit_at(40_000, achieved=0.5),
        low=1000,
        high=200_000,
        resolution_pct=25,
        max_steps=20,
        measure="achieved",
        reports="failed",
        integer=True,
    )
    assert r.outcome == "found" and r.failed_at is not None and r.interval is not None
    assert r.value == r.failed_at.asked * 0.5 == r.interval[1]
    assert r.failed_at.asked > 40_000 >= r.passed_at.asked  # type: ignore[union-attr]
    assert all(float(s.asked).is_integer() for s in r.steps)


def test_step_cap_and_failure_threshold() -> None:
    r = bisect_rate(limit_at(5000), low=1, high=10000, resolution_pct=0.001, max_steps=5)
    assert len(r.steps) == 5
    assert passes(1, 1000) and not passes(2, 1000) and not passes(0, 0)
    with pytest.raises(ValueError):
        bisect_rate(limit_at(1), low=5, high=5)


def test_bisection_arithmetic() -> None:
    assert next_rate(1000, 100_000, integer=True) == 10_000  # geometric middle
    assert 1000 < next_rate(1000, 1002, integer=True) < 1002
    assert narrow_enough(1000, 1001, 0.01, integer=True)
    assert narrow_enough(10_000, 12_000, 25.0)
    assert not narrow_enough(10_000, 20_000, 25.0)


def test_a_trial_the_tool_could_not_run_bounds_the_search_but_is_no_failure() -> None:
    # the path holds everything; the tool cannot run more than 18,000
    def trial(n: float) -> Trial:
        if n > 18_000:
            return Trial(False, None, {"error": "descriptors"}, measured=False)
        return Trial(True, n)

    b = bisect_rate(trial, low=10_000, high=100_000, resolution_pct=10, max_steps=8)
    assert b.outcome == "at_least" and b.value is None
    assert b.bound is not None and 15_000 < b.bound <= 18_000
    assert b.ceiling is not None and b.ceiling.asked > 18_000
    assert b.as_dict()["ceiling"]["error"] == "descriptors"

    # a real failure below the tool's limit still ends the bracket: found
    def limited(n: float) -> Trial:
        if n > 18_000:
            return Trial(False, None, {"error": "descriptors"}, measured=False)
        return Trial(n <= 14_000, n)

    found = bisect_rate(limited, low=10_000, high=100_000, resolution_pct=10, max_steps=10)
    assert found.outcome == "found" and found.value is not None and found.value <= 14_000
    # nothing the tool can run: no answer at all
    with pytest.raises(SearchNotRun, match="could not be run"):
        bisect_rate(lambda n: Trial(False, None, {}, measured=False), low=1, high=10)
