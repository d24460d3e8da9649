"""Find the highest rate a trial passes at, by bisection, ending with a bracket.

RFC 3511 §5.3/§5.4 ask for the highest rate with (almost) no failures. The
trial is a callable (rate -> passed?, detail) so the same search serves any
kind; it never assumes the trial is monotonic beyond what bisection needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# RFC 3511's tolerance for a "successful" rate: 0.1 % failures.
DEFAULT_MAX_FAILURE_RATIO = 0.001


@dataclass(frozen=True)
class Step:
    rate: float
    passed: bool
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchResult:
    best: float | None  # highest rate that passed (None: even `low` failed)
    low: float | None  # the bracket: passed at low …
    high: float | None  # … failed at high (None: `high` itself passed, the limit is above)
    steps: list[Step]

    def as_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "bracket": [self.low, self.high],
            "steps": [{"rate": s.rate, "passed": s.passed, **s.detail} for s in self.steps],
        }


def passes(failures: int, attempts: int, max_ratio: float = DEFAULT_MAX_FAILURE_RATIO) -> bool:
    """True when failures are at most `max_ratio` of attempts (and something was attempted)."""
    return attempts > 0 and failures <= max_ratio * attempts


def bisect_rate(
    trial: Callable[[float], tuple[bool, dict[str, Any]]],
    *,
    low: float,
    high: float,
    resolution_pct: float = 5.0,
    max_steps: int = 10,
) -> SearchResult:
    """Try `high`, then `low`, then bisect until hi/lo is within resolution_pct or
    max_steps trials ran. The answer is a bracket: passed at `low`, failed at `high`."""
    if not 0 < low < high:
        raise ValueError(f"need 0 < low < high, got low={low} high={high}")
    steps: list[Step] = []

    def run(rate: float) -> bool:
        ok, detail = trial(rate)
        steps.append(Step(rate, ok, detail))
        return ok

    if run(high):
        return SearchResult(best=high, low=high, high=None, steps=steps)
    if not run(low):
        return SearchResult(best=None, low=None, high=low, steps=steps)
    lo, hi = low, high
    while len(steps) < max_steps and (hi - lo) > hi * resolution_pct / 100.0:
        mid = round((lo + hi) / 2.0, 3)
        if run(mid):
            lo = mid
        else:
            hi = mid
    return SearchResult(best=lo, low=lo, high=hi, steps=steps)
