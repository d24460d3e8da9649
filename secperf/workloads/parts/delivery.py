"""What a flood delivered, not only what it sent, and whether it covered the measured window.

A paced sender reports the rate it was asked for by construction, whatever the DUT
does with the packets. So every flood is also counted where it lands:

- at the target: an nft counter in the server namespace (prerouting, raw priority:
  before conntrack and the server's stack) per flood, matching its source addresses,
  protocol and destination ports (the attacker's traffic is never NATed: NAT rules
  cover the client's net only);
- at the DUT: its attacker-facing interface's rx packets (what the DUT took in; the
  attacker link carries nothing but the attacker's traffic) and drop counters on
  both DUT interfaces and on the attacker's end (a veth counts a packet its peer's
  input queue refused as the sender's tx_dropped).

The counters are read just before the flood starts and after it has ended and the
target's counter has settled, so every packet counted belongs to the flood's own
window (the engine's `start` clock to `duration_s` later). `dut_dropped` is what
was sent and never reached the target; the path is the attacker's veth, the DUT and
the server's veth, so it is the DUT's loss: `not_taken_in` (refused at the DUT's
input queue: its CPU did not keep up) plus `dropped_inside` (taken in, never
forwarded to the target: rules, conntrack, a full output queue).

A flood beside a measured test must cover the measured window: it starts first
(secperf.workloads.parts.flood.flood_beside) and is stopped after the measured test;
`coverage` compares the two engine processes' CLOCK_MONOTONIC stamps (one clock
for every namespace) and a flood that did not cover the window fails the point
(`require_covered`).
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from secperf.engine import Record
from secperf.errors import EngineError
from secperf.workloads.base import ATTACKER, MeasureContext, Spec

ATTACKER_LINK = "attacker-dut"
SERVER_LINK = "dut-server"
SETTLE_S = 2.0  # at most this long for the last flood packets to land at the target


@dataclass(frozen=True)
class FloodMatch:
    """What tells one flood's packets apart at the target."""

    proto: str  # "udp", "tcp" (SYN floods) or "icmp"
    sources: str  # an address or CIDR
    ports: str | None  # "9" or "10-1023"; None for ICMP

    def nft(self) -> str:
        """The nft match (without the counter)."""
        l4 = (
            "icmp type echo-request" if self.proto == "icmp" else f"{self.proto} dport {self.ports}"
        )
        return f"ip saddr {self.sources} {l4}"


def flood_match(ctx: MeasureContext, spec: Mapping[str, Any]) -> FloodMatch:
    """The match for a flood spec (secperf.workloads.parts.flood.flood_spec)."""
    flood = str(spec["flood"])
    proto = {"udp": "udp", "syn": "tcp", "icmp": "icmp"}.get(flood)
    if proto is None:
        raise EngineError(f"no delivery count for flood {flood!r}", fix="use udp, syn or icmp")
    sources = spec.get("sources")
    if sources is None:
        sources = str(ctx.topology.interface(ATTACKER, ATTACKER_LINK, 4).ip)
    else:
        sources = str(ipaddress.ip_network(str(sources), strict=False))
    ports = None if proto == "icmp" else str(spec["ports"])
    return FloodMatch(proto, sources, ports)


def counter_table(ctx: MeasureContext) -> str:
    return f"secperf_{ctx.testbed.prefix}_flood"


def counter_rules(table: str, matches: Sequence[FloodMatch]) -> str:
    """A table in the server with one named counter per flood (recreated from scratch:
    add, delete, define, so loading it again resets it)."""
    lines = [
        f"table inet {table} {{}}",
        f"delete table inet {table}",
        f"table inet {table} {{",
        *(f"  counter flood_{i} {{}}" for i in range(len(matches))),
        "  chain prerouting {",
        "    type filter hook prerouting priority raw; policy accept;",
        *(f'    {m.nft()} counter name "flood_{i}"' for i, m in enumerate(matches)),
        "  }",
        *_response_rules(matches),
        "}",
    ]
    return "\n".join(lines) + "\n"


def _response_rules(matches: Sequence[FloodMatch]) -> list[str]:
    """For SYN floods: counters of the target's own TCP answers to the flood's sources
    (SYN-ACKs from a listening port, RSTs from a closed one), in its output hook. They
    explain what an allowed flood costs a target beyond the packets (document 002)."""
    i_syn = [i for i, m in enumerate(matches) if m.proto == "tcp"]
    if not i_syn:
        return []
    out = ["  chain output {", "    type filter hook output priority raw; policy accept;"]
    decls = []
    for i in i_syn:
        m = matches[i]
        decls += [f"  counter synack_{i} {{}}", f"  counter rst_{i} {{}}"]
        to = f"ip daddr {m.sources} tcp sport {m.ports}"
        out += [
            f'    {to} tcp flags & (syn | ack) == syn | ack counter name "synack_{i}"',
            f'    {to} tcp flags & rst == rst counter name "rst_{i}"',
        ]
    return [*decls, *out, "  }"]


def _link_stats(ctx: MeasureContext, role: str, link: str) -> dict[str, int]:
    dev = ctx.testbed.ifname(link, role)
    out = ctx.testbed.host(role).run(["ip", "-s", "-j", "link", "show", "dev", dev]).stdout
    stats = json.loads(out)[0]["stats64"]
    return {
        "rx_packets": int(stats["rx"]["packets"]),
        "rx_dropped": int(stats["rx"]["dropped"]),
        "tx_packets": int(stats["tx"]["packets"]),
        "tx_dropped": int(stats["tx"]["dropped"]),
    }


@dataclass(frozen=True)
class Reading:
    """Every counter at one moment."""

    at: float  # CLOCK_MONOTONIC seconds
    reached: tuple[int, ...]  # per flood, at the target
    links: dict[str, dict[str, int]]
    # per SYN flood: the target's SYN-ACKs and RSTs back to its sources
    answers: dict[str, int] = field(default_factory=dict)


class DeliveryCount:
    """Counts what one or more concurrent floods delivered: `start()` before the
    floods begin, `finish(...)` after they ended."""

    def __init__(self, ctx: MeasureContext, specs: Sequence[Mapping[str, Any]]) -> None:
        self.ctx = ctx
        self.matches = [flood_match(ctx, s) for s in specs]
        self.table = counter_table(ctx)
        self.before: Reading | None = None

    def _counters(self) -> dict[str, int]:
        out = self.ctx.testbed.host(self.ctx.server).run(
            ["nft", "-j", "list", "counters", "table", "inet", self.table]
        )
        got: dict[str, int] = {}
        for item in json.loads(out.stdout).get("nftables", []):
            counter = item.get("counter")
            if isinstance(counter, dict):
                got[str(counter.get("name"))] = int(counter.get("packets", 0))
        return got

    def _read(self) -> Reading:
        links = {
            "attacker": _link_stats(self.ctx, ATTACKER, ATTACKER_LINK),
            "dut_in": _link_stats(self.ctx, "dut", ATTACKER_LINK),
            "dut_out": _link_stats(self.ctx, "dut", SERVER_LINK),
        }
        got = self._counters()
        reached = tuple(got.get(f"flood_{i}", 0) for i in range(len(self.matches)))
        answers = {k: v for k, v in got.items() if k.startswith(("synack_", "rst_"))}
        return Reading(time.monotonic(), reached, links, answers)

    def start(self) -> None:
        self.ctx.testbed.host(self.ctx.server).run(
            ["nft", "-f", "-"], input=counter_rules(self.table, self.matches)
        )
        self.before = self._read()

    def _settled(self) -> Reading:
        """The counters once packets still crossing the DUT have landed: two equal
        target counts in a row, polled, within SETTLE_S."""
        end = time.monotonic() + SETTLE_S
        last = self._read()
        while time.monotonic() < end:
            time.sleep(0.05)  # poll interval, not a wait for an event
            now = self._read()
            if now.reached == last.reached:
                return now
            last = now
        return last

    def finish(self, results: Sequence[Record]) -> list[dict[str, Any]]:
        """Per flood (in the specs' order), its `delivered` record, from the floods'
        engine results (each its `packets` and `duration_s`)."""
        if self.before is None:
            raise EngineError("DeliveryCount.finish() before start(): report this bug")
        after = self._settled()
        before = self.before

        def delta(link: str, key: str) -> int:
            return max(after.links[link][key] - before.links[link][key], 0)

        taken_in = delta("dut_in", "rx_packets")
        links = {
            "dut_in_rx_packets": taken_in,
            "dut_in_rx_dropped": delta("dut_in", "rx_dropped"),
            "dut_out_tx_packets": delta("dut_out", "tx_packets"),
            "dut_out_tx_dropped": delta("dut_out", "tx_dropped"),
            "attacker_tx_dropped": delta("attacker", "tx_dropped"),
        }
        out: list[dict[str, Any]] = []
        for i, res in enumerate(results):
            sent = int(res.get("packets") or 0)
            reached = max(after.reached[i] - before.reached[i], 0)
            seconds = float(res.get("duration_s") or 0.0)
            rec: dict[str, Any] = {
                "sent": sent,
                "reached": reached,
                "dut_dropped": max(sent - reached, 0),
                "dut_drop_pct": 100.0 * max(sent - reached, 0) / sent if sent else None,
                "sent_pps": sent / seconds if seconds > 0 else None,
                "received_pps": reached / seconds if seconds > 0 else None,
                "window_s": seconds,
                "match": self.matches[i].nft(),
            }
            if len(results) == 1:
                # The attacker link carries this flood alone (and a few ARP/ND
                # packets): the DUT's drops split into refused at its input and
                # dropped inside; the two add up to dut_dropped.
                lost = max(sent - reached, 0)
                rec["not_taken_in"] = min(max(sent - taken_in, 0), lost)
                rec["dropped_inside"] = lost - rec["not_taken_in"]
            if f"rst_{i}" in after.answers:
                # What the target answered the flood with (SYN floods only).
                rec["target_answers"] = {
                    kind: max(
                        after.answers[f"{kind}_{i}"] - before.answers.get(f"{kind}_{i}", 0), 0
                    )
                    for kind in ("synack", "rst")
                }
            rec["links"] = links
            rec["links_shared_by"] = len(results)
            out.append(rec)
        return out


# ---------------------------------------------------------------- coverage


def _start_of(records: Sequence[Record]) -> Record | None:
    return next((r for r in records if r.get("type") == "start"), None)


def _mono_s(start: Record) -> float | None:
    clock = start.get("clock")
    ns = clock.get("monotonic_ns") if isinstance(clock, Mapping) else None
    return ns / 1e9 if isinstance(ns, int | float) and not isinstance(ns, bool) else None


def flood_window(records: Sequence[Record], result: Record) -> tuple[float, float] | None:
    """[start, end] of a flood on CLOCK_MONOTONIC: its start record's clock (taken as
    the first packet is due) to `duration_s` later."""
    start = _start_of(records)
    t0 = None if start is None else _mono_s(start)
    dur = result.get("duration_s")
    if t0 is None or not isinstance(dur, int | float):
        return None
    return (t0, t0 + float(dur))


def measured_window(records: Sequence[Record], result: Record) -> tuple[float, float] | None:
    """[start, end] of a measured test's window on CLOCK_MONOTONIC: its start clock
    (traffic start) plus `warmup_s`, to `duration_s` later."""
    start = _start_of(records)
    t0 = None if start is None else _mono_s(start)
    warm, dur = result.get("warmup_s"), result.get("duration_s")
    if t0 is None or not isinstance(warm, int | float) or not isinstance(dur, int | float):
        return None
    begin = t0 + float(warm)
    return (begin, begin + float(dur))


def coverage(
    flood: tuple[float, float] | None, measured: tuple[float, float] | None
) -> dict[str, Any]:
    """Whether the flood ran over the whole measured window, with both windows and the
    flood's lead (before the window) and tail (after it), in seconds."""
    if flood is None or measured is None:
        return {
            "covered": False,
            "flood_window": list(flood) if flood else None,
            "measured_window": list(measured) if measured else None,
            "why": "a start record's clock or a result's duration is missing",
        }
    lead = measured[0] - flood[0]
    tail = flood[1] - measured[1]
    return {
        "covered": lead >= 0 and tail >= 0,
        "flood_window": [flood[0], flood[1]],
        "measured_window": [measured[0], measured[1]],
        "lead_s": lead,
        "tail_s": tail,
    }


def require_covered(cov: Mapping[str, Any], what: str) -> None:
    """Fail the point when the flood did not cover the measured window."""
    if cov.get("covered"):
        return
    if "lead_s" in cov:
        lead, tail = float(cov["lead_s"]), float(cov["tail_s"])
        detail = (
            f"it started {-lead:.3f} s after the measured window began"
            if lead < 0
            else f"it ended {-tail:.3f} s before the measured window ended"
        )
    else:
        detail = str(cov.get("why"))
    raise EngineError(
        f"the flood did not cover the {what}'s measured window: {detail}; the figure "
        "would mix flooded and unflooded time, so this point is not counted",
        fix="a flood that starts late needs a longer warm-up of the measured test "
        "(`warmup`, at least 0.2 s); one that ends early means the measured test ran "
        "past the flood's margin (secperf.workloads.parts.flood.FLOOD_MARGIN_S): rerun it on a "
        "quieter machine, or report it if it repeats",
    )


def flood_summary(spec: Spec, result: Record, delivered: Mapping[str, Any]) -> dict[str, Any]:
    """What a measured record says about the flood beside it."""
    return {
        "asked_pps": spec["rate_pps"],
        "rate_pps": result.get("rate_pps"),
        "packets": result.get("packets"),
        "sent_pps": delivered.get("sent_pps"),
        "received_pps": delivered.get("received_pps"),
        "reached": delivered.get("reached"),
        "dut_dropped": delivered.get("dut_dropped"),
        "dut_drop_pct": delivered.get("dut_drop_pct"),
        **(
            {"target_answers": delivered["target_answers"]} if "target_answers" in delivered else {}
        ),
    }
