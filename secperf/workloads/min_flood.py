"""Kind `min_flood_rate`: the lowest flood rate that denies a TCP stream (document 002).

One measurement is one search. It measures the stream without a flood, then with
floods at `hi` and `lo` packets/s, then bisects (geometrically, as rates span
decades) between the highest rate that left the stream alive and the lowest that
brought it to at most `threshold_pct` % of the unflooded rate, until the bracket is
narrower than `resolution_pct` or `max_probes` floods were sent. Each probe's stream
and flood records are kept nested (`{"type": "side", ...}`); the search's own record
is the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from secperf.engine import Record, run_test
from secperf.scenario.sweep import WorkloadPoint
from secperf.workloads import stream
from secperf.workloads.base import EngineExecutor, MeasureContext
from secperf.workloads.flood import ATTACKER, keep_side, run_beside


@dataclass(frozen=True)
class Probe:
    rate_pps: int
    bits_per_second: float
    flood_pps: float | None
    denied: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "rate_pps": self.rate_pps,
            "bits_per_second": self.bits_per_second,
            "flood_pps": self.flood_pps,
            "denied": self.denied,
        }


def next_rate(low_ok: int, high_denied: int) -> int:
    """The geometric middle of the bracket, rounded, strictly inside it when possible."""
    mid = round(math.sqrt(low_ok * high_denied))
    return min(max(mid, low_ok + 1), high_denied - 1)


def narrow_enough(low_ok: int, high_denied: int, resolution_pct: float) -> bool:
    return high_denied - low_ok <= 1 or high_denied / low_ok <= 1 + resolution_pct / 100


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
            ctx.testbed.host("client"), spec, on_record=keep_side(ctx, "unflooded")
        ).result
        base_bps = float(unflooded.get("bits_per_second") or 0.0)
        probes: list[Probe] = []

        def probe(rate: int) -> bool:
            side = replace(ctx, keep=keep_side(ctx, f"probe-{rate}"))
            result, flood_result = run_beside(
                side, inner, stream_point, flood=flood, rate=rate, target=target, payload=payload
            )
            bps = float(result.get("bits_per_second") or 0.0)
            denied = bps <= base_bps * threshold / 100.0
            fpps = flood_result.get("rate_pps")
            probes.append(
                Probe(rate, bps, float(fpps) if isinstance(fpps, int | float) else None, denied)
            )
            return denied

        low_ok: int | None = None
        high_denied: int | None = None
        if probe(hi):
            high_denied = hi
            if probe(lo):
                high_denied = lo  # denied already at the bottom of the range
            else:
                low_ok = lo
        else:
            low_ok = hi  # no denial within the range
        while (
            low_ok is not None
            and high_denied is not None
            and len(probes) < max_probes
            and not narrow_enough(low_ok, high_denied, resolution)
        ):
            rate = next_rate(low_ok, high_denied)
            if probe(rate):
                high_denied = rate
            else:
                low_ok = rate
        record: Record = {
            "type": "result",
            "kind": "min_flood_rate",
            "flood": flood,
            "flood_target": target,
            "threshold_pct": threshold,
            "unflooded_bits_per_second": base_bps,
            # [highest rate probed that left the stream alive, lowest that denied it];
            # null on a side means the range did not reach it.
            "bracket": [low_ok, high_denied],
            "min_flood_rate_pps": high_denied,
            "found": high_denied is not None,
            "range": [lo, hi],
            "iterations": len(probes),
            "probes": [pr.as_dict() for pr in probes],
        }
        ctx.keep(record)
        return record
