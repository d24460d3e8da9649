"""One-way delay with timestamped UDP probes (document 004's router delay study).

The engine sends probes at a fixed rate per direction, full duplex (both ways at
once) or half (the server answers each probe), from the client's emulated hosts to
the server's, paired i↔i, and reports the delay per direction from kernel software
timestamps. `load` (a fraction of the link rate) becomes probes/s as the paper's
generator counts it: each frame plus 20 B of preamble and inter-frame gap.

With `rejected_stream`, a second stream at the same rate runs at the same time from
the address an `exclude_one` ACL denies; the measured stream's record carries the
rejected stream's counts under `rejected_stream` (its `received` must be 0).

With `sender = "packet"` the engine sends the whole stream (the asked frames/s each
way, 64-byte frames by default) on a packet socket over the emulated hosts, one frame
in `probe_every` a timestamped probe (the way MoonGen interleaves its timestamped
packets into the load); each direction's record gains `load` (frames sent and
received, achieved frames/s).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from secperf.engine import EngineTest, Record
from secperf.errors import SecperfError
from secperf.scenario.sweep import WorkloadPoint
from secperf.workloads.base import MeasureContext
from secperf.workloads.common import Spec

PREAMBLE_IFG = 20  # bytes on the wire around each Ethernet frame
# Under load (sender = "packet"): one frame in this many is a timestamped probe.
PROBE_EVERY = 100


class LatencyWorkloadError(SecperfError):
    """A latency workload that cannot run on this testbed."""


def pps_for_load(load: float, link_rate_bps: int, frame: int) -> float:
    """Frames/s per direction that fill `load` of the link, counting preamble and gap."""
    return load * link_rate_bps / ((frame + PREAMBLE_IFG) * 8)


def engine_spec(params: Mapping[str, Any], *, link_rate_bps: int | None = None) -> Spec:
    """The engine spec for one point (without server, sources and destinations)."""
    frame = int(str(params.get("frame") or 64))
    spec: Spec = {"kind": "latency", "frame_size": frame}
    load, rate = params.get("load"), params.get("rate_pps")
    if rate is not None:
        spec["rate_pps"] = float(str(rate))
    elif load is not None:
        if not link_rate_bps:
            raise LatencyWorkloadError(
                "load is a fraction of the link rate, but the testbed has no link_rate",
                where="testbed.link_rate",
                fix='set testbed.link_rate (e.g. "1gbit") or give the workload rate_pps',
            )
        spec["rate_pps"] = pps_for_load(float(str(load)), link_rate_bps, frame)
    if params.get("duplex") is not None:
        spec["duplex"] = params["duplex"]
    if params.get("sender") == "packet":
        spec["probe_every"] = int(str(params.get("probe_every") or PROBE_EVERY))
    return spec


def _hosts(params: Mapping[str, Any], available: int) -> int:
    hosts = params.get("hosts", "all")
    return available if hosts in (None, "all") else min(int(str(hosts)), available)


@dataclass(frozen=True)
class LatencyExecutor:
    hosts: frozenset[str] = frozenset()

    def specs(self, ctx: MeasureContext, params: Mapping[str, Any]) -> tuple[Spec, Spec | None]:
        """The measured stream's spec and, if asked, the rejected stream's."""
        link_rate = ctx.topology.links[0].rate_bps if ctx.topology.links else None
        spec = engine_spec(params, link_rate_bps=link_rate)
        spec["server"] = ctx.target
        for key in ("duration", "warmup"):
            if params.get(key) is not None:
                spec[key] = float(str(params[key]))
        spec["interval"] = 0
        sources = list(ctx.topology.emulated_addresses("client", ctx.family))
        dests = list(ctx.topology.emulated_addresses("server", ctx.family))
        rejected = ctx.plan.excluded_host if params.get("rejected_stream") else None
        if params.get("rejected_stream") and rejected is None:
            raise LatencyWorkloadError(
                "rejected_stream needs emulated hosts on the client side",
                where="testbed.emulated_hosts",
                fix="set testbed.emulated_hosts to 2 or more",
            )
        if rejected in sources:
            sources.remove(rejected)
        # A direct baseline has no emulated hosts on its link: client to server as is.
        if sources and dests and not ctx.direct:
            n = _hosts(params, min(len(sources), len(dests)))
            spec["sources"] = sources[:n]
            spec["destinations"] = dests[:n]
        if rejected is None or ctx.direct:
            return spec, None
        other = dict(spec)
        other["sources"] = [rejected]
        other["destinations"] = spec.get("destinations", [])[:1]
        if not other["destinations"]:
            del other["destinations"]
        return spec, other

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        spec, other = self.specs(ctx, dict(point.params))
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
