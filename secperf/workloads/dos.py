"""RFC 3511 §5.5 denial-of-service handling: the connection setup rate while a SYN
flood from spoofed sources runs (kind `dos`).

The measured part is crr at a paced `rate` with a per-connection `timeout` (failures
counted, never fatal), not a §5.3-style search: one offered rate gives two clear
figures per round (the rate achieved and the share that failed), comparable across
variants, in a fixed time; a search under a flood would need a flood per trial and
its answer moves in steps of the search's resolution.

The flood (engine kind `flood`, from the attacker) goes by default to the crr's own
data port (`flood_target = "measured"`, the server's listener the measured
connections use, so it competes for that backlog), from the upper half of the
attacker's link (`spoof`), addresses nobody answers for: the server's SYN-ACKs to them
die at the DUT's ARP and the half-open connections stay, as in a real SYN flood.
Right after the crr ends the server's SYN-RECV sockets are counted (`server_half_open`),
which shows where the flood was absorbed: at the server, or at a DUT that proxies
SYNs (mechanism `synproxy`) or drops them (an ACL that does not permit the attacker).
With `reference` the same crr first runs without a flood, in the same round.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from typing import Any

from secperf.engine import Record
from secperf.errors import EngineError
from secperf.scenario.sweep import WorkloadPoint
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.connections import crr_spec, crr_summary, run_on_client
from secperf.workloads.delivery import (
    DeliveryCount,
    coverage,
    flood_window,
    measured_window,
    require_covered,
)
from secperf.workloads.flood import (
    ATTACKER,
    FLOOD_MARGIN_S,
    Measured,
    flood_spec,
    keep_side,
    started_flood,
    with_delivered,
)

# The crr's fixed server data port, so that the flood can aim at its listener (inside
# the engine's data range, which ACLs and the synproxy cover; failclosed uses 5399).
DOS_DATA_PORT = 5390
ATTACKER_LINK = "attacker-dut"


def unlisted_sources(topology: Topology) -> str:
    """Spoofed flood sources: the upper half of the attacker's link. No host answers
    ARP for them and no ACL permit lists them."""
    net = topology.interface(ATTACKER, ATTACKER_LINK, 4).network
    assert isinstance(net, ipaddress.IPv4Network)
    upper = list(net.subnets(prefixlen_diff=1))[-1]
    return str(upper)


def half_open(ctx: MeasureContext) -> int:
    """TCP sockets in SYN-RECV in the server: half-open connections it holds."""
    out = ctx.testbed.host(ctx.server).run(["ss", "-Htn", "state", "syn-recv"]).stdout
    return sum(1 for line in out.splitlines() if line.strip())


def dos_flood_spec(ctx: MeasureContext, p: dict[str, Any], seconds: float) -> dict[str, Any]:
    target = str(p.get("flood_target") or "measured")
    flood = str(p.get("flood") or "syn")
    return flood_spec(
        ctx,
        flood=flood,
        rate_pps=int(str(p.get("flood_rate") or 20000)),
        duration=seconds,
        target="allowed" if target == "measured" else target,
        ports=str(DOS_DATA_PORT) if target == "measured" else None,
        sources=unlisted_sources(ctx.topology) if p.get("spoof", True) else None,
    )


@dataclass(frozen=True)
class DosExecutor:
    """Kind `dos`: paced crr while a (SYN) flood runs from the attacker."""

    hosts: frozenset[str] = frozenset({ATTACKER})

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        p = dict(point.params)
        rate = 2000.0 if p.get("rate") is None else float(str(p["rate"]))
        spec = crr_spec(ctx.target, p, rate, data_port=DOS_DATA_PORT)
        reference: dict[str, Any] | None = None
        if p.get("reference", True):
            ref = run_on_client(ctx, spec, keep_all=False)
            ctx.keep({"type": "side", "role": "unflooded", "record": ref})
            reference = crr_summary(ref)
        fspec = dos_flood_spec(ctx, p, spec["duration"] + spec["warmup"] + FLOOD_MARGIN_S)
        count = DeliveryCount(ctx, [fspec])
        count.start()
        # The crr's records, for the coverage check only (kept nested below).
        seen = Measured(lambda _rec: None)
        flood = started_flood(ctx, fspec)
        try:
            flooded = run_on_client(replace(ctx, keep=seen), spec, keep_all=True)
            held = half_open(ctx)
        except BaseException:
            flood.stop()
            raise
        flood.interrupt()
        frun = flood.collect()
        fres = frun.result
        (delivered,) = count.finish([fres])
        cov = coverage(flood_window(frun.records, fres), measured_window(seen.records, flooded))
        side = keep_side(ctx, "flood")
        for frec in with_delivered(frun, delivered, coverage=cov):
            side(frec)
        ctx.keep({"type": "side", "role": "flooded", "record": flooded})
        require_covered(cov, "crr under the flood")
        under = crr_summary(flooded)
        rec: Record = {
            "type": "result",
            "kind": "dos",
            "offered_rate": spec["rate"],
            "close": spec["close"],
            **under,
            "transactions_per_second": under["rate"],
            "machine_cpu": flooded.get("machine_cpu"),
            "server_half_open": held,
            "unflooded": reference,
            "flood": {
                "flood": fspec["flood"],
                "target": str(p.get("flood_target") or "measured"),
                "ports": fspec.get("ports"),
                "sources": fspec.get("sources"),
                "asked_pps": fspec["rate_pps"],
                "rate_pps": fres.get("rate_pps"),
                "packets": fres.get("packets"),
                "send_errors": fres.get("send_errors"),
                # what reached the server and what the DUT dropped, over the flood
                "delivered": delivered,
                "coverage": cov,
            },
        }
        if under["completed"] == 0 and under["failed"] == 0:
            raise EngineError(
                "the crr under the flood attempted no connection",
                fix=f"check that the DUT's rules permit TCP to the server's port {DOS_DATA_PORT} "
                "(the crr's data port) and that the engine server runs (secperf doctor)",
            )
        ctx.keep(rec)
        return rec
