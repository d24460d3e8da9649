"""The machine's noise, and the plan it gives: how long each test, how many rounds,
and what a budget resolves (docs/methodology.md, "Planned precision").

Before the first round, each workload point's baseline is measured a few times at
two test durations, one test right after the other (secperf.run.calibrate). Two
neighbouring tests of the same path are an A/A pair: the variance of the log of
their ratio is what a paired degradation sees when the variant changes nothing,
2 σ² (1 - ρ) with σ the tests' spread and ρ the correlation between neighbours.
Fitted as

    D(d) = fast / d + floor

over the durations d: `fast` is the noise a longer test averages away (it shrinks
as 1 / d), `floor` what it does not (drift slower than a test, which pairing
cancels only in part). A round of the point costs `tests` × (d + overhead) seconds
and its degradation's half width after n rounds is about

    h(n, d) = t(n - 1) × 100 × sqrt(D(d) / n)   percentage points

(on the ratio scale, a cost of c % narrows it by (1 - c / 100): the plan assumes no
cost, the widest case). The duration that reaches the target in the least time
minimises (fast / d + floor) (d + overhead): long tests where the noise is fast
(fast ≫ floor × overhead), short ones and more rounds where it drifts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from secperf import stats
from secperf.run.budget import priority

# The test durations a plan chooses from (seconds): none under half a second, where
# a test would measure its start more than its steady state.
DURATION_CHOICES = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0)
# The durations the calibration measures, and its tests at each: seconds, not minutes.
CALIBRATION_DURATIONS = (0.25, 1.0)
CALIBRATION_TESTS = 5
# How sure the calibration must be that long tests keep a noise of their own (a floor).
FLOOR_EVIDENCE = 0.9
# A planned duration replaces the scenario's only when it saves this share of the time.
KEEP_MARGIN = 0.2
# Rounds a plan looks at, at most, for a target it cannot reach sooner.
MAX_PLANNED_ROUNDS = 10_000


def _logs(values: Sequence[float]) -> list[float]:
    return [math.log(v) for v in values if v > 0]


@dataclass(frozen=True)
class Spread:
    """One duration's baseline tests, in the order they ran."""

    duration: float
    values: tuple[float, ...]

    @property
    def cv(self) -> float:
        """The tests' spread, as a fraction of their mean."""
        if len(self.values) < 2:
            return math.nan
        mean = sum(self.values) / len(self.values)
        var = sum((v - mean) ** 2 for v in self.values) / (len(self.values) - 1)
        return math.sqrt(var) / mean if mean else math.nan

    @property
    def rho(self) -> float:
        """The correlation between neighbouring tests (lag 1, of the logs)."""
        logs = _logs(self.values)
        if len(logs) < 3:
            return math.nan
        mean = sum(logs) / len(logs)
        dev = [x - mean for x in logs]
        var = sum(x * x for x in dev)
        if var == 0:
            return 0.0
        return sum(a * b for a, b in itertools.pairwise(dev)) / var

    @property
    def paired_var(self) -> float:
        """The variance of log(next / this) over neighbouring tests: an A/A pair's."""
        logs = _logs(self.values)
        steps = [b - a for a, b in itertools.pairwise(logs)]
        return sum(s * s for s in steps) / len(steps) if steps else math.nan


@dataclass(frozen=True)
class NoiseModel:
    """One point's noise: D(d) = fast / d + floor, and a test's cost beyond its duration."""

    fast: float  # variance × seconds: what longer tests average away
    floor: float  # variance: what they do not
    overhead_s: float  # a test's time beyond its duration (warm-up, set-up)
    spreads: tuple[Spread, ...] = ()

    def paired_var(self, duration: float) -> float:
        return self.fast / duration + self.floor

    def halfwidth_pp(
        self, duration: float, rounds: int, confidence: float, ratio: float = 1.0
    ) -> float:
        """About the half width of a paired degradation after `rounds` rounds (points);
        `ratio`, the variant's figure over the baseline's where known (a cost on the
        ratio scale narrows the interval in points by as much; a plan assumes 1)."""
        if rounds < 2:
            return math.inf
        t = stats.t_quantile(confidence, rounds - 1)
        return ratio * t * 100.0 * math.sqrt(self.paired_var(duration) / rounds)

    def to_json(self) -> dict[str, object]:
        return {
            "fast": self.fast,
            "floor": self.floor,
            "overhead_s": self.overhead_s,
            "spreads": [
                {
                    "duration": s.duration,
                    "values": list(s.values),
                    "cv": _finite(s.cv),
                    "rho": _finite(s.rho),
                    "paired_var": _finite(s.paired_var),
                }
                for s in self.spreads
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> NoiseModel:
        spreads = data.get("spreads")
        return cls(
            fast=float(data["fast"]),  # type: ignore[arg-type]
            floor=float(data["floor"]),  # type: ignore[arg-type]
            overhead_s=float(data["overhead_s"]),  # type: ignore[arg-type]
            spreads=tuple(
                Spread(float(s["duration"]), tuple(float(v) for v in s["values"]))
                for s in (spreads if isinstance(spreads, list) else [])
            ),
        )


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _floor_shown(spreads: Sequence[Spread]) -> bool:
    """Do the longest tests vary more than fast noise alone would let them? Their A/A
    variance against the shortest's scaled by the durations (pure fast noise: equal),
    by an F test at FLOOR_EVIDENCE: a few tests estimate a variance roughly, and a
    floor that is not there would shorten every test."""
    from scipy import stats as sps

    short = min(spreads, key=lambda s: s.duration)
    long = max(spreads, key=lambda s: s.duration)
    if long.duration <= short.duration:
        return True
    white = short.paired_var * short.duration / long.duration
    if white <= 0:
        return True
    df_long, df_short = len(long.values) - 1, len(short.values) - 1
    crit = float(sps.f.ppf(FLOOR_EVIDENCE, df_long, df_short))
    return long.paired_var / white > crit


def fit(spreads: Sequence[Spread], overhead_s: float) -> NoiseModel:
    """D(d) = fast / d + floor by least squares over the durations' A/A variances,
    neither part below 0 (one duration, or none that shrinks: all floor); a floor
    the longest tests do not show beyond fast noise (_floor_shown) is 0."""
    usable = [s for s in spreads if math.isfinite(s.paired_var)]
    points = [(1.0 / s.duration, s.paired_var) for s in usable]
    if not points:
        raise ValueError("no duration gave two tests to pair")
    if len(points) == 1:
        return NoiseModel(0.0, points[0][1], overhead_s, tuple(spreads))

    def through_origin() -> NoiseModel:
        slope = sum(x * y for x, y in points) / sum(x * x for x, _ in points)
        return NoiseModel(slope, 0.0, overhead_s, tuple(spreads))

    if not _floor_shown(usable):
        return through_origin()
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    floor = my - slope * mx
    if slope <= 0:
        return NoiseModel(0.0, max(0.0, my), overhead_s, tuple(spreads))
    if floor < 0:
        return through_origin()
    return NoiseModel(slope, floor, overhead_s, tuple(spreads))


@dataclass(frozen=True)
class PointPlan:
    """What the noise plans for one point."""

    point_id: str
    model: NoiseModel
    duration: float  # the test duration the rounds use
    tests: int  # tests in one round (the baseline and the variants measured)
    target_pp: float
    confidence: float
    least: int  # its minimum rounds
    most: int  # its cap
    pinned: bool = False  # the scenario gives the duration: kept
    scenario_duration: float = 0.0  # what the scenario says (or defaults to)

    @property
    def round_s(self) -> float:
        return self.tests * (self.duration + self.model.overhead_s)

    def halfwidth_pp(self, rounds: int) -> float:
        return self.model.halfwidth_pp(self.duration, rounds, self.confidence)

    def rounds_to_target(self) -> int | None:
        """The rounds that reach the target (at least the minimum), None past the cap."""
        n = _rounds_to(self.model, self.duration, self.target_pp, self.confidence, self.least)
        return n if n is not None and n <= self.most else None

    def seconds_to_target(self) -> float | None:
        """The least measuring time that reaches the target within the cap, at the
        best duration for it (this plan's when pinned): what "needs about" says, even
        where the budget made the plan choose otherwise. None: past the cap."""
        best: float | None = None
        for d in [self.duration] if self.pinned else sorted({*DURATION_CHOICES, self.duration}):
            n = _rounds_to(self.model, d, self.target_pp, self.confidence, self.least)
            if n is None or n > self.most:
                continue
            took = n * self.tests * (d + self.model.overhead_s)
            best = took if best is None else min(best, took)
        return best

    @property
    def why(self) -> str:
        """Why this duration, in words."""
        if self.pinned:
            return f"{self.duration:g} s as the scenario pins it"
        m = self.model
        fast_share = (m.fast / self.duration) / max(m.paired_var(self.duration), 1e-300)
        kind = "fast noise (longer tests average it)" if fast_share >= 0.5 else "drift"
        return f"{self.duration:g} s: mostly {kind}"

    def to_json(self) -> dict[str, object]:
        need = self.rounds_to_target()
        return {
            "point_id": self.point_id,
            "duration": self.duration,
            "scenario_duration": self.scenario_duration,
            "pinned": self.pinned,
            "why": self.why,
            "tests": self.tests,
            "round_s": self.round_s,
            "rounds_to_target": need,
            "model": self.model.to_json(),
        }


def _rounds_to(
    model: NoiseModel, duration: float, target: float, confidence: float, least: int
) -> int | None:
    """The fewest rounds (at least `least`) whose half width is within `target`."""
    low = max(least, stats.MIN_ROUNDS_TO_STOP)
    if model.halfwidth_pp(duration, low, confidence) <= target:
        return low
    high = low
    while model.halfwidth_pp(duration, high, confidence) > target:
        if high >= MAX_PLANNED_ROUNDS:
            return None
        high = min(MAX_PLANNED_ROUNDS, high * 2)
    while high - low > 1:  # h falls with n: bisect
        mid = (low + high) // 2
        if model.halfwidth_pp(duration, mid, confidence) <= target:
            high = mid
        else:
            low = mid
    return high


def best_duration(
    model: NoiseModel,
    *,
    tests: int,
    target_pp: float,
    confidence: float,
    least: int,
    most: int = MAX_PLANNED_ROUNDS,
    budget_s: float = math.inf,
    current: float | None = None,
    choices: Sequence[float] = DURATION_CHOICES,
) -> float:
    """The test duration a point's rounds should use, `budget_s` its share of the
    budget. In order of preference: the one that reaches the target within the share
    and the cap in the least time; else the narrowest half width the rounds the share
    allows give; else (even the minimum rounds overrun the share) the shortest minimum.
    `current` (the scenario's) is kept unless another does better by KEEP_MARGIN: a
    calibration of seconds tells a clear case, not a close one."""

    def score(d: float) -> tuple[int, float]:
        per = tests * (d + model.overhead_s)
        n = _rounds_to(model, d, target_pp, confidence, least)
        if n is not None and n <= most and n * per <= budget_s:
            return (0, n * per)
        if least * per > budget_s:
            return (2, least * per)
        rounds = max(least, min(most, int(budget_s // per) if math.isfinite(budget_s) else most))
        # squared: as time, a fifth less of it is a tenth narrower
        return (1, model.halfwidth_pp(d, rounds, confidence) ** 2)

    options = sorted(set(choices) | ({current} if current is not None else set()))
    best = min(options, key=score)
    if current is None:
        return best
    mine, theirs = score(current), score(best)
    if mine[0] == theirs[0] and mine[1] * (1 - KEEP_MARGIN) <= theirs[1]:
        return current
    return best


@dataclass(frozen=True)
class Forecast:
    """What the budget resolves, before the run."""

    target_pp: float
    budget_s: float
    needs_s: float | None  # every point to its target (None: some point not within its cap)
    budget_pp: float  # the widest half width the budget gives
    rounds: dict[str, int]  # the rounds the budget gives each point

    @property
    def within_budget(self) -> bool:
        return self.needs_s is not None and self.needs_s <= self.budget_s

    def text(self) -> str:
        """ "±2 points needs about 11 min here; the 3 min budget gives about ±5"."""
        need = (
            f"±{self.target_pp:g} points needs {eta(self.needs_s)} here"
            if self.needs_s is not None
            else f"±{self.target_pp:g} points is past the round cap here"
        )
        if self.within_budget:
            return f"{need}: within the {eta(self.budget_s, about=False)} budget"
        return (
            f"{need}; the {eta(self.budget_s, about=False)} budget gives about "
            f"±{_round_pp(self.budget_pp)}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "target_pp": self.target_pp,
            "budget_s": self.budget_s,
            "needs_s": self.needs_s,
            "budget_pp": _finite(self.budget_pp),
            "rounds": self.rounds,
            "text": self.text(),
        }


def _round_pp(x: float) -> str:
    if not math.isfinite(x):
        return "∞"
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}".rstrip("0").rstrip(".")


def eta(seconds: float | None, about: bool = True) -> str:
    if seconds is None:
        return "unknown"
    word = "about " if about else ""
    if seconds < 90:
        return f"{word}{max(1.0, seconds):.0f} s"
    if seconds < 5400:
        return f"{word}{seconds / 60:.0f} min"
    return f"{word}{seconds / 3600:.1f} h"


def allocate(plans: Sequence[PointPlan], budget_s: float) -> dict[str, int]:
    """The rounds each point gets as the run spends the budget: every point its
    minimum, then one round at a time to the point furthest from its target per
    second of a round (budget.priority), while that round fits what is left."""
    rounds = {p.point_id: p.least for p in plans}
    left = budget_s - sum(p.least * p.round_s for p in plans)
    while True:
        best: tuple[float, PointPlan] | None = None
        for p in plans:
            n = rounds[p.point_id]
            if n >= p.most or p.round_s > left:
                continue
            score = priority(p.halfwidth_pp(n), p.target_pp, p.round_s)
            if score is not None and (best is None or score > best[0]):
                best = (score, p)
        if best is None:
            return rounds
        rounds[best[1].point_id] += 1
        left -= best[1].round_s


def forecast(plans: Sequence[PointPlan], budget_s: float, target_pp: float) -> Forecast:
    """What `budget_s` resolves with these plans, and how long the target needs."""
    rounds = allocate(plans, budget_s)
    widest = max((p.halfwidth_pp(rounds[p.point_id]) for p in plans), default=math.nan)
    needs: float | None = 0.0
    for p in plans:
        took = p.seconds_to_target()
        needs = None if took is None or needs is None else needs + took
    return Forecast(target_pp, budget_s, needs, widest, rounds)
