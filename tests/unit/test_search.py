from __future__ import annotations

from typing import Any

import pytest

from secperf.search import bisect_rate, passes


def limit_at(limit: float) -> Any:
    def trial(rate: float) -> tuple[bool, dict[str, Any]]:
        return rate <= limit, {}

    return trial


def test_bisection_brackets_the_limit() -> None:
    r = bisect_rate(limit_at(3333), low=100, high=10000, resolution_pct=2, max_steps=30)
    assert r.low is not None and r.high is not None
    assert r.low <= 3333 < r.high
    assert (r.high - r.low) <= r.high * 0.02
    assert r.best == r.low
    assert [s.rate for s in r.steps][:2] == [10000, 100]


def test_high_passing_and_low_failing_are_open_brackets() -> None:
    up = bisect_rate(limit_at(1e9), low=1, high=10)
    assert (up.best, up.low, up.high, len(up.steps)) == (10, 10, None, 1)
    down = bisect_rate(limit_at(0.5), low=1, high=10)
    assert (down.best, down.low, down.high) == (None, None, 1)


def test_step_cap_and_failure_threshold() -> None:
    r = bisect_rate(limit_at(5000), low=1, high=10000, resolution_pct=0.001, max_steps=5)
    assert len(r.steps) == 5
    assert passes(1, 1000) and not passes(2, 1000) and not passes(0, 0)
    with pytest.raises(ValueError):
        bisect_rate(limit_at(1), low=5, high=5)
