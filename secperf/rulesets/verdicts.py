"""Which rule decides each flow: one probe per flow through the loaded rule set, traced.

The DUT's rule set is the one a variant loaded (mapped addresses, renamed interfaces).
A table of the run's own, at a priority before every other (`-350`, raw), sets
`nftrace` on the probes' packets; `nft -a monitor trace` in the DUT's namespace prints
each traced packet's path through the chains: the rule that matched it (with its
handle) and its verdict, or the chain's policy. Each probe is the first packet of its
flow (a TCP SYN, a UDP datagram, an ICMP echo request) from the flow's source, with a
source port of its own so its trace is told apart from every other.

The decision of a packet is read as netfilter takes it: a drop or reject in any base
chain ends it; an accept ends that base chain only, and the packet goes on to the next
base chain (another table, a later hook). So a flow is "deny" when some chain dropped
its packet, else "accept"; the deciding rule is the one that dropped it, or the last
filter-chain rule that accepted it (a chain's policy when no rule did).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secperf.errors import MechanismError
from secperf.rulesets.model import PlacedFlow
from secperf.testbed.hosts import Host

FIRST_PORT = 40000  # probes' source ports: FIRST_PORT + the flow's index
TRACE_PRIORITY = -350  # before conntrack (-200) and every filter a user writes
QUIET_S = 0.5  # the trace is read whole once the monitor has printed nothing for this long

_LINE = re.compile(
    r"^trace id (?P<id>[0-9a-f]+) (?P<family>\S+) (?P<table>\S+) (?P<chain>\S+) (?P<rest>.*)$"
)
_HANDLE = re.compile(r"# handle (\d+)")
_VERDICT = re.compile(r"\(verdict (\w+)(?: (\S+))?\)\s*$")
_PACKET_FIELDS = re.compile(
    r"\b(ip6? saddr|ip6? daddr|tcp sport|tcp dport|udp sport|udp dport|icmp id|iif|oif)"
    r" \"?([^\s\"]+)\"?"
)
TERMINAL = frozenset({"accept", "drop", "reject", "queue"})


@dataclass(frozen=True)
class Step:
    """One event of a traced packet: a rule that matched (handle set) or a policy."""

    family: str
    table: str
    chain: str
    handle: int | None  # None: the chain's policy
    verdict: str  # accept, drop, continue, jump, goto, return, ...
    target: str | None = None  # a jump's chain


@dataclass
class Trace:
    """A traced packet: its header fields (from the first `packet:` line) and steps."""

    fields: dict[str, str] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)


@dataclass(frozen=True)
class Decision:
    """What the rule set did with a flow's first packet, and where it was decided."""

    # "accept" | "deny" | "unseen" (sent, no trace: it never reached the DUT) |
    # "not probed" (no probe of its kind is sent: an ICMPv6 echo)
    verdict: str
    family: str | None = None
    table: str | None = None
    chain: str | None = None
    handle: int | None = None  # None with a chain: that chain's policy
    # every rule the packet matched on its way (family, table, chain, handle), in order
    matched: tuple[tuple[str, str, str, int], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "family": self.family,
            "table": self.table,
            "chain": self.chain,
            "handle": self.handle,
        }


def parse_trace(lines: Sequence[str], skip_table: str) -> dict[str, Trace]:
    """`nft -a monitor trace` lines -> trace id -> its packet fields and steps (the
    tracing table's own steps left out)."""
    traces: dict[str, Trace] = {}
    for line in lines:
        m = _LINE.match(line.strip())
        if m is None:
            continue
        trace = traces.setdefault(m["id"], Trace())
        rest = m["rest"]
        if rest.startswith("packet:"):
            if not trace.fields:
                trace.fields = {
                    k.split()[-1] if " " in k else k: v for k, v in _PACKET_FIELDS.findall(rest)
                }
            continue
        if m["table"] == skip_table:
            continue
        if rest.startswith("policy "):
            trace.steps.append(Step(m["family"], m["table"], m["chain"], None, rest.split()[1]))
        elif rest.startswith("rule "):
            h, v = _HANDLE.search(rest), _VERDICT.search(rest)
            if v is None:
                continue
            trace.steps.append(
                Step(
                    m["family"],
                    m["table"],
                    m["chain"],
                    int(h.group(1)) if h else None,
                    v.group(1),
                    v.group(2),
                )
            )
    return traces


def decide(
    steps: Sequence[Step], filters: frozenset[tuple[str, str, str]] | None = None
) -> Decision:
    """The packet's fate and the step that decided it (see the module's docstring). An
    accepted packet is credited to the last rule of a filter chain (`filters`: family,
    table, chain) that accepted it, before a NAT chain's statement or a policy."""
    accepts: list[Step] = []
    for step in steps:
        if step.verdict in ("drop", "reject"):
            return Decision("deny", step.family, step.table, step.chain, step.handle)
        if step.verdict == "accept":
            accepts.append(step)
    if not accepts:
        return Decision("accept")  # traced, matched nothing terminal: every policy accepts

    def rank(s: Step) -> tuple[bool, bool]:
        in_filter = filters is None or (s.family, s.table, s.chain) in filters
        return (in_filter, s.handle is not None)

    best = max(reversed(accepts), key=rank)  # the last of the best-ranked
    return Decision("accept", best.family, best.table, best.chain, best.handle)


def filter_chains(dut: Host) -> frozenset[tuple[str, str, str]]:
    """The DUT's chains of type filter (user chains count: a jump's rules filter)."""
    out = dut.run(["nft", "-j", "list", "chains"]).stdout
    chains = [o["chain"] for o in json.loads(out or '{"nftables": []}')["nftables"] if "chain" in o]
    return frozenset(
        (c["family"], c["table"], c["name"]) for c in chains if c.get("type", "filter") == "filter"
    )


def trace_rules(table: str, family: int, sports: Sequence[int] = ()) -> str:
    """The tracing table (nft -f text): nftrace on the probes' packets only (their own
    source ports, and the few a flow names: a DHCP reply from port 67)."""
    proto = "ip" if family == 4 else "ip6"
    own = "".join(
        f"    meta l4proto {{ tcp, udp }} th sport {p} meta nftrace set 1\n"
        for p in sorted(set(sports))
        if p < FIRST_PORT
    )
    return (
        f"table inet {table} {{\n"
        f"  chain pre {{\n"
        f"    type filter hook prerouting priority {TRACE_PRIORITY};\n"
        f"{own}"
        f"    meta l4proto {{ tcp, udp }} th sport {FIRST_PORT}-65535 meta nftrace set 1\n"
        f"    {proto} protocol icmp meta nftrace set 1\n"
        f"  }}\n"
        f"  chain out {{\n"
        f"    type filter hook output priority {TRACE_PRIORITY};\n"
        f"    meta l4proto {{ tcp, udp }} th sport {FIRST_PORT}-65535 meta nftrace set 1\n"
        f"  }}\n"
        f"}}\n"
    )


# The sender each client host runs: the first packet of each of its flows, from the
# flow's source address and its own source port, never waiting for an answer.
_SENDER = r"""
import json, socket, struct, sys
for p in json.loads(sys.argv[1]):
    fam = socket.AF_INET6 if ":" in p["src"] else socket.AF_INET
    if p["protocol"] == "tcp":
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setblocking(False)
        s.bind((p["src"], p["sport"]))
        try:
            s.connect((p["dst"], p["dport"]))
        except (BlockingIOError, OSError):
            pass
        s.close()
    elif p["protocol"] == "icmp" and fam == socket.AF_INET:
        # an echo request whose identifier is the probe's own "port"
        body = struct.pack("!BBHHH", 8, 0, 0, p["sport"], 1) + b"secperf-probe"
        # RFC 1071: an odd last byte is summed as if padded with a zero (a wrong sum
        # makes conntrack call the echo INVALID, and a ct state invalid drop take it)
        even = body + b"\0" * (len(body) % 2)
        total = sum(struct.unpack("!%dH" % (len(even) // 2), even))
        total = (total >> 16) + (total & 0xFFFF)
        total += total >> 16
        body = body[:2] + struct.pack("!H", ~total & 0xFFFF) + body[4:]
        s = socket.socket(fam, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        s.bind((p["src"], 0))
        try:
            s.sendto(body, (p["dst"], 0))
        except OSError:
            pass
        s.close()
    elif p["protocol"] == "udp":
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.bind((p["src"], p["sport"]))
        try:
            s.sendto(b"secperf-probe", (p["dst"], p["dport"]))
        except OSError:
            pass
        s.close()
"""


def _key(src: str, dst: str, sport: int) -> tuple[str, str, str]:
    return (src, dst, str(sport))


def probe(
    dut: Host,
    hosts: Mapping[str, Host],
    placed: Sequence[PlacedFlow],
    *,
    table: str,
    family: int = 4,
    deadline_s: float = 10.0,
) -> dict[str, Decision]:
    """One traced probe per flow; flow name -> its Decision. The DUT's rule set is left
    as it was (the tracing table is removed, the monitor stopped)."""
    filters = filter_chains(dut)
    named = [pf.flow.sport for pf in placed if pf.flow.sport is not None]
    dut.run(["nft", "-f", "-"], input=trace_rules(table, family, named))
    monitor = dut.spawn(
        ["nft", "-a", "monitor", "trace"],
        stdout=subprocess.PIPE,
        label="nft-monitor-trace",
    )
    lines: list[str] = []
    try:
        _wait_for_monitor(monitor)
        reader = _LineReader(monitor.stdout)
        by_client: dict[str, list[dict[str, Any]]] = {}
        keys: dict[tuple[str, str, str], str] = {}
        skipped: set[str] = set()
        for i, pf in enumerate(placed):
            icmp = pf.flow.protocol == "icmp"
            if (icmp and ":" in pf.src) or (not icmp and pf.flow.dport is None):
                skipped.add(pf.flow.name)  # no ICMPv6 echo probe yet
                continue
            # a flow that names its source port (a rule on --sport) is sent from it
            sport = pf.flow.sport if pf.flow.sport is not None else FIRST_PORT + 1 + i
            by_client.setdefault(pf.client, []).append(
                {
                    "protocol": pf.flow.protocol,
                    "src": pf.src,
                    "dst": pf.dst,
                    "dport": pf.flow.dport or 0,
                    "sport": sport,
                }
            )
            keys[_key(pf.src, pf.dst, sport)] = pf.flow.name
        for client, probes in by_client.items():
            hosts[client].run([sys.executable, "-c", _SENDER, json.dumps(probes)], timeout=30)
        found: dict[str, Decision] = {}
        end = time.monotonic() + deadline_s
        seen, quiet_since = -1, time.monotonic()
        while time.monotonic() < end:
            if len(lines) != seen:
                seen, quiet_since = len(lines), time.monotonic()
            traces = parse_trace(lines, table)
            found = _decisions(traces, keys, filters)
            # a policy's accept ends one base chain, not the packet: a later hook's events
            # may still be on their way (on a loaded machine, later), so every probe must
            # be seen settled and the monitor then print nothing new for QUIET_S
            if (
                len(found) == len(keys)
                and _settled(traces)
                and time.monotonic() - quiet_since >= QUIET_S
            ):
                break
            reader.read(lines, 0.1)
        return {
            pf.flow.name: Decision("not probed")
            if pf.flow.name in skipped
            else found.get(pf.flow.name, Decision("unseen"))
            for pf in placed
        }
    finally:
        monitor.stop()
        dut.run(["nft", "delete", "table", "inet", table], check=False)


def _decisions(
    traces: Mapping[str, Trace],
    keys: Mapping[tuple[str, str, str], str],
    filters: frozenset[tuple[str, str, str]],
) -> dict[str, Decision]:
    out: dict[str, Decision] = {}
    for trace in traces.values():
        f = trace.fields
        sport = f.get("sport") or f.get("id")  # an ICMP echo's identifier stands for it
        if sport is None:
            continue
        name = keys.get(_key(f.get("saddr", ""), f.get("daddr", ""), int(sport)))
        if name is not None and name not in out:
            d = decide(trace.steps, filters)
            hits = tuple(
                (st.family, st.table, st.chain, st.handle)
                for st in trace.steps
                if st.handle is not None
            )
            out[name] = dataclasses.replace(d, matched=hits)
    return out


def _settled(traces: Mapping[str, Trace]) -> bool:
    """Every traced packet has a terminal step or a policy (its events all printed)."""
    return all(
        t.steps and (t.steps[-1].verdict in TERMINAL or t.steps[-1].handle is None)
        for t in traces.values()
        if t.fields.get("sport") or t.fields.get("id")
    )


def _wait_for_monitor(monitor: Any) -> None:
    """`nft monitor` prints nothing when it is ready: wait (with a deadline) until its
    netlink socket is open, so the first probe is not sent before it listens."""
    end = time.monotonic() + 5.0
    while time.monotonic() < end:
        try:
            fds = list(Path(f"/proc/{monitor.pid}/fd").iterdir())
            if any("socket:" in os.readlink(fd) for fd in fds):
                return
        except OSError:
            pass
        if monitor.poll() is not None:
            raise MechanismError("nft monitor trace exited at once in the DUT")
        time.sleep(0.02)  # polling the monitor's own state, within the deadline
    raise MechanismError("nft monitor trace did not start within 5 s in the DUT")


class _LineReader:
    """Lines of a pipe, read without blocking past `wait_s`."""

    def __init__(self, stream: Any) -> None:
        self.fd = stream.fileno()
        os.set_blocking(self.fd, False)
        self.partial = b""

    def read(self, lines: list[str], wait_s: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], wait_s)
        if not ready:
            return
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        data = self.partial + chunk
        *done, self.partial = data.split(b"\n")
        lines += [d.decode(errors="replace") for d in done]
