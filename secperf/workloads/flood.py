"""Floods from the attacker host: the `flood` kind, and a flood beside a measured test.

A flood is one engine `run` of kind `flood` in the attacker, aimed at the server
through the DUT (docs/engine-protocol.md). It is one-way: nothing serves it. An
"allowed" flood goes to FLOOD_ALLOWED_PORT, which secperf's ACL permits from the
attacker; a "denied" one to FLOOD_DENIED_PORT, which no permit covers
(secperf/mechanisms/acl.py). `FloodBeside` wraps any executor so that a flood runs
while it measures (document 002's "bandwidth during a flood"); later kinds (RFC 3511
DoS and illegal traffic) reuse `start_flood`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from secperf.engine import EngineTest, Record
from secperf.errors import EngineError
from secperf.mechanisms.acl import FLOOD_ALLOWED_PORT
from secperf.scenario.sweep import WorkloadPoint
from secperf.workloads.base import Executor, MeasureContext
from secperf.workloads.common import Spec

# discard (9): the ACL's flood permit covers it; chargen (19): no permit covers it
FLOOD_DENIED_PORT = 19
ATTACKER = "attacker"
# The flood outlasts the measured test's setup and drain by this much.
FLOOD_MARGIN_S = 0.5


def flood_port(target: str) -> int:
    return FLOOD_ALLOWED_PORT if target == "allowed" else FLOOD_DENIED_PORT


def flood_spec(
    ctx: MeasureContext,
    *,
    flood: str,
    rate_pps: int,
    duration: float,
    target: str = "allowed",
    ports: str | None = None,
    payload_size: int | None = None,
    count: int | None = None,
    sources: str | None = None,
    sender: str | None = None,
) -> Spec:
    """The engine spec of a flood from the attacker towards the server (across the DUT).

    `ports` (TCP/UDP floods) overrides the port `target` names ("allowed" or
    "denied"); `sender` ("auto", "packet", "raw"; default auto): how the engine
    sends it; the engine finds the egress interface and next-hop MAC itself."""
    if ctx.family != 4:
        raise EngineError(
            "floods are IPv4 only",
            where="testbed.family",
            fix='set family = "ipv4" in [testbed] for a scenario with floods',
        )
    spec: Spec = {
        "kind": "flood",
        "flood": flood,
        "target": ctx.topology.server_address(4, "dut"),
        "rate_pps": int(rate_pps),
        "duration": float(duration),
    }
    if flood != "icmp":
        spec["ports"] = ports if ports is not None else str(flood_port(target))
    for key, value in (
        ("payload_size", payload_size),
        ("count", count),
        ("sources", sources),
        ("sender", sender),
    ):
        if value is not None:
            spec[key] = value
    return spec


def start_flood(ctx: MeasureContext, spec: Spec) -> EngineTest:
    """Start a flood in the attacker; collect() it when the measured part is done."""
    return EngineTest(ctx.testbed.host(ATTACKER), spec)


def keep_side(ctx: MeasureContext, role: str) -> Any:
    """A record sink that keeps a side test's records nested, so that the run's
    summary (which reads top-level `result` records) never mixes them with the
    measured test's."""

    def keep(rec: Record) -> None:
        ctx.keep({"type": "side", "role": role, "record": rec})

    return keep


@dataclass(frozen=True)
class FloodExecutor:
    """Kind `flood`: a flood alone, measured at its sender (achieved rate, error)."""

    hosts: frozenset[str] = frozenset({ATTACKER})

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        p = point.params
        spec = flood_spec(
            ctx,
            flood=str(p.get("flood") or "udp"),
            rate_pps=int(str(p["rate"])),
            duration=float(str(p["duration"])),
            target=str(p.get("flood_target") or "allowed"),
            payload_size=_opt_int(p.get("payload_size")),
            count=_opt_int(p.get("count")),
            sources=None if p.get("sources") is None else str(p["sources"]),
        )
        return start_flood(ctx, spec).collect(ctx.keep).result


def _opt_int(value: object) -> int | None:
    return None if value is None else int(str(value))


def flood_params(params: Mapping[str, object]) -> tuple[str | None, int, str, int | None]:
    """(flood kind, rate, target, payload) of a workload point with flood keys."""
    flood = params.get("flood")
    rate = int(str(params.get("flood_rate") or 0))
    target = str(params.get("flood_target") or "allowed")
    return (
        (None if flood is None else str(flood)),
        rate,
        target,
        _opt_int(params.get("flood_payload")),
    )


def measured_seconds(params: Mapping[str, object]) -> float:
    return float(str(params.get("duration") or 0)) + float(str(params.get("warmup") or 0))


def run_beside(
    ctx: MeasureContext,
    inner: Executor,
    point: WorkloadPoint,
    *,
    flood: str,
    rate: int,
    target: str,
    payload: int | None,
) -> tuple[Record, Record]:
    """Measure `point` with `inner` while a flood runs; (measured result, flood result).

    The flood starts first and lasts the measured test's warm-up and duration plus
    FLOOD_MARGIN_S, so it covers the whole measured window."""
    spec = flood_spec(
        ctx,
        flood=flood,
        rate_pps=rate,
        duration=measured_seconds(point.params) + FLOOD_MARGIN_S,
        target=target,
        payload_size=payload,
    )
    test = start_flood(ctx, spec)
    try:
        result = inner.measure(ctx, point)
    except BaseException:
        test.stop()
        raise
    flood_result = test.collect(keep_side(ctx, "flood")).result
    return result, flood_result


@dataclass(frozen=True)
class FloodBeside:
    """Wraps an executor: with `flood` and a non-zero `flood_rate`, a flood from the
    attacker runs while `inner` measures. The measured result is returned (and kept);
    the flood's records are kept nested (`{"type": "side", "role": "flood", ...}`)."""

    inner: Executor

    @property
    def hosts(self) -> frozenset[str]:
        return self.inner.hosts

    def hosts_for(self, point: WorkloadPoint) -> frozenset[str]:
        flood, rate, _, _ = flood_params(point.params)
        needs = flood is not None and rate > 0
        return self.inner.hosts | (frozenset({ATTACKER}) if needs else frozenset())

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        flood, rate, target, payload = flood_params(point.params)
        if flood is None or rate <= 0:
            return self.inner.measure(ctx, point)
        result, flood_result = run_beside(
            ctx, self.inner, point, flood=flood, rate=rate, target=target, payload=payload
        )
        # The measured record says what it was measured under (a copy: the kept line
        # already went to records.jsonl as the engine wrote it).
        return {
            **result,
            "flood": {
                "flood": flood,
                "target": target,
                "asked_pps": rate,
                "rate_pps": flood_result.get("rate_pps"),
                "packets": flood_result.get("packets"),
            },
        }
