"""A flood from the attacker while a stream, rr or crr is measured (document 002's
"bandwidth during a flood"): the keys those kinds share, and their executor wrapper.

`Beside` wraps a kind's executor: with `flood` and a non-zero `flood_rate` the flood
runs while the inner executor measures (secperf.workloads.parts.flood.run_beside); the
measured result is returned (and kept) with a `flood` summary, the flood's own
records nested (`{"type": "side", "role": "flood", ...}`). A point with no flood
runs as the inner executor alone, and its record leaves the flood keys out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import model_validator

from secperf.engine import Record
from secperf.metric import Metric, MetricRow, field
from secperf.schema.fields import StrictModel
from secperf.workloads.base import (
    ATTACKER,
    Executor,
    MeasureContext,
    WorkloadPoint,
    WorkloadSpec,
    scalar,
)
from secperf.workloads.parts.flood import (
    FloodKind,
    FloodPayload,
    FloodRate,
    FloodTarget,
    run_beside,
)

FLOOD_KEYS = frozenset({"flood", "flood_rate", "flood_target", "flood_payload"})


class FloodBeside(StrictModel):
    """A flood from the attacker host while the workload is measured (document 002).

    `flood_target = "denied"` aims it at a port the DUT's ACL drops."""

    # its heading in the generated docs/scenario-format.md
    part_title: ClassVar[str] = "A flood beside the measured flow (document 002)"

    flood: FloodKind | None = None
    """The flood sent from the attacker during each test of the measured flow; unset: none."""
    flood_rate: FloodRate = 0
    """The flood's packets/s; 0 = no flood."""
    flood_target: FloodTarget = "allowed"
    """`"allowed"` (server port 9, which the ACL permits), `"denied"` (port 19, which it drops;
    udp/syn only).
    """
    flood_payload: FloodPayload = None
    """Payload bytes of each flood packet; unset: the engine's 18 B (64-byte frames)."""

    def unrecorded(self) -> frozenset[str]:
        """Without a flood, a point's record has no flood keys."""
        return FLOOD_KEYS if self.flood is None else frozenset()

    def flood_rates(self) -> list[int]:
        return self.flood_rate if isinstance(self.flood_rate, list) else [self.flood_rate]

    @model_validator(mode="after")
    def _flood_needs_rate(self) -> FloodBeside:
        if self.flood is None and any(self.flood_rates()):
            raise ValueError('flood_rate needs flood = "udp", "syn" or "icmp"')
        if self.flood == "icmp" and self.flood_target == "denied":
            raise ValueError(
                'flood_target = "denied" needs a udp or syn flood (the ACL denies by port)'
            )
        return self


def floods(spec: FloodBeside) -> bool:
    """Does the workload send a flood beside it (at some point of its sweep)?"""
    return spec.flood is not None and any(spec.flood_rates())


def hosts(spec: FloodBeside) -> frozenset[str]:
    """The attacker, for a point with a flood beside it."""
    needs = spec.flood is not None and scalar(spec.flood_rate) > 0
    return frozenset({ATTACKER}) if needs else frozenset()


@dataclass(frozen=True)
class Beside:
    """`inner` measures the point; with a flood asked, while the flood runs."""

    inner: Executor[Any]

    def measure(self, ctx: MeasureContext, point: WorkloadPoint[WorkloadSpec]) -> Record:
        spec = point.spec
        assert isinstance(spec, FloodBeside)
        rate = scalar(spec.flood_rate)
        if spec.flood is None or rate <= 0:
            return self.inner.measure(ctx, point)
        # The measured record says what it was measured under: run_beside keeps it
        # with a `flood` summary (asked, sent and delivered rates, DUT drops).
        result, _ = run_beside(
            ctx,
            self.inner,
            point,
            flood=spec.flood,
            rate=rate,
            target=spec.flood_target,
            payload=spec.flood_payload,
        )
        return result


# The measured record beside a flood (its `flood`, kept only when the flood covered
# the measured window): what of the flood reached the target.
BESIDE_RX = Metric(
    "flood_beside_received_pps", "Flood beside: reaching the target", "packets/s", True, False
)
BESIDE_DROP = Metric("flood_beside_drop_pct", "Flood beside: dropped by the DUT", "%", False, False)
METRICS: tuple[MetricRow, ...] = (
    (BESIDE_RX, field("flood", "received_pps")),
    (BESIDE_DROP, field("flood", "dut_drop_pct")),
)


def timed_alone(spec: FloodBeside) -> bool:
    """A rate over `duration` with no flood beside it: the noise calibration may plan
    its duration (WorkloadKind.calibrates)."""
    return not floods(spec)
