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

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from secperf.engine import Record
from secperf.errors import EngineError
from secperf.metric import (
    FAILURES,
    SD_CONN,
    Metric,
    MetricRow,
    busy_us_per,
    field,
    path,
    ratio_pct,
)
from secperf.schema.fields import PerSecond, Timeout
from secperf.workloads.base import (
    MeasureContext,
    Spec,
    WorkloadKind,
    WorkloadPoint,
    WorkloadSpec,
    always,
    attacker,
    engine_spec,
    scalar,
)
from secperf.workloads.parts.connections import Close, crr_summary, run_on_client
from secperf.workloads.parts.delivery import (
    DeliveryCount,
    coverage,
    flood_window,
    measured_window,
    require_covered,
)
from secperf.workloads.parts.flood import (
    FLOOD_MARGIN_S,
    FloodKind,
    Measured,
    SweptFloodPps,
    flood_spec,
    keep_side,
    started_flood,
    unlisted_sources,
    with_delivered,
)

# The crr's fixed server data port, so that the flood can aim at its listener (inside
# the engine's data range, which ACLs and the synproxy cover; failclosed uses 5399).
DOS_DATA_PORT = 5390


class DosWorkload(WorkloadSpec):
    """RFC 3511 §5.5: connections/s (crr paced at `rate`, failures counted) while a
    flood from the attacker runs; `reference` first measures the same without it.

    `flood_target = "measured"` aims the flood at the crr's own server port, from
    spoofed sources (`spoof`) no ACL lists; "allowed"/"denied" at ports 9/19."""

    sweepable: ClassVar[dict[str, str]] = {"flood_rate": "count"}
    # the measured part: a crr paced at `rate`
    engine_kind: ClassVar[str] = "crr"
    engine_fields: ClassVar[tuple[str, ...]] = (
        "rate",
        "parallel",
        "timeout",
        "request",
        "response",
        "duration",
        "warmup",
        "close",
    )

    kind: Literal["dos"]
    rate: PerSecond = 2000.0
    """New connections/s the client opens on a schedule while the flood runs."""
    parallel: int = Field(default=16, ge=1, le=128)
    """Connections under way at once at most."""
    timeout: Timeout = 1.0
    """Each connection's deadline; one past it counts as failed."""
    request: int = Field(default=1, ge=1, le=65536)
    """Bytes of each connection's request."""
    response: int = Field(default=1, ge=1, le=65536)
    """Bytes of each connection's response."""
    close: Close = "client-first"
    """`"server-first"`, `"client-first"` (`"fin"` reads as it), `"reset"` (as crr's)."""
    flood: FloodKind = "syn"
    """`"syn"`, `"udp"`, `"icmp"` (icmp needs `"allowed"`)."""
    flood_rate: SweptFloodPps = 20_000
    """The SYN flood's packets/s, 1000 … 10 000 000."""
    flood_target: Literal["measured", "allowed", "denied"] = "measured"
    """`measured`: the measured service's port; `allowed`: server port 9, which the ACLs permit;
    `denied`: port 19, which they drop (icmp needs `allowed`).
    """
    spoof: bool = True
    """Send the flood from random source addresses (as RFC 3511 §5.5), not the attacker's own."""
    reference: bool = True
    """Measure the connection rate without the flood too, in the same round, as the reference of
    the loss.
    """

    @model_validator(mode="after")
    def _icmp_has_no_port(self) -> DosWorkload:
        if self.flood == "icmp" and self.flood_target != "allowed":
            raise ValueError('an icmp flood has no port: set flood_target = "allowed"')
        return self

    def default_name(self) -> str:
        return f"dos-{self.flood}"


def half_open(ctx: MeasureContext) -> int:
    """TCP sockets in SYN-RECV in the server: half-open connections it holds."""
    out = ctx.testbed.host(ctx.server).run(["ss", "-Htn", "state", "syn-recv"]).stdout
    return sum(1 for line in out.splitlines() if line.strip())


def dos_flood_spec(ctx: MeasureContext, p: DosWorkload, seconds: float) -> Spec:
    target = p.flood_target
    return flood_spec(
        ctx,
        flood=p.flood,
        rate_pps=scalar(p.flood_rate),
        duration=seconds,
        target="allowed" if target == "measured" else target,
        ports=str(DOS_DATA_PORT) if target == "measured" else None,
        sources=unlisted_sources(ctx.topology) if p.spoof else None,
    )


@dataclass(frozen=True)
class DosExecutor:
    """Kind `dos`: paced crr while a (SYN) flood runs from the attacker."""

    def measure(self, ctx: MeasureContext, point: WorkloadPoint[DosWorkload]) -> Record:
        p = point.spec
        spec = engine_spec(p, server=ctx.target, interval=0, data_port=DOS_DATA_PORT)
        reference: dict[str, Any] | None = None
        if p.reference:
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
                "target": p.flood_target,
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


DOS_CPS = Metric("dos_cps", "Connection rate under flood", "conn/s", True, True)
DOS_REF_CPS = Metric("dos_cps_unflooded", "Connection rate without flood", "conn/s", True, False)
DOS_HALF_OPEN = Metric("server_half_open", "Half-open at the server", "conn", False, False)
DOS_FLOOD_PPS = Metric("dos_flood_pps", "Flood rate sent", "packets/s", True, False)
# What of the SYN flood reached the server; fewer is better (the DUT shields it).
DOS_FLOOD_RX = Metric(
    "dos_flood_received_pps", "Flood rate reaching the server", "packets/s", False, False
)
DOS_FLOOD_DROP = Metric("dos_flood_drop_pct", "Flood stopped at the DUT", "%", True, False)

METRICS: tuple[MetricRow, ...] = (
    (DOS_CPS, field("rate")),
    (FAILURES, ratio_pct),
    (DOS_REF_CPS, field("unflooded", "rate")),
    (DOS_HALF_OPEN, field("server_half_open")),
    (DOS_FLOOD_PPS, field("flood", "rate_pps")),
    (DOS_FLOOD_RX, field("flood", "delivered", "received_pps")),
    (DOS_FLOOD_DROP, field("flood", "delivered", "dut_drop_pct")),
    (SD_CONN, lambda r: busy_us_per(r, path(r, "completed"))),
)

KIND = WorkloadKind(
    name="dos",
    model=DosWorkload,
    executor=DosExecutor(),
    metrics=METRICS,
    work_unit=("conn", field("completed")),
    hosts=attacker,
    floods=always,
)
