"""Kind `conn_rate`: RFC 3511 §5.3, the highest connection setup rate (crr at a
paced rate) with at most `max_failure_pct` failed connections, by search."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field

from secperf.engine import Record
from secperf.errors import EngineError
from secperf.metric import Metric, Search
from secperf.workloads.base import (
    MeasureContext,
    WorkloadKind,
    WorkloadPoint,
    engine_spec,
)
from secperf.workloads.parts.connections import Close, crr_summary, run_on_client
from secperf.workloads.parts.rate_search import (
    RateSearchSpec,
    fresh_dut,
    kept_trial,
    legacy_search,
    rate_trial,
    search,
)
from secperf.workloads.parts.search import Trial


class ConnRateWorkload(RateSearchSpec):
    """RFC 3511 §5.3: the highest connection setup rate (crr at a paced rate)."""

    engine_kind: ClassVar[str] = "crr"  # each trial: a crr paced at the trial's rate
    engine_fields: ClassVar[tuple[str, ...]] = (
        "parallel",
        "timeout",
        "request",
        "response",
        "duration",
        "warmup",
        "close",
    )

    kind: Literal["conn_rate"]
    parallel: int = Field(default=16, ge=1, le=128)
    """`conn_rate` only: connect loops and sizes."""
    request: int = Field(default=1, ge=1, le=65536)
    """`conn_rate` only: connect loops and sizes."""
    response: int = Field(default=1, ge=1, le=65536)
    """`conn_rate` only: connect loops and sizes."""
    close: Close = "server-first"
    """As crr's `close` (`conn_rate`: `"server-first"`, `"client-first"`, `"reset"`) and
    connections' (`teardown_rate`: `"fin"`, `"reset"`).
    """

    def default_name(self) -> str:
        return "conn-rate"


@dataclass(frozen=True)
class ConnRateExecutor:
    """§5.3: the highest crr rate with at most max_failure_pct failed connections."""

    def measure(self, ctx: MeasureContext, point: WorkloadPoint[ConnRateWorkload]) -> Record:
        p = point.spec

        def trial(rate: float, duration: float) -> Trial:
            fresh_dut(ctx)
            spec = engine_spec(p, server=ctx.target, rate=rate, interval=0, duration=duration)
            try:
                r = run_on_client(ctx, spec, keep_all=False)
            except EngineError as exc:
                failed = Trial(False, None, {"error": exc.message})
                return kept_trial(p.engine_kind, ctx, rate, failed, duration)
            s = crr_summary(r)
            done, lost = s["completed"], s["failed"]
            t = rate_trial(
                lost, done + lost, s["rate"], rate, p.max_ratio, completed=done, failed=lost
            )
            return kept_trial(p.engine_kind, ctx, rate, t, duration)

        return search(ctx, p, trial, p.close)


# searches: the found value only; a censored search has no number
MAX_CPS = Metric("max_conn_rate", "Max setup rate (≤0.1 % failed)", "conn/s", True, True)
SEARCH = Search(MAX_CPS, legacy=legacy_search)

KIND = WorkloadKind(
    name="conn_rate",
    model=ConnRateWorkload,
    executor=ConnRateExecutor(),
    metrics=(SEARCH.row(),),
    searches=(SEARCH,),
)
