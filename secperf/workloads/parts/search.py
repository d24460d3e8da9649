"""Rate searches: one bisection and one answer, a bracket, for every search kind.

Every search secperf runs (RFC 3511 §5.3 `conn_rate`, §5.4 `teardown_rate`,
document 002's `min_flood_rate`, and any later one) looks for a threshold: a trial
at a rate passes below it (the connections complete, the stream survives the
flood) and fails above it. The search tries `high`, then `low`, then bisects
geometrically (rates span decades, and the resolution is relative) between the
highest rate that passed and the lowest that failed, until hi/lo − 1 is within
`resolution_pct` or `max_steps` trials ran. Its answer is a `Bracket`, one of:

- `found`: passed at one rate, failed at the next one up: the threshold lies in
  that interval; the value is the end the search names (`reports`: "passed" for
  RFC 3511's highest rate without failures, "failed" for the lowest flood rate
  that denies), its resolution hi/lo − 1;
- `below`: even the lowest rate tried failed: the threshold is below it;
- `at_least`: the highest rate tried passed: the threshold is at least it.

A trial the tool could not run (`measured` false: the generator refused a count
beyond its own limits, before any traffic) says nothing about the path: the search
bisects below it as below a failure, but it never ends the bracket, so a search
whose upper end is such a trial answers "at least" the highest rate that passed,
with the trial that could not run kept as its `ceiling`.

A censored bracket (`below`, `at_least`) has no value, only a bound: it is never
a number to average. Each trial reports the rate it asked for and the rate it
achieved (connections/s completed, FINs/s the server saw, flood packets/s sent);
`measure` says which one places the bracket: "asked" where a trial passes only if
it achieved (nearly) what it asked, "achieved" where the load itself may fall
short of the ask (a flood): a stream that survived a flood which reached 149 kpps
of 200 asked says nothing about 200 kpps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from secperf.errors import SecperfError

# RFC 3511's tolerance for a "successful" rate: 0.1 % failures.
DEFAULT_MAX_FAILURE_RATIO = 0.001

Outcome = Literal["found", "below", "at_least"]
Measure = Literal["asked", "achieved"]
Reports = Literal["passed", "failed"]


@dataclass(frozen=True)
class Trial:
    """What one trial returns: did it pass, the rate it achieved (None: not measured);
    `measured` false: the tool could not run it (see the module's docstring).

    `loss` is the trial loss ratio MLRsearch compares with each goal's loss ratio
    (secperf/workloads/parts/mlrsearch.py): the share that failed, or 1.0 where a
    criterion other than the failure count was missed; None: 0.0 if it passed, else 1.0."""

    passed: bool
    achieved: float | None
    detail: dict[str, Any] = field(default_factory=dict)
    measured: bool = True
    loss: float | None = None

    @property
    def loss_ratio(self) -> float:
        if self.loss is not None:
            return self.loss
        return 0.0 if self.passed else 1.0


@dataclass(frozen=True)
class Step:
    """One trial of a search: the rate asked, the rate achieved, the verdict."""

    asked: float
    achieved: float | None
    passed: bool
    detail: dict[str, Any] = field(default_factory=dict)

    def rate(self, measure: Measure) -> float:
        """The rate that places this step in the bracket (the asked one when the
        achieved one was not measured: a trial that failed before it sent anything)."""
        if measure == "achieved" and self.achieved is not None:
            return self.achieved
        return self.asked

    def end(self) -> dict[str, Any]:
        return {"asked": self.asked, "achieved": self.achieved}

    def as_dict(self) -> dict[str, Any]:
        return {
            "asked": self.asked,
            "achieved": self.achieved,
            "passed": self.passed,
            **self.detail,
        }


@dataclass(frozen=True)
class Bracket:
    """Where a search's threshold lies; see the module's docstring."""

    passed_at: Step | None  # the highest rate that passed (None: none did)
    failed_at: Step | None  # the lowest rate that failed (None: none did)
    steps: tuple[Step, ...]
    measure: Measure
    reports: Reports
    range: tuple[float, float]
    # the lowest rate the tool could not run (None: it ran every trial)
    ceiling: Step | None = None

    @property
    def outcome(self) -> Outcome:
        if self.passed_at is None:
            return "below"
        if self.failed_at is None:
            return "at_least"
        return "found"

    @property
    def interval(self) -> tuple[float, float] | None:
        """[lo, hi] of a found bracket in the measured rate. With measure "achieved"
        the failing trial may have achieved less than the passing one (the load fell
        short): the interval then spans both, lowest first."""
        if self.passed_at is None or self.failed_at is None:
            return None
        a, b = self.passed_at.rate(self.measure), self.failed_at.rate(self.measure)
        return (min(a, b), max(a, b))

    @property
    def value(self) -> float | None:
        """The found threshold (the end `reports` names); None when censored."""
        if self.passed_at is None or self.failed_at is None:
            return None
        end = self.passed_at if self.reports == "passed" else self.failed_at
        return end.rate(self.measure)

    @property
    def resolution_pct(self) -> float | None:
        """hi/lo − 1 of a found bracket, in %."""
        iv = self.interval
        if iv is None or iv[0] <= 0:
            return None
        return (iv[1] / iv[0] - 1.0) * 100.0

    @property
    def bound(self) -> float | None:
        """A censored search's bound: `below` → under the lowest rate tried (which
        failed); `at_least` → at or above the highest (which passed); None if found."""
        if self.passed_at is None and self.failed_at is not None:
            return self.failed_at.rate(self.measure)
        if self.failed_at is None and self.passed_at is not None:
            return self.passed_at.rate(self.measure)
        return None

    def as_dict(self) -> dict[str, Any]:
        iv = self.interval
        return {
            "outcome": self.outcome,
            "value": self.value,
            "interval": None if iv is None else list(iv),
            "resolution_pct": self.resolution_pct,
            "bound": self.bound,
            "measure": self.measure,
            "reports": self.reports,
            "passed_at": None if self.passed_at is None else self.passed_at.end(),
            "failed_at": None if self.failed_at is None else self.failed_at.end(),
            "range": list(self.range),
            "ceiling": None if self.ceiling is None else self.ceiling.as_dict(),
            "steps": [s.as_dict() for s in self.steps],
        }


def passes(failures: int, attempts: int, max_ratio: float = DEFAULT_MAX_FAILURE_RATIO) -> bool:
    """True when failures are at most `max_ratio` of attempts (and something was attempted)."""
    return attempts > 0 and failures <= max_ratio * attempts


def next_rate(lo: float, hi: float, *, integer: bool = False) -> float:
    """The geometric middle of [lo, hi]; integral and strictly inside when `integer`."""
    mid = math.sqrt(lo * hi)
    if integer:
        return float(min(max(round(mid), int(lo) + 1), int(hi) - 1))
    return round(mid, 3)


def narrow_enough(lo: float, hi: float, resolution_pct: float, *, integer: bool = False) -> bool:
    """Is hi/lo − 1 within the resolution (or no integer left between them)?"""
    return (integer and hi - lo <= 1) or hi <= lo * (1 + resolution_pct / 100.0)


def bisect_rate(
    trial: Callable[[float], Trial],
    *,
    low: float,
    high: float,
    resolution_pct: float = 10.0,
    max_steps: int = 10,
    measure: Measure = "asked",
    reports: Reports = "passed",
    integer: bool = False,
) -> Bracket:
    """Try `high`, then `low` (both always run), then bisect geometrically between
    the highest rate that passed and the lowest that failed, until the bracket is
    within `resolution_pct` (hi/lo − 1, asked rates) or `max_steps` trials ran."""
    if not 0 < low < high:
        raise ValueError(f"need 0 < low < high, got low={low} high={high}")
    steps: list[Step] = []
    unrun: list[Step] = []  # trials the tool could not run, lowest last

    def run(rate: float) -> Step:
        t = trial(rate)
        step = Step(rate, t.achieved, t.passed and t.measured, t.detail)
        steps.append(step)
        if not t.measured:
            unrun.append(step)
        return step

    def done(ok: Step | None, bad: Step | None) -> Bracket:
        # a trial that could not run is an upper end to search below, never a failure
        failed = None if bad is None or bad in unrun else bad
        ceiling = unrun[-1] if unrun else None
        return Bracket(ok, failed, tuple(steps), measure, reports, (low, high), ceiling)

    top = run(high)
    if top.passed:
        return done(top, None)
    bottom = run(low)
    if not bottom.passed:
        if bottom in unrun:
            raise SearchNotRun(bottom)
        return done(None, bottom)
    ok, bad = bottom, top
    while len(steps) < max_steps and not narrow_enough(
        ok.asked, bad.asked, resolution_pct, integer=integer
    ):
        step = run(next_rate(ok.asked, bad.asked, integer=integer))
        if step.passed:
            ok = step
        else:
            bad = step
    return done(ok, bad)


class SearchNotRun(SecperfError):
    """Even the search's lowest trial could not be run by the tool: no answer."""

    def __init__(self, step: Step):
        super().__init__(
            f"the search's lowest trial ({step.asked:g}) could not be run: "
            f"{step.detail.get('error', 'no reason given')}",
            fix="lower the search's `low` to what this machine can run",
        )
        self.step = step
