"""Kind `min_flood_rate`: the lowest flood rate that denies a TCP stream (document 002,
Fig. 3b).

One measurement is one search (secperf/workloads/parts/search_method.py, the same
search and answer as every search kind): the stream without a flood, then probes
with floods between `lo` and `hi` packets/s for the lowest flood rate that brings
the stream to at most `threshold_pct` % of the unflooded rate, to `resolution_pct`.
A probe "passes" when the stream was not denied (its MLRsearch loss ratio is 0,
else 1: with `goal_exceed_ratio` 0.5 the flood rate that denies in at most half
of the trial seconds still passes). With `search = "bisect"` the bracket is placed
by the flood rate each probe really sent (the flood record's `rate_pps`): a flood
that reached 149 kpps of 200 asked and did not deny the stream bounds the threshold
at 149 kpps. MLRsearch places it by the asked rate, so a probe whose flood fell
short of 95 % of its ask and did not deny is one the tool could not run: the
search stays below it. Each probe's stream and flood records are kept nested
(`{"type": "side", ...}`); the search's own record is the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import Field, model_validator

from secperf.engine import Record, run_test
from secperf.metric import Metric, Search, SearchReading, legacy_bracket, num
from secperf.metric import Record as RecordView
from secperf.schema.fields import MessageSize
from secperf.workloads.base import (
    EngineExecutor,
    MeasureContext,
    WorkloadKind,
    WorkloadPoint,
    WorkloadSpec,
    always,
    attacker,
    scalar,
)
from secperf.workloads.parts import specs
from secperf.workloads.parts.flood import (
    FloodKind,
    FloodPayload,
    FloodPps,
    FloodTarget,
    keep_side,
    run_beside,
)
from secperf.workloads.parts.rate_search import ACHIEVED_SHARE
from secperf.workloads.parts.search import Trial
from secperf.workloads.parts.search_method import SearchKeys, find


class MinFloodRateWorkload(SearchKeys, WorkloadSpec):
    """Search for the lowest flood rate that denies a TCP stream (document 002, Fig. 3b).

    Each measurement bisects the flood rate within [lo, hi] packets/s for the lowest
    rate at which the stream falls to at most `threshold_pct` % of its unflooded rate
    (measured first, in the same search)."""

    kind: Literal["min_flood_rate"]
    flood: FloodKind = "udp"
    """The flood's packets: UDP datagrams, TCP SYNs or ICMP echo requests."""
    flood_target: FloodTarget = "allowed"
    """`allowed`: server port 9, which the ACLs permit; `denied`: port 19, which they drop (udp and
    syn only).
    """
    flood_payload: FloodPayload = None
    """Payload bytes of each flood packet; unset: the engine's 18 B."""
    lo: FloodPps = 1000
    """The search's lowest flood rate, packets/s (lo < hi)."""
    hi: FloodPps = 200_000
    """The search's highest flood rate, packets/s."""
    threshold_pct: float = Field(default=1.0, gt=0, lt=100)
    """The stream is denied when its throughput falls below this % of its rate without the flood."""
    max_probes: int = Field(default=8, ge=2, le=30)
    """The most flood rates the search tries."""
    resolution_pct: float = Field(default=10.0, gt=0, le=100)
    """The search stops when hi/lo − 1 is this narrow, in %."""
    message: MessageSize = 131072
    """Bytes of each write of the measured TCP stream."""

    @model_validator(mode="after")
    def _lo_below_hi(self) -> MinFloodRateWorkload:
        if self.lo >= self.hi:
            raise ValueError(f"lo ({self.lo}) must be below hi ({self.hi})")
        if self.flood == "icmp" and self.flood_target == "denied":
            raise ValueError('flood_target = "denied" needs a udp or syn flood')
        return self

    def default_name(self) -> str:
        return f"min-{self.flood}-flood-{self.flood_target}"


def _achieved_pps(flood_result: Record) -> float | None:
    """Packets/s the flood really sent over its window (None if the record lacks it)."""
    value = flood_result.get("rate_pps")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True)
class MinFloodRateExecutor:
    def measure(self, ctx: MeasureContext, point: WorkloadPoint[MinFloodRateWorkload]) -> Record:
        p = point.spec
        flood, target, payload = p.flood, p.flood_target, p.flood_payload
        threshold = p.threshold_pct
        # The measured stream: a TCP stream of `message`, as the stream kind runs it.
        measured = specs.stream(
            name=p.name, message=scalar(p.message), duration=p.duration, warmup=p.warmup
        )
        inner = EngineExecutor()
        spec = inner.spec(measured, ctx.target)
        unflooded = run_test(
            ctx.testbed.host(ctx.client), spec, on_record=keep_side(ctx, "unflooded")
        ).result
        base_bps = float(unflooded.get("bits_per_second") or 0.0)

        def probe(rate: float, duration: float) -> Trial:
            asked = int(rate)
            side = replace(ctx, keep=keep_side(ctx, f"probe-{asked}"))
            stream = measured.model_copy(update={"duration": duration})
            at = WorkloadPoint(point.workload_index, point.index, stream)
            result, flood_result = run_beside(
                side, inner, at, flood=flood, rate=asked, target=target, payload=payload
            )
            bps = float(result.get("bits_per_second") or 0.0)
            denied = bps <= base_bps * threshold / 100.0
            sent = _achieved_pps(flood_result)
            detail: dict[str, Any] = {
                "bits_per_second": bps,
                "denied": denied,
                "duration": duration,
            }
            # by asked rate: a flood short of its ask that did not deny says nothing of it
            short = p.search == "mlrsearch" and (sent or 0.0) < ACHIEVED_SHARE * asked
            if short and not denied:
                detail["error"] = f"the flood reached {sent or 0:,.0f} of {asked:,} packets/s"
                return Trial(False, sent, detail, measured=False)
            return Trial(not denied, sent, detail, loss=1.0 if denied else 0.0)

        found = find(
            p,
            probe,
            low=p.lo,
            high=p.hi,
            duration=p.duration,
            resolution_pct=p.resolution_pct,
            max_steps=p.max_probes,
            loss_ratio=0.0,
            measure="achieved",
            reports="failed",
            integer=True,
        )
        record: Record = {
            "type": "result",
            "kind": p.kind,
            "flood": flood,
            "flood_target": target,
            "threshold_pct": threshold,
            "unflooded_bits_per_second": base_bps,
            # passed = the stream was not denied; rates in flood packets/s
            "search": found.as_dict(),
        }
        ctx.keep(record)
        return record


def legacy_search(record: RecordView) -> SearchReading | None:
    """Records from before the `search` object: a `bracket` of asked flood rates
    whose probes kept the rate each flood achieved; the lowest that denied the value."""
    sent = {
        num(p.get("rate_pps")): num(p.get("flood_pps"))
        for p in record.get("probes") or []
        if isinstance(p, Mapping)
    }
    return legacy_bracket(record, reports="failed", achieved=sent)


# Lower is worse: a DUT that a slower flood denies is more fragile.
MIN_FLOOD = Metric(
    "min_flood_rate",
    "Minimum flood rate that denies",
    "packets/s",
    True,
    True,
    censored=("denied already at {bound}", "not denied up to {bound}"),
)
# the lowest flood rate (achieved) probed that denied the stream
SEARCH = Search(MIN_FLOOD, legacy=legacy_search)

# What a probe costs beyond its stream: the flood started and stopped, its delivery
# counted on the DUT.
PROBE_OVERHEAD_S = 1.0


def planned_seconds(spec: MinFloodRateWorkload, _link_bps: int | None) -> float:
    """One search: the unflooded stream, then at most `max_probes` flooded ones."""
    return (1 + spec.max_probes) * (spec.duration + spec.warmup + PROBE_OVERHEAD_S)


KIND = WorkloadKind(
    name="min_flood_rate",
    model=MinFloodRateWorkload,
    executor=MinFloodRateExecutor(),
    test_seconds=planned_seconds,
    metrics=(SEARCH.row(),),
    searches=(SEARCH,),
    hosts=attacker,
    floods=always,
)
