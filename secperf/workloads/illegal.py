"""RFC 3511 §5.8 illegal traffic handling (kind `illegal`): the allowed flow's
performance while flows the policy denies run beside it, and how many denied
packets reached the server.

Two denied flows come from the attacker at `denied_rate` packets/s each, both to
`denied_ports` (default 10-1023: port 19 and a spread of others, never the
attacker's permitted port 9): UDP from the attacker's own address, and TCP SYNs from
sources no permit lists (the upper half of the attacker's link). The server counts
what arrives of them with an nft counter in its own namespace (prerouting, raw
priority: before its stack sees anything). Through an ACL the count must be 0
(`illegal_reached`); without one (baseline, PAT) the denied packets do reach the
server, which is what the comparison shows. The record carries one pass/fail check,
"no denied packet reached the server" (applicable to variants that filter). A round in
which a denied flood sent nothing tested nothing: it is not run (an error with the
reason), not a check that failed.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import PlainValidator, model_validator

from secperf.engine import EngineTest, Record
from secperf.errors import EngineError
from secperf.mechanisms.registry import MECHANISMS
from secperf.metric import Metric, MetricRow, field, path, throughput
from secperf.metric import Record as RecordView
from secperf.schema.fields import Rate, bounded
from secperf.schema.units import parse_size, toml_repr
from secperf.workloads.base import (
    ATTACKER,
    MeasureContext,
    Spec,
    WorkloadKind,
    WorkloadPoint,
    WorkloadSpec,
    always,
    attacker,
    engine_spec,
)
from secperf.workloads.parts import specs
from secperf.workloads.parts.delivery import (
    DeliveryCount,
    coverage,
    flood_window,
    measured_window,
    require_covered,
)
from secperf.workloads.parts.flood import (
    ATTACKER_LINK,
    FLOOD_MARGIN_S,
    FloodPps,
    flood_beside,
    flood_spec,
    keep_side,
    unlisted_sources,
    with_delivered,
)

DEFAULT_DENIED_PORTS = "10-1023"
FLOWS = ("udp", "tcp")
# The ports each testbed's counter table counts now (one table per server).
_INSTALLED: dict[str, str] = {}


def _denied_ports(value: object) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"\d{1,5}(-\d{1,5})?", value):
        raise ValueError(
            f'denied_ports is a port or a range such as "10-1023" (got {toml_repr(value)})'
        )
    lo, _, hi = value.partition("-")
    first, last = int(lo), int(hi or lo)
    if not 1 <= first <= last <= 65535:
        raise ValueError(f"denied_ports {toml_repr(value)} is not a range of ports 1..65535")
    # 9 is the attacker's permitted flood port; 5201 and 5300-5399 the measured flow's.
    for taken, what in (
        (range(9, 10), "the permitted flood port 9"),
        (range(5201, 5202), "the engine's control port 5201"),
        (range(5300, 5400), "the engine's data ports 5300-5399"),
    ):
        if first <= taken[-1] and taken[0] <= last:
            raise ValueError(
                f"denied_ports {toml_repr(value)} includes {what}, which an ACL permits"
            )
    return value


class IllegalWorkload(WorkloadSpec):
    """RFC 3511 §5.8: the allowed flow (TCP stream, paced by `rate`, or rr) while denied
    flows run from the attacker (UDP from it, SYNs from unlisted sources, each at
    `denied_rate` packets/s to `denied_ports`); counts the denied packets that reached
    the server (`illegal_reached`, which through an ACL must be 0)."""

    kind: Literal["illegal"]
    measure: Literal["stream", "rr"] = "stream"
    """The allowed flow measured beside the denied traffic: a TCP stream or a TCP rr."""
    rate: Rate = None
    """Stream only."""
    message: Annotated[int, PlainValidator(bounded(parse_size, 1, 64 * 1024**2, "a size"))] = 131072
    """Bytes of each write of the measured stream."""
    denied_rate: FloodPps = 5000
    """Packets/s of denied traffic the attacker sends."""
    denied_ports: Annotated[str, PlainValidator(_denied_ports)] = DEFAULT_DENIED_PORTS
    """Must not include 9, 5201, 5300–5399 (ports an ACL permits)."""

    @model_validator(mode="after")
    def _rate_for_stream(self) -> IllegalWorkload:
        if self.measure == "rr" and self.rate is not None:
            raise ValueError('rate paces the stream; remove it with measure = "rr"')
        return self

    def default_name(self) -> str:
        return f"illegal-{self.measure}"


def counter_table(ctx: MeasureContext) -> str:
    return f"secperf_{ctx.testbed.prefix}_illegal"


def counter_rules(table: str, attacker_net: str, ports: str) -> str:
    """A table in the server that counts the denied flows' packets, per protocol.

    Recreated from scratch (add, delete, define) so that loading it twice is safe."""
    lines = [
        f"table inet {table} {{}}",
        f"delete table inet {table}",
        f"table inet {table} {{",
        *(f"  counter denied_{proto} {{}}" for proto in FLOWS),
        "  chain prerouting {",
        "    type filter hook prerouting priority raw; policy accept;",
        *(
            f'    ip saddr {attacker_net} {proto} dport {ports} counter name "denied_{proto}"'
            for proto in FLOWS
        ),
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def install_counters(ctx: MeasureContext, ports: str) -> None:
    if _INSTALLED.get(ctx.testbed.prefix) == ports:
        return
    net = str(ctx.topology.interface(ATTACKER, ATTACKER_LINK, 4).network)
    ctx.testbed.host(ctx.server).run(
        ["nft", "-f", "-"], input=counter_rules(counter_table(ctx), net, ports)
    )
    _INSTALLED[ctx.testbed.prefix] = ports


def read_counters(ctx: MeasureContext) -> dict[str, int]:
    """Packets counted so far per denied flow (cumulative)."""
    out = ctx.testbed.host(ctx.server).run(
        ["nft", "-j", "list", "counters", "table", "inet", counter_table(ctx)]
    )
    got: dict[str, int] = {}
    for item in json.loads(out.stdout).get("nftables", []):
        counter = item.get("counter")
        name = str(counter.get("name", "")) if isinstance(counter, dict) else ""
        if isinstance(counter, dict) and name.removeprefix("denied_") in FLOWS:
            got[name.removeprefix("denied_")] = int(counter.get("packets", 0))
    return got


def settled_counters(ctx: MeasureContext, deadline_s: float = 2.0) -> dict[str, int]:
    """The counters once packets still crossing the DUT have landed: two equal reads
    in a row, polled, within a deadline."""
    end = time.monotonic() + deadline_s
    last = read_counters(ctx)
    while time.monotonic() < end:
        time.sleep(0.05)  # poll interval, not a wait for an event
        now = read_counters(ctx)
        if now == last:
            return now
        last = now
    return last


def allowed_spec(ctx: MeasureContext, p: IllegalWorkload) -> Spec:
    """The allowed flow: a TCP stream (of `message`, paced by `rate`) or a TCP rr,
    as those kinds build their engine specs (secperf.workloads.parts.specs)."""
    flow: WorkloadSpec
    if p.measure == "rr":
        flow = specs.rr(duration=p.duration, warmup=p.warmup)
    else:
        flow = specs.stream(message=p.message, rate=p.rate, duration=p.duration, warmup=p.warmup)
    return engine_spec(flow, server=ctx.target)


def denied_specs(
    ctx: MeasureContext, p: IllegalWorkload, ports: str, seconds: float
) -> dict[str, Any]:
    """The two denied floods: UDP from the attacker itself, SYNs from unlisted sources."""
    rate = p.denied_rate
    return {
        "udp": flood_spec(ctx, flood="udp", rate_pps=rate, duration=seconds, ports=ports),
        "tcp": flood_spec(
            ctx,
            flood="syn",
            rate_pps=rate,
            duration=seconds,
            ports=ports,
            sources=unlisted_sources(ctx.topology),
        ),
    }


def require_sent(denied: dict[str, dict[str, Any]], workload: str) -> None:
    """A denied flood that sent nothing tested nothing: the round is not run (an
    EngineError with the reason), never a check that passed or failed."""
    unsent = [proto for proto, d in denied.items() if d["sent"] <= 0]
    if unsent:
        raise EngineError(
            f"the denied {' and '.join(unsent)} flood sent nothing: the round tested nothing",
            where=f"workload {workload}",
            fix="read the flood's records (side role denied-PROTO) for why; `secperf doctor` "
            "checks the attacker's raw sender",
        )


def illegal_checks(denied: dict[str, dict[str, Any]], *, applicable: bool) -> list[dict[str, Any]]:
    """The round's check: through a filter, no denied packet reached the server (every
    denied flood sent something: require_sent)."""
    total = sum(d["sent"] for d in denied.values())
    reached = sum(d["reached"] for d in denied.values())
    return [
        {
            "name": "no denied packet reached the server",
            "passed": reached == 0,
            "applicable": applicable,
            "detail": f"{reached} of {total} denied packets reached the server",
        },
    ]


def filters(ctx: MeasureContext) -> bool:
    """Does the variant have a mechanism whose job includes dropping what its policy
    does not permit (a kind with the trait "filters")?"""
    return any(m.kind in MECHANISMS and MECHANISMS.get(m.kind).filters for m, _ in ctx.mechanisms)


@dataclass(frozen=True)
class IllegalExecutor:
    """Kind `illegal`: the allowed flow, denied floods beside it, counted at the server."""

    def measure(self, ctx: MeasureContext, point: WorkloadPoint[IllegalWorkload]) -> Record:
        if ctx.family != 4:
            raise EngineError(
                "the illegal workload's denied floods are IPv4 only",
                where="testbed.family",
                fix='set family = "ipv4" in [testbed]',
            )
        p = point.spec
        ports = p.denied_ports
        install_counters(ctx, ports)
        spec = allowed_spec(ctx, p)
        seconds = spec["duration"] + spec["warmup"] + FLOOD_MARGIN_S
        before = read_counters(ctx)
        specs = denied_specs(ctx, p, ports, seconds)
        count = DeliveryCount(ctx, [specs[proto] for proto in FLOWS])
        count.start()
        floods = {proto: flood_beside(ctx, s, spec["warmup"]) for proto, s in specs.items()}
        try:
            allowed_run = EngineTest(ctx.testbed.host(ctx.client), spec).collect()
        except BaseException:
            for f in floods.values():
                f.stop()
            raise
        for f in floods.values():
            f.interrupt()
        allowed = allowed_run.result
        runs = {proto: f.collect() for proto, f in floods.items()}
        sent = {proto: run.result for proto, run in runs.items()}
        delivered = dict(zip(FLOWS, count.finish([sent[proto] for proto in FLOWS]), strict=True))
        window = measured_window(allowed_run.records, allowed)
        covers = {
            proto: coverage(flood_window(run.records, run.result), window)
            for proto, run in runs.items()
        }
        for proto, run in runs.items():
            side = keep_side(ctx, f"denied-{proto}")
            for frec in with_delivered(run, delivered[proto], coverage=covers[proto]):
                side(frec)
        after = settled_counters(ctx)
        ctx.keep({"type": "side", "role": "allowed", "record": allowed})
        for proto in FLOWS:
            require_covered(covers[proto], f"allowed flow beside the denied {proto} flood")
        denied = {
            proto: {
                "flood": specs[proto]["flood"],
                "ports": ports,
                "sources": specs[proto].get("sources") or "attacker",
                "asked_pps": specs[proto]["rate_pps"],
                "rate_pps": sent[proto].get("rate_pps"),
                "sent": int(sent[proto].get("packets") or 0),
                "reached": after.get(proto, 0) - before.get(proto, 0),
                # sent and received rates over the flood's window, DUT drops
                "delivered": delivered[proto],
            }
            for proto in FLOWS
        }
        require_sent(denied, p.name)
        total_sent = sum(d["sent"] for d in denied.values())
        reached = sum(d["reached"] for d in denied.values())
        checks = illegal_checks(denied, applicable=filters(ctx))
        rec: Record = {
            "type": "result",
            "kind": "illegal",
            "measure": spec["kind"],
            "bits_per_second": allowed.get("bits_per_second"),
            "transactions_per_second": allowed.get("transactions_per_second"),
            "retransmits": allowed.get("retransmits"),
            "machine_cpu": allowed.get("machine_cpu"),
            "illegal_sent": total_sent,
            # nothing sent, nothing counted: no figure rather than a 0
            "illegal_reached": reached if total_sent else None,
            "illegal_reached_pct": (100.0 * reached / total_sent) if total_sent else None,
            "denied": denied,
            "checks": checks,
            "passed": all(c["passed"] for c in checks if c["applicable"]),
        }
        ctx.keep(rec)
        return rec


ILLEGAL_REACHED = Metric(
    "illegal_reached", "Denied packets that reached the server", "packets", False, True
)
ILLEGAL_SENT = Metric("illegal_sent", "Denied packets sent", "packets", True, False)
ALLOWED_THROUGHPUT = Metric("allowed_throughput", "Allowed flow", "Mbit/s", True, False)
ALLOWED_TPS = Metric("allowed_tps", "Allowed flow", "trans/s", True, False)


def _allowed_tps(r: RecordView) -> float | None:
    return path(r, "transactions_per_second") if r.get("measure") == "rr" else None


def _allowed_mbps(r: RecordView) -> float | None:
    return throughput(r) if r.get("measure") == "stream" else None


METRICS: tuple[MetricRow, ...] = (
    # illegal_reached must be 0 through a filter; its check says so in the report
    (ILLEGAL_REACHED, field("illegal_reached")),
    (ALLOWED_THROUGHPUT, _allowed_mbps),
    (ALLOWED_TPS, _allowed_tps),
    (ILLEGAL_SENT, field("illegal_sent")),
)

KIND = WorkloadKind(
    name="illegal",
    model=IllegalWorkload,
    executor=IllegalExecutor(),
    metrics=METRICS,
    hosts=attacker,
    floods=always,
    checks=True,
)
