"""Floods from the attacker host, as several kinds send them: the scenario's flood
keys, a flood's engine spec, and a flood beside a measured test.

A flood is one engine `run` of kind `flood` in the attacker, aimed at the server
through the DUT (docs/engine-protocol.md). It is one-way: nothing serves it. An
"allowed" flood goes to FLOOD_ALLOWED_PORT, which secperf's ACL permits from the
attacker; a "denied" one to FLOOD_DENIED_PORT, which no permit covers
(secperf/mechanisms/acl.py). `run_beside` runs a flood while another executor
measures (document 002's "bandwidth during a flood", secperf.workloads.parts.flood_beside);
the kinds flood, dos, illegal and min_flood use `flood_spec` and `start_flood`.

The sender's count is only what was sent: every flood is also counted at the target
and at the DUT over its own window (secperf.workloads.parts.delivery), and its result
record carries `delivered`; a flood beside a measured test must cover the measured
window or the point fails.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import PlainValidator

from secperf.engine import EngineRun, EngineTest, Record
from secperf.errors import EngineError
from secperf.mechanisms.base import FLOOD_ALLOWED_PORT
from secperf.schema.fields import ValueDoc, bounded, documented, one_or_sweep, parse_count
from secperf.schema.units import parse_size, toml_repr
from secperf.testbed.topology import Topology
from secperf.workloads.base import (
    ATTACKER,
    Executor,
    MeasureContext,
    Spec,
    WorkloadPoint,
    WorkloadSpec,
)
from secperf.workloads.parts.delivery import (
    DeliveryCount,
    coverage,
    flood_summary,
    flood_window,
    measured_window,
    require_covered,
)

# discard (9): the ACL's flood permit covers it; chargen (19): no permit covers it
FLOOD_DENIED_PORT = 19
# A flood beside a measured test starts before the measured test is launched and
# is stopped (SIGINT: it writes its result) as soon as the measured test is done; it
# is sized to outlast the measured test's warm-up and duration by this much, room for
# a control connection's SYN retransmits and a stream's drain under the flood. The
# coverage of the measured window is checked, not assumed.
FLOOD_MARGIN_S = 30.0
# A measured test's warm-up below which the flood is running before it is launched.
FLOOD_RAMP_S = 0.2

# ---- the scenario's flood keys (docs/engine-protocol.md, kind flood): rates in packets/s

FLOOD_RATE_MIN = 1000
FLOOD_RATE_MAX = 10_000_000
FloodKind = Literal["udp", "syn", "icmp"]
FloodTarget = Literal["allowed", "denied"]


def parse_flood_payload(value: object) -> int | None:
    return None if value is None else bounded(parse_size, 0, 1472, "a flood payload")(value)


def _flood_rate(value: object) -> int:
    rate = parse_count(value)
    if rate != 0 and not FLOOD_RATE_MIN <= rate <= FLOOD_RATE_MAX:
        raise ValueError(
            f"a flood rate is 0 (no flood) or {FLOOD_RATE_MIN}..{FLOOD_RATE_MAX} packets/s "
            f"(got {toml_repr(value)})"
        )
    return rate


FLOOD_RATE_DOC = ValueDoc(
    "integer", "packets/s", "20000", f"0 (no flood) or {FLOOD_RATE_MIN} … {FLOOD_RATE_MAX}"
)
# A flood rate beside a measured test: 0 (no flood) or a rate; a list sweeps it.
FloodRate = Annotated[
    int | list[int], PlainValidator(one_or_sweep(documented(_flood_rate, FLOOD_RATE_DOC)))
]
_pps = bounded(parse_count, FLOOD_RATE_MIN, FLOOD_RATE_MAX, "a flood rate", unit="packets/s")
FloodPps = Annotated[int, PlainValidator(_pps)]
SweptFloodPps = Annotated[int | list[int], PlainValidator(one_or_sweep(_pps))]
FloodPayload = Annotated[
    int | None,
    PlainValidator(
        documented(parse_flood_payload, ValueDoc("size", "bytes", "100", "0 B … 1472 B"))
    ),
]


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
    interval: float | None = None,
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
        "target": ctx.topology.server_address(4, "dut", ctx.server),
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
        ("interval", interval),
    ):
        if value is not None:
            spec[key] = value
    return spec


def start_flood(ctx: MeasureContext, spec: Spec) -> EngineTest:
    """Start a flood in the attacker; collect() it when the measured part is done."""
    return EngineTest(ctx.testbed.host(ATTACKER), spec)


def started_flood(ctx: MeasureContext, spec: Spec) -> EngineTest:
    """Start a flood and wait until its packets flow (its `start` record), so that a
    measured test launched next begins under it (connection setup included)."""
    test = start_flood(ctx, spec)
    test.wait_started()
    return test


def flood_beside(ctx: MeasureContext, spec: Spec, warmup: float) -> EngineTest:
    """Start a flood beside a measured test with `warmup` seconds of warm-up.

    With at least FLOOD_RAMP_S of warm-up the measured test is launched at once: it
    sets up its connections as the flood starts (a client already connected when an
    attack begins: the flood is on its data, not on its handshake, which the `dos`
    kind measures), and the flood is running long before its measured window. With
    less, the flood is running before the measured test is launched. Either way the
    coverage of the measured window is checked afterwards."""
    test = start_flood(ctx, spec)
    if warmup < FLOOD_RAMP_S:
        test.wait_started()
    return test


def with_delivered(run: EngineRun, delivered: Mapping[str, Any], **extra: Any) -> list[Record]:
    """The flood's records with its result carrying `delivered` (and `extra`)."""
    result = run.result
    return [
        {**rec, "delivered": dict(delivered), **extra} if rec is result else rec
        for rec in run.records
    ]


class Measured:
    """A record sink for a measured test run under a flood: passes its records on at
    once but holds its `result` back until the flood is known to have covered it, and
    remembers its records for the coverage check."""

    def __init__(self, keep: Callable[[Record], None]) -> None:
        self.keep = keep
        self.records: list[Record] = []
        self.held: list[Record] = []

    def __call__(self, rec: Record) -> None:
        self.records.append(rec)
        if rec.get("type") == "result":
            self.held.append(rec)
        else:
            self.keep(rec)

    def release(self, covered: bool, **extra: Any) -> None:
        """Keep the held result(s): as results (with `extra`) when covered, else
        nested as side records that no summary reads."""
        for rec in self.held:
            if covered:
                self.keep({**rec, **extra})
            else:
                self.keep({"type": "side", "role": "uncovered", "record": {**rec, **extra}})
        self.held = []


def keep_side(ctx: MeasureContext, role: str) -> Any:
    """A record sink that keeps a side test's records nested, so that the run's
    summary (which reads top-level `result` records) never mixes them with the
    measured test's."""

    def keep(rec: Record) -> None:
        ctx.keep({"type": "side", "role": role, "record": rec})

    return keep


def run_beside(
    ctx: MeasureContext,
    inner: Executor[Any],
    point: WorkloadPoint[WorkloadSpec],
    *,
    flood: str,
    rate: int,
    target: str,
    payload: int | None,
) -> tuple[Record, Record]:
    """Measure `point` with `inner` while a flood runs; (measured result, flood result).

    The flood starts first (`flood_beside`) and is stopped when the measured test is
    done (at the latest it ends by itself FLOOD_MARGIN_S after the measured test's
    warm-up and duration). The flood result carries `delivered`
    (secperf.workloads.parts.delivery) and `coverage`; the measured result is kept (with a
    `flood` summary) only if the flood covered its measured window, else the point
    fails with an EngineError."""
    spec = flood_spec(
        ctx,
        flood=flood,
        rate_pps=rate,
        duration=point.spec.duration + point.spec.warmup + FLOOD_MARGIN_S,
        target=target,
        payload_size=payload,
        interval=point.spec.record_interval(),  # on the measured test's beat
    )
    count = DeliveryCount(ctx, [spec])
    count.start()
    measured = Measured(ctx.keep)
    test = flood_beside(ctx, spec, point.spec.warmup)
    try:
        result = inner.measure(replace(ctx, keep=measured), point)
    except BaseException:
        test.stop()
        raise
    test.interrupt()
    run = test.collect()
    (delivered,) = count.finish([run.result])
    cov = coverage(flood_window(run.records, run.result), measured_window(measured.records, result))
    side = keep_side(ctx, "flood")
    for rec in with_delivered(run, delivered, coverage=cov):
        side(rec)
    summary = {"flood": flood, "target": target, **flood_summary(spec, run.result, delivered)}
    measured.release(bool(cov["covered"]), flood=summary)
    require_covered(cov, f"{point.kind} test")
    return {**result, "flood": summary}, {**run.result, "delivered": delivered, "coverage": cov}


# The attacker's link to the DUT: spoofed flood sources are taken from its upper half.
ATTACKER_LINK = "attacker-dut"


def unlisted_sources(topology: Topology) -> str:
    """Spoofed flood sources: the upper half of the attacker's link. No host answers
    ARP for them and no ACL permit lists them."""
    net = topology.interface(ATTACKER, ATTACKER_LINK, 4).network
    assert isinstance(net, ipaddress.IPv4Network)
    upper = list(net.subnets(prefixlen_diff=1))[-1]
    return str(upper)
