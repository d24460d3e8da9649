"""The keys that choose and tune a threshold search, and the one call every search
kind makes: MLRsearch (secperf/workloads/parts/mlrsearch.py, the default) or the
bisection (secperf/workloads/parts/search.py, `search = "bisect"`), so the two
can be compared on the same workload.

A kind gives its trial as `trial(load, duration)` and its search's range, width
(`resolution_pct`), trial limit and the goal loss ratio of its pass criterion;
the keys here give MLRsearch's goal exceed ratio, duration sum and initial trial
duration (the final trial duration is the workload's `duration`). The answer's
record (`search`) has the same shape either way: the outcome, value, interval or
bound the reports read, and `method`; MLRsearch's adds every goal with its
relevant bounds and conditional throughput, and every trial (load, duration, loss).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from secperf.schema.fields import PositiveDuration, StrictModel
from secperf.workloads.parts.mlrsearch import Goal, Measurer, MlrResult, mlrsearch
from secperf.workloads.parts.search import Bracket, Measure, Reports, bisect_rate

Method = Literal["mlrsearch", "bisect"]
# MLRsearch's trials beyond the bisection's step limit: short ones are cheap
MLR_TRIALS_PER_STEP = 6
# the initial trial duration, a share of the final one: two doublings up to it
INITIAL_SHARE = 0.25
MIN_INITIAL_S = 0.1
# the goal duration sum, in final trial durations
DURATION_SUMS = 3.0


# What MLRsearch spends against simulated devices (tests/unit/test_mlrsearch.py's
# forwarder, default keys): ~3.3 duration sums of trial time in ~15 trials.
MLR_SUMS_SPENT = 3.3
MLR_TRIALS = 15


class SearchKeys(StrictModel):
    """The keys of a kind that searches for a threshold (docs/scenario-format.md)."""

    search: Method = Field(
        default="mlrsearch",
        description='how the threshold is searched: "mlrsearch" (RFC 9971: trials that '
        "grow as the search narrows, a load classified by the share of its trial "
        'seconds that failed) or "bisect" (one trial of `duration` at each rate, '
        "halving the bracket)",
    )
    goal_exceed_ratio: float = Field(
        default=0.5,
        ge=0,
        lt=1,
        description="MLRsearch's goal exceed ratio: the share of a load's trial seconds that "
        "may fail while the load still counts as passing (0.5: the median trial decides; "
        "0: one failed trial fails the load)",
    )
    goal_duration_sum: PositiveDuration | None = Field(
        default=None,
        description="MLRsearch's goal duration sum: the trial seconds at a load before it is "
        f"classified (default {DURATION_SUMS:g} × duration; at least duration)",
    )
    goal_initial_duration: PositiveDuration | None = Field(
        default=None,
        description="MLRsearch's goal initial trial duration: the first trials' length, "
        f"doubling up to `duration` as the search narrows (default {INITIAL_SHARE:g} × "
        f"duration, at least {MIN_INITIAL_S:g} s)",
    )
    search_time: PositiveDuration | None = Field(
        default=None,
        description="MLRsearch stops after this long (its answer then says so, and its "
        "bounds are wider than the width asked); default: no limit but the trial count",
    )

    def goal(
        self, final_s: float, loss_ratio: float, width: float, label: str, grows: bool = True
    ) -> Goal:
        """The MLRsearch goal of these keys for a final trial of `final_s` seconds
        (`grows` false: every trial is a final one)."""
        initial = self.goal_initial_duration or max(final_s * INITIAL_SHARE, MIN_INITIAL_S)
        initial = initial if grows else final_s
        total = self.goal_duration_sum or final_s * DURATION_SUMS
        return Goal(
            loss_ratio=loss_ratio,
            exceed_ratio=self.goal_exceed_ratio,
            final_duration=final_s,
            duration_sum=max(total, final_s),
            width=width,
            initial_duration=min(initial, final_s),
            label=label,
        )


def search_seconds(keys: SearchKeys, duration: float, overhead_s: float, trials: float) -> float:
    """A planned search's length (a guess for `secperf check`, not a bound): the
    bisection's `trials` trials, or what MLRsearch spends on a device without noise."""
    if keys.search == "bisect":
        return trials * (duration + overhead_s)
    total = max(keys.goal_duration_sum or duration * DURATION_SUMS, duration)
    return MLR_SUMS_SPENT * total + MLR_TRIALS * overhead_s


@dataclass(frozen=True)
class Answer:
    """A search's answer, whichever method ran it."""

    method: Method
    outcome: str
    value: float | None
    bound: float | None
    record: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return self.record


def from_bracket(b: Bracket) -> Answer:
    return Answer("bisect", b.outcome, b.value, b.bound, {**b.as_dict(), "method": "bisect"})


def from_mlr(r: MlrResult) -> Answer:
    p = r.primary
    return Answer("mlrsearch", p.outcome, p.value, p.bound, r.as_dict())


def find(
    keys: SearchKeys,
    trial: Measurer,
    *,
    low: float,
    high: float,
    duration: float,
    resolution_pct: float,
    max_steps: int,
    loss_ratio: float,
    more_loss_ratios: Sequence[float] = (),
    measure: Measure = "asked",
    reports: Reports = "passed",
    integer: bool = False,
    grows: bool = True,
) -> Answer:
    """Search [low, high] by the keys' method. The bisection runs `trial(rate,
    duration)` and judges by the trial's `passed`, placed by `measure`; MLRsearch
    judges each trial's `loss` against `loss_ratio` (its first goal, the answer)
    and each of `more_loss_ratios` (beside it, e.g. a PDR beside the NDR), by
    intended load. `resolution_pct` is the bisection's hi/lo − 1 and MLRsearch's
    goal width (upper − lower) / upper, both ≈ the same relative precision. `grows`
    false: the kind's trial has a length of its own (a count to close), so every
    trial is a final one."""
    if keys.search == "bisect":
        return from_bracket(
            bisect_rate(
                lambda rate: trial(rate, duration),
                low=low,
                high=high,
                resolution_pct=resolution_pct,
                max_steps=max_steps,
                measure=measure,
                reports=reports,
                integer=integer,
            )
        )
    width = resolution_pct / (100.0 + resolution_pct)
    ratios = [loss_ratio, *more_loss_ratios]
    goals = [keys.goal(duration, r, width, f"loss ≤ {r * 100:g} %", grows) for r in ratios]
    return from_mlr(
        mlrsearch(
            trial,
            goals,
            low=low,
            high=high,
            integer=integer,
            reports=reports,
            max_trials=max_steps * MLR_TRIALS_PER_STEP,
            max_seconds=keys.search_time,
        )
    )
