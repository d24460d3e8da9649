"""Kind `flood`: a flood alone, from the attacker towards the server, measured at its
sender and where it landed. The flood machinery the kinds share (its keys, its spec,
a flood beside a measured test) is secperf.workloads.parts.flood.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from pydantic import Field, PlainValidator, field_validator

from secperf.engine import Record
from secperf.metric import Metric, MetricRow, busy_us_per, field, path
from secperf.metric import Record as RecordView
from secperf.schema.fields import one_or_sweep
from secperf.workloads.base import (
    MeasureContext,
    WorkloadKind,
    WorkloadPoint,
    WorkloadSpec,
    always,
    attacker,
    scalar,
)
from secperf.workloads.parts.delivery import (
    DeliveryCount,
)
from secperf.workloads.parts.flood import (
    FloodKind,
    FloodTarget,
    SweptFloodPps,
    flood_spec,
    parse_flood_payload,
    start_flood,
    with_delivered,
)


class FloodWorkload(WorkloadSpec):
    """A flood alone, from the attacker towards the server: how exactly it is paced."""

    sweepable: ClassVar[dict[str, str]] = {"rate": "count", "payload_size": "size"}

    kind: Literal["flood"]
    flood: FloodKind = "udp"
    """The flood's packets: UDP datagrams, TCP SYNs or ICMP echo requests."""
    rate: SweptFloodPps = 10_000
    """Packets/s the attacker sends, 1000 … 10 000 000."""
    count: int | None = Field(default=None, ge=1)
    """Packets to send in all; unset: rate × duration."""
    payload_size: Annotated[
        int | list[int] | None,
        PlainValidator(one_or_sweep(parse_flood_payload)),
    ] = None
    """Payload bytes of each packet, 0 … 1472; unset: 18 B (udp, icmp), 0 (syn)."""
    flood_target: FloodTarget = "allowed"
    """`allowed`: server port 9, which the ACLs permit; `denied`: port 19, which they drop (udp and
    syn only).
    """
    sources: str | None = None  # an IPv4 CIDR in 198.18.0.0/15; default the attacker's address
    """Inside 198.18.0.0/15."""

    @field_validator("sources")
    @classmethod
    def _sources_in_testbed(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            net = ipaddress.IPv4Network(value, strict=False)
        except ValueError as exc:
            raise ValueError(
                f"sources must be an IPv4 CIDR such as 198.18.4.0/24 ({exc})"
            ) from None
        if not net.subnet_of(ipaddress.IPv4Network("198.18.0.0/15")):
            raise ValueError(f"sources {value} is outside the testbed range 198.18.0.0/15")
        return str(net)

    def default_name(self) -> str:
        return f"{self.flood}-flood"


@dataclass(frozen=True)
class FloodExecutor:
    """Kind `flood`: a flood alone, measured at its sender (achieved rate, error) and
    where it landed (`delivered`: reached the target, dropped by the DUT)."""

    def measure(self, ctx: MeasureContext, point: WorkloadPoint[FloodWorkload]) -> Record:
        p = point.spec
        spec = flood_spec(
            ctx,
            flood=p.flood,
            rate_pps=scalar(p.rate),
            duration=p.duration,
            target=p.flood_target,
            payload_size=scalar(p.payload_size),
            count=p.count,
            sources=p.sources,
        )
        count = DeliveryCount(ctx, [spec])
        count.start()
        run = start_flood(ctx, spec).collect()
        (delivered,) = count.finish([run.result])
        records = with_delivered(run, delivered)
        for rec in records:
            ctx.keep(rec)
        return {**run.result, "delivered": delivered}


# ---- what a flood's record yields

# A flood's primary figure is what reached the target (an nft counter in the server),
# not what the sender sent: a paced sender sends the asked rate whatever the DUT does.
FLOOD_RX = Metric("flood_received_pps", "Flood rate reaching the target", "packets/s", True, True)
FLOOD_PPS = Metric("flood_pps", "Flood rate sent", "packets/s", True, False)
FLOOD_DROP = Metric("flood_dut_drop_pct", "Flood dropped by the DUT", "%", False, False)
FLOOD_ERR = Metric("flood_rate_error_pct", "Flood rate error", "%", False, False)
FLOOD_SD = Metric("sd_cpu_us_per_packet", "Service demand", "CPU µs/packet", False, False)
# A SYN flood: what the target answered its sources with (document 002's explanation).
TARGET_RST = Metric("target_rst_pps", "Target's RSTs back to the flood", "packets/s", False, False)
TARGET_SYNACK = Metric(
    "target_synack_pps", "Target's SYN-ACKs back to the flood", "packets/s", False, False
)


def _answers_pps(which: str) -> Callable[[RecordView], float | None]:
    def get(r: RecordView) -> float | None:
        n, window = (
            path(r, "delivered", "target_answers", which),
            path(r, "delivered", "window_s"),
        )
        return None if n is None or not window else n / window

    return get


def _abs_error(r: RecordView) -> float | None:
    err = path(r, "rate_error_pct")
    return None if err is None else abs(err)


METRICS: tuple[MetricRow, ...] = (
    (FLOOD_RX, field("delivered", "received_pps")),
    (FLOOD_PPS, field("rate_pps")),
    (FLOOD_DROP, field("delivered", "dut_drop_pct")),
    (FLOOD_ERR, _abs_error),
    (FLOOD_SD, lambda r: busy_us_per(r, path(r, "packets"))),
    (TARGET_RST, _answers_pps("rst")),
    (TARGET_SYNACK, _answers_pps("synack")),
)

KIND = WorkloadKind(
    name="flood",
    model=FloodWorkload,
    executor=FloodExecutor(),
    metrics=METRICS,
    work_unit=("packet", field("packets")),
    hosts=attacker,
    floods=always,
)
