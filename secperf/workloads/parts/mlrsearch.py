"""MLRsearch, RFC 9971 (draft-ietf-bmwg-mlrsearch-15): a threshold search whose
answer repeats on a noisy path.

A search has one or more goals; each goal is a goal loss ratio (a trial is
low-loss when its loss ratio is at most it), a goal exceed ratio (the share of
trial seconds at a load that may be high-loss while the load still counts as a
lower bound), a goal final trial duration, a goal duration sum (the trial seconds
a load needs before it is classified) and a goal width (the relative width
(upper − lower) / upper at which the search for the goal stops); the goal initial
trial duration is where the trial durations start.

Load classification (RFC 9971 §5 and its Appendix A), per goal, from the trials
at one intended load: full-length trials (at least the final trial duration)
count whole; short trials count only where their high-loss seconds exceed what
the short low-loss ones balance. A load is an upper bound when even if every
missing second were low-loss its high-loss share would exceed the goal exceed
ratio, a lower bound when even if every missing second were high-loss it would
not, else undecided. The relevant upper bound is the smallest upper bound; the
relevant lower bound the largest lower bound below it; the conditional
throughput is the relevant lower bound × (1 − the exceed-ratio quantile of its
full-length trials' loss ratios, missing seconds counted as full loss).

How loads and durations are chosen is the implementation's (the RFC leaves it
open): each goal is reached through coarser preceding targets whose trials are
shorter (durations grow geometrically from the initial to the final one, and the
width halves from target to target), so the search narrows on cheap trials and
spends full-length ones only near the answer. For each target: with no upper
bound yet, the next load is the maximum, then steps up from the lower bound that
double each time; with no lower bound, steps down from the upper bound; with
both, an undecided load between them is measured again, or the geometric middle
is tried. The goals share every trial; the next trial is the shortest any goal
asks for.

A trial the tool could not run (`measured` false) is no high-loss trial: the
search stays below it (it is the `ceiling`) and a goal whose lower bound reaches
it answers "at least" that bound. Each goal's answer is `found` (both bounds),
`below` (no lower bound: the threshold is below the upper one) or `at_least` (no
upper bound); censored answers carry a bound, never a value.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from secperf.workloads.parts.search import Reports, SearchNotRun, Step, Trial

Classification = Literal["upper", "lower", "undecided"]
Outcome = Literal["found", "below", "at_least", "undecided"]
# A trial measurer: the intended load and the intended trial duration (s).
Measurer = Callable[[float, float], Trial]


@dataclass(frozen=True)
class Goal:
    """One search goal (RFC 9971 §4.6); `label` names it in the record ("NDR")."""

    loss_ratio: float
    exceed_ratio: float
    final_duration: float
    duration_sum: float
    width: float
    initial_duration: float
    label: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.loss_ratio < 1:
            raise ValueError(f"goal loss ratio {self.loss_ratio} is not in [0, 1)")
        if not 0 <= self.exceed_ratio < 1:
            raise ValueError(f"goal exceed ratio {self.exceed_ratio} is not in [0, 1)")
        if not 0 < self.width < 1:
            raise ValueError(f"goal width {self.width} is not in (0, 1)")
        if not 0 < self.initial_duration <= self.final_duration:
            raise ValueError("the initial trial duration must be in (0, final duration]")
        if self.duration_sum < self.final_duration:
            raise ValueError("the goal duration sum must be at least the final trial duration")

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "loss_ratio": self.loss_ratio,
            "exceed_ratio": self.exceed_ratio,
            "final_trial_duration": self.final_duration,
            "duration_sum": self.duration_sum,
            "width": self.width,
            "initial_trial_duration": self.initial_duration,
        }


@dataclass(frozen=True)
class Target:
    """A goal or one of its preceding targets: what classifies a load at one step."""

    loss_ratio: float
    exceed_ratio: float
    duration: float  # trials at least this long are full-length
    duration_sum: float
    width: float


def targets(goal: Goal) -> list[Target]:
    """The goal's preceding targets, then the goal: trial durations grow from the
    initial to the final one (at most doubling), the width halves each target, and
    a preceding target is decided by one trial of its duration."""
    n = math.ceil(math.log2(goal.final_duration / goal.initial_duration) - 1e-9)
    n = max(n, 1 if goal.duration_sum > goal.final_duration else 0)
    out = []
    for i in range(n + 1):
        last = i == n
        ratio = goal.final_duration / goal.initial_duration
        d = goal.final_duration if last else round(goal.initial_duration * ratio ** (i / n), 6)
        w = min(goal.width * 2 ** (n - i), 0.5)
        s = goal.duration_sum if last else d
        out.append(Target(goal.loss_ratio, goal.exceed_ratio, d, s, w))
    return out


@dataclass(frozen=True)
class Measured:
    """One trial as the search keeps it."""

    load: float
    duration: float
    trial: Trial

    def as_dict(self) -> dict[str, Any]:
        t = self.trial
        return {
            "load": self.load,
            "duration": self.duration,
            "loss_ratio": t.loss_ratio if t.measured else None,
            "achieved": t.achieved,
            **({} if t.measured else {"measured": False}),
            **t.detail,
        }


def classify(trials: Sequence[Measured], target: Target) -> Classification:
    """RFC 9971's load classification (its Appendix A) of one load's trials."""
    good_full = bad_full = good_short = bad_short = 0.0
    for m in trials:
        bad = m.trial.loss_ratio > target.loss_ratio
        if m.duration >= target.duration - 1e-9:
            good_full, bad_full = good_full + (not bad) * m.duration, bad_full + bad * m.duration
        else:
            good_short += (not bad) * m.duration
            bad_short += bad * m.duration
    e = target.exceed_ratio
    balancing = good_short * e / (1.0 - e)
    effective_bad = bad_full + max(0.0, bad_short - balancing)
    whole = max(target.duration_sum, good_full + effective_bad)
    quantile = whole * e
    if whole - good_full <= quantile + 1e-12:
        return "lower"  # pessimistic: every missing second high-loss, still within
    if effective_bad <= quantile + 1e-12:
        return "undecided"
    return "upper"


def conditional_throughput(load: float, trials: Sequence[Measured], target: Target) -> float:
    """RFC 9971's conditional throughput at `load` (its Appendix B): the load × (1 −
    the goal exceed ratio quantile of the full-length trials' loss ratios, missing
    seconds of the duration sum counted as full loss; a tie takes the lower)."""
    full = sorted(
        (m.trial.loss_ratio, m.duration) for m in trials if m.duration >= target.duration - 1e-9
    )
    whole = max(target.duration_sum, sum(d for _, d in full))
    remaining = whole * (1.0 - target.exceed_ratio)
    ratio: float | None = None
    for loss, d in full:
        if ratio is not None and remaining <= 0.0:
            break
        ratio, remaining = loss, remaining - d
    if ratio is None or remaining > 1e-12:
        ratio = 1.0
    return load * (1.0 - ratio)


@dataclass(frozen=True)
class Bounds:
    """A target's relevant bounds among the loads tried."""

    upper: float | None
    lower: float | None
    undecided: tuple[float, ...]
    ceiling: float | None  # the lowest load the tool could not run

    @property
    def top(self) -> float | None:
        """The end the search stays below: the upper bound, or the ceiling below it."""
        ends = [x for x in (self.upper, self.ceiling) if x is not None]
        return min(ends) if ends else None


@dataclass
class Loads:
    """Every trial of a search, by intended load."""

    by_load: dict[float, list[Measured]] = field(default_factory=dict)
    unrun: dict[float, Measured] = field(default_factory=dict)
    order: list[Measured] = field(default_factory=list)

    def add(self, m: Measured) -> None:
        self.order.append(m)
        if m.trial.measured:
            self.by_load.setdefault(m.load, []).append(m)
        else:
            self.unrun.setdefault(m.load, m)

    def bounds(self, target: Target) -> Bounds:
        kinds = {load: classify(ts, target) for load, ts in self.by_load.items()}
        uppers = [x for x, k in kinds.items() if k == "upper"]
        upper = min(uppers) if uppers else None
        lowers = [x for x, k in kinds.items() if k == "lower" and (upper is None or x < upper)]
        undecided = tuple(sorted(x for x, k in kinds.items() if k == "undecided"))
        ceiling = min(self.unrun) if self.unrun else None
        return Bounds(upper, max(lowers) if lowers else None, undecided, ceiling)


@dataclass(frozen=True)
class Candidate:
    load: float
    duration: float
    move: Literal["up", "down", "again", "middle"]


@dataclass
class GoalState:
    goal: Goal
    targets: list[Target]
    index: int = 0
    ups: int = 0
    downs: int = 0

    @property
    def done(self) -> bool:
        return self.index >= len(self.targets)


@dataclass(frozen=True)
class Range:
    """The loads a search may ask for: [low, high], integral when `integer`."""

    low: float
    high: float
    integer: bool

    def clamp(self, x: float) -> float:
        x = min(max(x, self.low), self.high)
        return float(round(x)) if self.integer else round(x, 3)

    def above(self, lo: float, factor: float) -> float:
        x = self.clamp(lo * factor)
        return min(x + 1, self.high) if self.integer and x <= lo else x

    def below(self, hi: float, factor: float) -> float:
        x = self.clamp(hi / factor)
        return max(x - 1, self.low) if self.integer and x >= hi else x

    def middle(self, lo: float, hi: float) -> float | None:
        """The geometric middle, strictly inside (None: no load left between)."""
        mid = math.sqrt(lo * hi)
        if self.integer:
            m = float(min(max(round(mid), int(lo) + 1), int(hi) - 1))
            return m if lo < m < hi else None
        m = round(mid, 3)
        return m if lo < m < hi else None


def step_factor(width: float, steps: int) -> float:
    """How far an extension reaches: the target's width, doubled (in log space) at
    each consecutive step in the same direction."""
    return float((1.0 / (1.0 - width)) ** (2**steps))


def select(state: GoalState, loads: Loads, span: Range) -> Candidate | None:
    """The next trial the goal's current target asks for (None: the target is done).
    A load the previous target bounded and this one leaves undecided is measured
    again first: it is where the answer was, at the shorter trials."""
    t = state.targets[state.index]
    b = loads.bounds(t)
    top, lo = b.top, b.lower
    undecided = set(b.undecided)
    hint = loads.bounds(state.targets[state.index - 1]) if state.index else None
    prev_hi = hint.upper if hint is not None and hint.upper in undecided else None
    prev_lo = hint.lower if hint is not None and hint.lower in undecided else None
    if top is None:
        if lo is not None and lo >= span.high:
            return None  # the maximum is a lower bound: "at least" it
        if prev_hi is not None and (lo is None or prev_hi > lo):
            return Candidate(prev_hi, t.duration, "again")
        if lo is None:
            if prev_lo is not None:
                return Candidate(prev_lo, t.duration, "again")
            if b.undecided:
                return Candidate(b.undecided[-1], t.duration, "again")
            return Candidate(span.high, t.duration, "up")
        return Candidate(span.above(lo, step_factor(t.width, state.ups)), t.duration, "up")
    if lo is None:
        if top <= span.low:
            if b.upper is None or b.upper > span.low:
                raise SearchNotRun(Step(span.low, None, False, loads.unrun[span.low].trial.detail))
            return None  # the minimum is an upper bound: "below" it
        if prev_lo is not None and prev_lo < top:
            return Candidate(prev_lo, t.duration, "again")
        again = [x for x in b.undecided if x < top]
        if again:
            return Candidate(again[-1], t.duration, "again")
        return Candidate(span.below(top, step_factor(t.width, state.downs)), t.duration, "down")
    if (top - lo) / top <= t.width:
        return None
    inside = [x for x in b.undecided if lo < x < top]
    if inside:
        centre = math.sqrt(lo * top)
        return Candidate(min(inside, key=lambda x: abs(math.log(x / centre))), t.duration, "again")
    mid = span.middle(lo, top)
    if mid is None:
        return None
    return Candidate(mid, t.duration, "middle")


@dataclass(frozen=True)
class GoalResult:
    """One goal's answer (RFC 9971 §4.8's goal result)."""

    goal: Goal
    upper: float | None  # relevant upper bound
    lower: float | None  # relevant lower bound
    ceiling: Measured | None  # the lowest load the tool could not run
    conditional_throughput: float | None
    reports: Reports

    @property
    def outcome(self) -> Outcome:
        top = self.upper
        if self.lower is not None and top is not None:
            return "found"
        if self.lower is not None:
            return "at_least"
        if top is not None:
            return "below"
        return "undecided"

    @property
    def width(self) -> float | None:
        if self.upper is None or self.lower is None:
            return None
        return (self.upper - self.lower) / self.upper

    @property
    def value(self) -> float | None:
        """The found threshold: the relevant lower bound ("passed") or upper ("failed")."""
        if self.outcome != "found":
            return None
        return self.lower if self.reports == "passed" else self.upper

    @property
    def bound(self) -> float | None:
        return {"below": self.upper, "at_least": self.lower}.get(self.outcome)

    def as_dict(self) -> dict[str, Any]:
        """The goal's answer in the shape of the bisection's bracket (so every report
        reads either), with the RFC's outputs beside."""
        found = self.outcome == "found"
        res = None
        if found and self.lower:
            res = (self.upper / self.lower - 1.0) * 100.0  # type: ignore[operator]
        end = {"asked": self.lower, "achieved": self.lower} if self.lower is not None else None
        bad = {"asked": self.upper, "achieved": self.upper} if self.upper is not None else None
        return {
            "outcome": self.outcome,
            "value": self.value,
            "interval": [self.lower, self.upper] if found else None,
            "resolution_pct": res,
            "bound": self.bound,
            "measure": "asked",
            "reports": self.reports,
            "passed_at": end,
            "failed_at": bad,
            "ceiling": None if self.ceiling is None else self.ceiling.as_dict(),
            "goal": self.goal.as_dict(),
            "relevant_lower_bound": self.lower,
            "relevant_upper_bound": self.upper,
            "conditional_throughput": self.conditional_throughput,
            "width_met": None if self.width is None else self.width <= self.goal.width + 1e-12,
        }


@dataclass(frozen=True)
class MlrResult:
    """A search's answer: one result per goal, every trial, why it stopped."""

    goals: tuple[GoalResult, ...]
    trials: tuple[Measured, ...]
    stopped: str  # "goals reached" | "trial limit" | "time limit"
    range: tuple[float, float]
    seconds: float  # trial seconds spent

    @property
    def primary(self) -> GoalResult:
        return self.goals[0]

    def as_dict(self) -> dict[str, Any]:
        """The primary goal's answer (what the reports read) with every goal's, the
        trials and the stop beside."""
        return {
            **self.primary.as_dict(),
            "method": "mlrsearch",
            "range": list(self.range),
            "goals": [g.as_dict() for g in self.goals],
            "trials": [m.as_dict() for m in self.trials],
            "trial_seconds": self.seconds,
            "stopped": self.stopped,
        }


def result(goal: Goal, loads: Loads, reports: Reports) -> GoalResult:
    final = targets(goal)[-1]
    b = loads.bounds(final)
    ceiling = loads.unrun[b.ceiling] if b.ceiling is not None else None
    upper = b.upper
    if b.ceiling is not None and (upper is None or b.ceiling < upper):
        upper = None  # the tool's limit, not the path's: "at least" the lower bound
    lower = b.lower
    if lower is not None and b.ceiling is not None and lower >= b.ceiling:
        lower = None
    ct = None
    if lower is not None:
        ct = conditional_throughput(lower, loads.by_load[lower], final)
    return GoalResult(goal, upper, lower, ceiling, ct, reports)


def mlrsearch(
    measure: Measurer,
    goals: Sequence[Goal],
    *,
    low: float,
    high: float,
    integer: bool = False,
    reports: Reports = "passed",
    max_trials: int = 200,
    max_seconds: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> MlrResult:
    """Search [low, high] for every goal at once (see the module's docstring); stop
    when every goal's final target is reached, after `max_trials` trials, or once
    `max_seconds` (by `clock`) have passed since the start."""
    if not 0 < low < high:
        raise ValueError(f"need 0 < low < high, got low={low} high={high}")
    if not goals:
        raise ValueError("a search needs at least one goal")
    span = Range(float(low), float(high), integer)
    loads = Loads()
    states = [GoalState(g, targets(g)) for g in goals]
    start = clock()
    stopped = "goals reached"
    while True:
        asks: list[tuple[float, int, Candidate]] = []
        for i, st in enumerate(states):
            while not st.done:
                cand = select(st, loads, span)
                if cand is not None:
                    asks.append((cand.duration, i, cand))
                    break
                st.index, st.ups, st.downs = st.index + 1, 0, 0
        if not asks:
            break
        if len(loads.order) >= max_trials:
            stopped = "trial limit"
            break
        if max_seconds is not None and clock() - start >= max_seconds:
            stopped = "time limit"
            break
        _, i, cand = min(asks, key=lambda a: (a[0], a[1]))
        st = states[i]
        st.ups = st.ups + 1 if cand.move == "up" else 0
        st.downs = st.downs + 1 if cand.move == "down" else 0
        loads.add(Measured(cand.load, cand.duration, measure(cand.load, cand.duration)))
    results = tuple(result(g, loads, reports) for g in goals)
    spent = sum(m.duration for m in loads.order)
    return MlrResult(results, tuple(loads.order), stopped, (span.low, span.high), spent)
