"""What RFC 3511's rate searches share (kinds `conn_rate` §5.3 and `teardown_rate`
§5.4): their keys, a fresh DUT before each trial, a trial's record, the search.

Each measurement searches the workload's [low, high] for the highest rate with at
most `max_failure_pct` failures (secperf/workloads/parts/search_method.py: MLRsearch,
or the bisection with `search = "bisect"`); its result record carries the answer
(`search`: found with its resolution, or below / at least a bound, never a number
standing in for one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from pydantic import Field, model_validator

from secperf.engine import Record
from secperf.mechanisms.base import flush_flow_state
from secperf.metric import Record as RecordView
from secperf.metric import SearchReading, legacy_bracket
from secperf.schema.fields import PerSecond, Timeout
from secperf.testbed.topology import DUT
from secperf.workloads.base import MeasureContext, WorkloadSpec
from secperf.workloads.parts.search import Trial, passes
from secperf.workloads.parts.search_method import SearchKeys, find

# Below this share of the offered rate, the rate was not achieved: a failure too.
ACHIEVED_SHARE = 0.95


class RateSearchSpec(SearchKeys, WorkloadSpec):
    """A search for the highest rate with at most `max_failure_pct` failures (RFC 3511)."""

    # its heading in the generated docs/scenario-format.md
    part_title: ClassVar[str] = "A rate search (RFC 3511)"

    low: PerSecond = 500.0
    """Per second, low < high."""
    high: PerSecond = 20_000.0
    """Per second, low < high."""
    resolution_pct: float = Field(default=10.0, gt=0, le=50)
    """Stop when hi/lo − 1 is this narrow (in %)."""
    max_failure_pct: float = Field(default=0.1, ge=0, le=100)
    """A trial passes when at most this % of its connections fail (RFC 3511's 0.1 %)."""
    max_steps: int = Field(default=8, ge=1, le=30)
    """1 … 30 trials."""
    timeout: Timeout = 1.0
    """Per connection, 1 ms … 120 s."""

    @model_validator(mode="after")
    def _low_below_high(self) -> RateSearchSpec:
        if self.low >= self.high:
            raise ValueError(f"low ({self.low:g}) must be below high ({self.high:g})")
        return self

    @property
    def max_ratio(self) -> float:
        return self.max_failure_pct / 100.0


def fresh_dut(ctx: MeasureContext) -> None:
    """Before each trial of a search: the DUT (and every host carrying a mechanism)
    forgets the connections of the trial before (TIME_WAIT entries of an orderly
    close, NAT bindings), so a trial's result does not depend on which rates the
    search tried first."""
    names = {h for _mech, mctx in ctx.mechanisms for h in mctx.hosts}
    if DUT in ctx.topology.names:
        names.add(DUT)
    for name in sorted(names):
        flush_flow_state(ctx.testbed.host(name))


def kept_trial(
    kind: str, ctx: MeasureContext, rate: float, t: Trial, duration: float | None = None
) -> Trial:
    """Keep the trial as a `trial` record (not a "result": the summary reads one
    result per round, the search's) and hand it back to the search."""
    ctx.keep(
        {
            "type": "trial",
            "kind": kind,
            "asked": rate,
            **({} if duration is None else {"duration": duration}),
            "achieved": t.achieved,
            "passed": t.passed,
            **({} if t.loss is None else {"loss_ratio": t.loss}),
            **({} if t.measured else {"measured": False}),
            **t.detail,
        }
    )
    return t


def rate_trial(
    failures: int, attempts: int, achieved: float, rate: float, max_ratio: float, **detail: object
) -> Trial:
    """A rate trial's verdict: at most `max_ratio` failed and ≥ 95 % of the rate
    achieved. Its loss ratio is the failed share, or 1.0 when the rate fell short
    (the search then never takes a rate the path did not reach as passed)."""
    short = achieved < ACHIEVED_SHARE * rate
    ratio = failures / attempts if attempts else 1.0
    ok = passes(failures, attempts, max_ratio) and not short
    return Trial(ok, achieved, dict(detail), loss=1.0 if short else ratio)


def search(
    ctx: MeasureContext,
    spec: RateSearchSpec,
    trial: Callable[[float, float], Trial],
    close: str,
    *,
    grows: bool = True,
) -> Record:
    """Search the workload's bounds; the result record carries the answer. A trial
    passes only with ≥ 95 % of its asked rate achieved, so the asked rates place
    the bracket; the achieved ones are beside."""
    found = find(
        spec,
        trial,
        low=spec.low,
        high=spec.high,
        duration=spec.duration,
        resolution_pct=spec.resolution_pct,
        max_steps=spec.max_steps,
        loss_ratio=spec.max_ratio,
        measure="asked",
        reports="passed",
        grows=grows,
    )
    rec: Record = {
        "type": "result",
        "kind": spec.kind,
        "max_failure_pct": spec.max_ratio * 100,
        "search": found.as_dict(),
        "close": close,
    }
    ctx.keep(rec)
    return rec


def legacy_search(record: RecordView) -> SearchReading | None:
    """Records from before the `search` object: a `bracket` of asked rates, the
    highest that passed the value."""
    return legacy_bracket(record, reports="passed")
