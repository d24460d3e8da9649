"""Precision by budget: how a run's measuring time is shared between its points.

`[repeat] budget` is the run's measuring time (tests and their set-up: rule loads,
conntrack flushes, rounds measured again, the traced round; not the testbed's build).
A point always runs its `min` rounds (its workload's `min_rounds` when set, the cap
rising to it). Beyond them, rounds go on while the point's asked intervals are not
met, it has rounds left under `max`, and the time allows:

- pass 1 visits the points in order for their minimum rounds (an equal share of
  what is left bounding them beyond that), then their traced rounds;
- pass 2 gives one round at a time to the point whose widest interval is furthest
  from its target per second of its round (`priority`), while that round fits
  what is left; a point's rounds are numbered on, and each round pairs its own
  baseline and variants, so a later round pairs as well as an earlier one; a
  variant within its targets sits out its point's later rounds
  (secperf.run.allocate);
- a round is started only if it fits what is left, judged by the longest round
  its point has taken so far (a round that cannot fit would overrun).

The minimum rounds are not in the budget's way: they run even when they alone
exceed it (their time is spent from the budget all the same), and `secperf check`
says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Budget:
    """The run's measuring time, as it is spent."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def used(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        return max(0.0, self.seconds - self.used())

    def share(self, points: int) -> float:
        """An equal share of what is left between `points` points (seconds)."""
        return self.left() / max(1, points)


@dataclass
class Visit:
    """One visit of a point: until a deadline on the budget's clock."""

    deadline: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def of(cls, budget: Budget, points: int) -> Visit:
        return cls(budget.clock() + budget.share(points), budget.clock)

    def fits(self, round_s: float) -> bool:
        """Does a round of `round_s` seconds end before the deadline?"""
        return self.clock() + round_s <= self.deadline


def next_round(
    *,
    rounds: int,
    min_rounds: int,
    max_rounds: int,
    met: bool,
    longest_round_s: float,
    visit: Visit,
) -> str | None:
    """Whether a point runs another round now: None to run it, else why not
    ("ci_met", "max_reached", "budget": its share of the budget is spent)."""
    if rounds < min_rounds:
        return None  # the minimum always runs
    if met:
        return "ci_met"
    if rounds >= max_rounds:
        return "max_reached"
    if not visit.fits(longest_round_s):
        return "budget"
    return None


def estimate_rounds(
    budget_s: float, bounds: list[tuple[int, int]], round_s: list[float]
) -> list[int]:
    """Rounds each point could run as pass 1 shares the budget (at least its minimum,
    at most its maximum): `bounds` are each point's (min, max) rounds, `round_s` one
    round of each point (planned seconds). Each point in order gets an equal share of
    what is left, so a point's minimum past its share leaves less to the ones after it.
    For `secperf check` and the estimate before a run."""
    rounds: list[int] = []
    left = budget_s
    for index, ((low, high), r) in enumerate(zip(bounds, round_s, strict=True)):
        share = max(0.0, left) / (len(round_s) - index)
        n = max(low, min(high, int(share // r) if r > 0 else high))
        rounds.append(n)
        left -= n * r
    return rounds


def priority(halfwidth: float, target: float, round_s: float) -> float | None:
    """How much the next round of a point buys: how far its widest interval is from
    its target (relative: (h - target) / target) per second of a round. None: within
    its target (or no target), nothing to buy. A point with no interval yet (h
    infinite) comes first, the shorter round first among such."""
    if target <= 0 or halfwidth <= target:
        return None
    if not math.isfinite(halfwidth):
        return 1e12 / max(round_s, 1e-3)
    return (halfwidth - target) / target / max(round_s, 1e-3)
