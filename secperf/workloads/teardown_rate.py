"""Kind `teardown_rate`: RFC 3511 §5.4, the highest teardown rate (FINs the server
sees a second) of held connections, by search."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field

from secperf.engine import Record
from secperf.errors import EngineError
from secperf.metric import Metric, Search
from secperf.workloads.base import MeasureContext, WorkloadKind, WorkloadPoint, engine_spec
from secperf.workloads.parts.connections import FinClose, run_on_client
from secperf.workloads.parts.rate_search import (
    RateSearchSpec,
    fresh_dut,
    kept_trial,
    legacy_search,
    rate_trial,
    search,
)
from secperf.workloads.parts.search import Trial


class TeardownRateWorkload(RateSearchSpec):
    """RFC 3511 §5.4: the highest teardown rate (FINs the server sees a second)."""

    # each trial: `connections` opened, then closed at the trial's rate
    engine_kind: ClassVar[str] = "connections"
    engine_fields: ClassVar[tuple[str, ...]] = ("connections", "timeout", "duration", "close")

    kind: Literal["teardown_rate"]
    connections: int = Field(default=2000, ge=2, le=1_000_000)
    """`teardown_rate` only: connections opened, then closed at the trial's rate."""
    close: FinClose = "fin"
    """As crr's `close` (`conn_rate`: `"server-first"`, `"client-first"`, `"reset"`) and
    connections' (`teardown_rate`: `"fin"`, `"reset"`).
    """

    def default_name(self) -> str:
        return "teardown-rate"


@dataclass(frozen=True)
class TeardownRateExecutor:
    """§5.4: the highest close rate whose FINs the server all sees, at that rate."""

    def measure(self, ctx: MeasureContext, point: WorkloadPoint[TeardownRateWorkload]) -> Record:
        p = point.spec

        def trial(rate: float, _duration: float) -> Trial:
            # a trial's length is its count's: `connections` closed at the rate
            fresh_dut(ctx)
            spec = engine_spec(p, server=ctx.target, hold=0.0, close_rate=float(rate))
            try:
                r = run_on_client(ctx, spec, keep_all=False)
            except EngineError as exc:
                failed = Trial(False, None, {"error": exc.message})
                return kept_trial(p.engine_kind, ctx, rate, failed)
            tear = r.get("teardown") or {}
            closed, missing = int(tear.get("closed") or 0), int(tear.get("missing") or 0)
            seen = float(r.get("teardown_rate") or 0.0)
            t = rate_trial(missing, closed, seen, rate, p.max_ratio, closed=closed, missing=missing)
            if int(r.get("established") or 0) != p.connections:
                t = Trial(False, seen, {**t.detail, "established_short": True}, loss=1.0)
            return kept_trial(p.engine_kind, ctx, rate, t)

        # every trial closes the same count: its length is not the search's to grow
        return search(ctx, p, trial, p.close, grows=False)


MAX_TEARDOWN = Metric("max_teardown_rate", "Max teardown rate", "conn/s", True, True)
SEARCH = Search(MAX_TEARDOWN, legacy=legacy_search)

KIND = WorkloadKind(
    name="teardown_rate",
    model=TeardownRateWorkload,
    executor=TeardownRateExecutor(),
    metrics=(SEARCH.row(),),
    searches=(SEARCH,),
)
