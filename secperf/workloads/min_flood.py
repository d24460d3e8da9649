"""Kind `min_flood_rate`: the lowest flood rate that denies a TCP stream (document 002).

One measurement is one search (secperf/search.py, the same bisection and bracket
as every search): the stream without a flood, then with floods at `hi` and `lo`
packets/s, then geometric bisection between the highest flood rate that left the
stream alive and the lowest that brought it to at most `threshold_pct` % of the
unflooded rate, until the bracket is within `resolution_pct` or `max_probes`
floods were sent. A probe "passes" when the stream was not denied. The bracket is
placed by the flood rate each probe really sent (the flood record's `rate_pps`),
not the asked one: a flood that reached 149 kpps of 200 asked and did not deny the
stream bounds the threshold at 149 kpps. Each probe's stream and flood records are
kept nested (`{"type": "side", ...}`); the search's own record is the result.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from secperf.engine import Record, run_test
from secperf.scenario.sweep import WorkloadPoint
from secperf.search import Trial, bisect_rate
from secperf.workloads import stream
from secperf.workloads.base import EngineExecutor, MeasureContext
from secperf.workloads.flood import ATTACKER, keep_side, run_beside


def _achieved_pps(flood_result: Record) -> float | None:
    """Packets/s the flood really sent over its window (None if the record lacks it)."""
    value = flood_result.get("rate_pps")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True)
class MinFloodRateExecutor:
    hosts: frozenset[str] = frozenset({ATTACKER})

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        p = point.params
        flood = str(p.get("flood") or "udp")
        target = str(p.get("flood_target") or "allowed")
        payload = None if p.get("flood_payload") is None else int(str(p["flood_payload"]))
        lo, hi = int(str(p["lo"])), int(str(p["hi"]))
        threshold = float(str(p["threshold_pct"]))
        max_probes = int(str(p["max_probes"]))
        resolution = float(str(p["resolution_pct"]))
        stream_params: dict[str, object] = {
            "protocol": "tcp",
            "message": p.get("message"),
            "duration": p.get("duration"),
            "warmup": p.get("warmup"),
        }
        inner = EngineExecutor(stream.engine_spec)
        stream_point = WorkloadPoint(
            point.workload_index, point.index, point.name, "stream", stream_params, "", ()
        )
        spec = inner.spec(stream_params, ctx.target)
        unflooded = run_test(
            ctx.testbed.host(ctx.client), spec, on_record=keep_side(ctx, "unflooded")
        ).result
        base_bps = float(unflooded.get("bits_per_second") or 0.0)

        def probe(rate: float) -> Trial:
            asked = int(rate)
            side = replace(ctx, keep=keep_side(ctx, f"probe-{asked}"))
            result, flood_result = run_beside(
                side, inner, stream_point, flood=flood, rate=asked, target=target, payload=payload
            )
            bps = float(result.get("bits_per_second") or 0.0)
            denied = bps <= base_bps * threshold / 100.0
            detail = {"bits_per_second": bps, "denied": denied}
            return Trial(not denied, _achieved_pps(flood_result), detail)

        found = bisect_rate(
            probe,
            low=lo,
            high=hi,
            resolution_pct=resolution,
            max_steps=max_probes,
            measure="achieved",
            reports="failed",
            integer=True,
        )
        record: Record = {
            "type": "result",
            "kind": "min_flood_rate",
            "flood": flood,
            "flood_target": target,
            "threshold_pct": threshold,
            "unflooded_bits_per_second": base_bps,
            # passed = the stream was not denied; rates in flood packets/s
            "search": found.as_dict(),
        }
        ctx.keep(record)
        return record
