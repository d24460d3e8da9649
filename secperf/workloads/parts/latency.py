"""Timestamped UDP probes, as the `latency` kind and rfc2544's latency test send them:
the latency kind's model (`LatencyWorkload`), its engine spec and its executor. The
kind (secperf.workloads.latency) declares itself with them; rfc2544 builds a point of
this model at the rate its search found and measures it with `LatencyExecutor`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from pydantic import Field, PlainValidator, model_validator

from secperf.engine import EngineTest, Record
from secperf.errors import SecperfError
from secperf.schema.fields import bounded, one_or_sweep
from secperf.schema.units import parse_size
from secperf.workloads.base import (
    MeasureContext,
    Spec,
    WorkloadPoint,
    WorkloadSpec,
    engine_spec,
    scalar,
)
from secperf.workloads.parts.sources import peers_spec

PREAMBLE_IFG = 20  # bytes on the wire around each Ethernet frame
# Under load (sender = "packet"): one frame in this many is a timestamped probe.
PROBE_EVERY = 100


class LatencyWorkloadError(SecperfError):
    """A latency workload that cannot run on this testbed."""


FrameSize = Annotated[
    int | list[int], PlainValidator(one_or_sweep(bounded(parse_size, 64, 1518, "a frame size")))
]


def _positive_rate(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number of frames per second, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"a rate must be a finite number of frames per second, not {value}")
    return float(value)


# Frames (or probes) per second each way; a list sweeps the offered load (where a
# mechanism starts to lose, e.g. an inline IPS).
RatePps = Annotated[
    float | list[float],
    PlainValidator(one_or_sweep(bounded(_positive_rate, 1, 10_000_000, "a rate (frames/s)"))),
]


class LatencyWorkload(WorkloadSpec):
    """Timestamped UDP probes at a fixed rate: one-way delay per direction (document 004).

    `load` is a fraction of `testbed.link_rate` counted on the wire (frame + 20 B
    preamble and inter-frame gap); `rate_pps` gives probes/s per direction instead
    (a list sweeps the offered load).
    `hosts = "all"` sends from every emulated host on the client side to its peer on
    the server side; an int uses that many. `rejected_stream` runs a second stream at
    the same rate from the ACL's excluded address concurrently (the ACL must have
    `exclude_one = true`); its received count is reported and must be 0.
    `sender = "packet"` sends the whole stream (`load` or `rate_pps` frames/s each
    way) as frames on a packet socket, spread over the emulated hosts, with one frame
    in `probe_every` (default 100) a timestamped probe: the delay under the load
    itself, and the achieved load in the record (IPv4, full duplex only).
    """

    sweepable: ClassVar[dict[str, str]] = {"frame": "size", "rate_pps": "count"}
    engine_fields: ClassVar[tuple[str, ...]] = ("frame", "duplex", "duration", "warmup")
    engine_names: ClassVar[dict[str, str]] = {"frame": "frame_size"}

    kind: Literal["latency"]
    frame: FrameSize = 64
    """64 … 1518 B, the Ethernet frame on the wire."""
    load: float | None = Field(default=None, gt=0, le=1)
    """0 < load ≤ 1 of `testbed.link_rate` (needs a link rate), counting 20 B of preamble and gap
    per frame.
    """
    rate_pps: RatePps | None = None
    """Probes/s per direction (with `sender = "packet"`, frames/s), instead of `load`;  (a sweep of
    the offered load).
    """
    duplex: Literal["full", "half"] = "full"
    """`"full"` (both directions at once), `"half"` (the server answers each probe)."""
    hosts: Literal["all"] | Annotated[int, Field(ge=1, le=200)] = "all"
    """The emulated hosts to spread over (1 … 200), paired client-side i ↔ server-side i."""
    rejected_stream: bool = False
    """A second stream at the same rate from the ACL's excluded host (`exclude_one = true`) runs
    beside; its received count is reported and must be 0.
    """
    sender: Literal["socket", "packet"] = "socket"
    """`"socket"`: every frame is a probe sent on a UDP socket; `"packet"`: latency under load,
    below.
    """
    probe_every: int | None = Field(default=None, ge=1, le=1_000_000)
    """One frame in this many is a timestamped probe (`sender = "packet"` only)."""

    @model_validator(mode="after")
    def _one_rate(self) -> LatencyWorkload:
        if self.load is not None and self.rate_pps is not None:
            raise ValueError("give either load (a fraction of the link rate) or rate_pps, not both")
        if self.probe_every is not None and self.sender != "packet":
            raise ValueError(
                'probe_every applies to sender = "packet" only: set sender or remove it'
            )
        if self.sender == "packet" and self.duplex == "half":
            raise ValueError('sender = "packet" runs full duplex: set duplex = "full" or remove it')
        return self

    def default_name(self) -> str:
        return f"latency-{self.duplex}"


def pps_for_load(load: float, link_rate_bps: int, frame: int) -> float:
    """Frames/s per direction that fill `load` of the link, counting preamble and gap."""
    return load * link_rate_bps / ((frame + PREAMBLE_IFG) * 8)


def probe_rate(spec: LatencyWorkload, link_rate_bps: int | None) -> float | None:
    """Probes (or frames) per second per direction: `rate_pps`, or `load` of the link;
    None: the engine's default."""
    if spec.rate_pps is not None:
        return float(scalar(spec.rate_pps))
    if spec.load is None:
        return None
    if not link_rate_bps:
        raise LatencyWorkloadError(
            "load is a fraction of the link rate, but the testbed has no link_rate",
            where="testbed.link_rate",
            fix='set testbed.link_rate (e.g. "1gbit") or give the workload rate_pps',
        )
    return pps_for_load(spec.load, link_rate_bps, scalar(spec.frame))


def latency_spec(spec: LatencyWorkload, *, link_rate_bps: int | None = None) -> Spec:
    """The engine spec for one point (without server, sources and destinations)."""
    extra: Spec = {}
    rate = probe_rate(spec, link_rate_bps)
    if rate is not None:
        extra["rate_pps"] = rate
    if spec.sender == "packet":
        extra["probe_every"] = spec.probe_every or PROBE_EVERY
    return engine_spec(spec, interval=0, **extra)


@dataclass(frozen=True)
class LatencyExecutor:
    def specs(self, ctx: MeasureContext, p: LatencyWorkload) -> tuple[Spec, Spec | None]:
        """The measured stream's spec and, if asked, the rejected stream's."""
        link_rate = ctx.topology.links[0].rate_bps if ctx.topology.links else None
        spec = latency_spec(p, link_rate_bps=link_rate)
        spec["server"] = ctx.target
        sources = list(ctx.topology.emulated_addresses("client", ctx.family))
        dests = list(ctx.topology.emulated_addresses("server", ctx.family))
        rejected = ctx.plan.excluded_host if p.rejected_stream else None
        if p.rejected_stream and rejected is None:
            raise LatencyWorkloadError(
                "rejected_stream needs emulated hosts on the client side",
                where="testbed.emulated_hosts",
                fix="set testbed.emulated_hosts to 2 or more",
            )
        if rejected in sources:
            sources.remove(rejected)
        # A direct baseline has no emulated hosts on its link: client to server as is.
        if sources and dests and not ctx.direct:
            available = min(len(sources), len(dests))
            n = available if p.hosts == "all" else min(p.hosts, available)
            spec["sources"] = sources[:n]
            spec["destinations"] = dests[:n]
        # What a NAT makes of the sources, for the server to serve them.
        spec.update(peers_spec(ctx))
        if rejected is None or ctx.direct:
            return spec, None
        other = dict(spec)
        other["sources"] = [rejected]
        other["destinations"] = spec.get("destinations", [])[:1]
        if not other["destinations"]:
            del other["destinations"]
        return spec, other

    def measure(self, ctx: MeasureContext, point: WorkloadPoint[LatencyWorkload]) -> Record:
        spec, other = self.specs(ctx, point.spec)
        client = ctx.testbed.host(ctx.client)
        side = EngineTest(client, other) if other is not None else None

        def keep_but_result(rec: Record) -> None:
            if rec.get("type") != "result":
                ctx.keep(rec)

        try:
            result = EngineTest(client, spec).collect(keep_but_result).result
        finally:
            side_run = side.collect() if side is not None else None
        if side_run is not None:
            r = side_run.result
            c2s = r.get("c2s", {})
            # Under load: the rejected stream's frames, not only its probes.
            c2s = c2s.get("load") or c2s
            result = {
                **result,
                "rejected_stream": {
                    "source": other["sources"][0] if other else None,
                    "sent": c2s.get("sent"),
                    "received": c2s.get("received"),
                },
            }
        # Kept once, with the rejected stream's counts when there is one.
        ctx.keep(result)
        return result
