"""Kind `attack_mix`: detection under load, normal traffic with attacks mixed in.

The client sends messages to the server at `rate` messages/s (the load level; a list
is a sweep) for the workload's duration; a share `attack_share` of them carries an
attack string taken from the rule file (`rules`): one attack per rule that applies to
the protocol and is built from content patterns alone, placed where the rule's
offset/depth asks, sent to the rule's destination port (or the workload's port). The
attacks are spread evenly over the run and cycle through the rules. Every message
ends with a tag (sequence number and which attack, or none), which is how the
receiver tells what arrived; the tag holds no attack string.

`protocol = "udp"`: each message is a datagram. `protocol = "tcp"`: the clean
messages go over one TCP connection, each attack over a connection of its own whose
data is cut into `segments` pieces inside the attack string and sent in `order`
(in order, or in reverse: each piece ahead of the one before it in the stream), by a
user-space TCP (tcp_attacker.py beside this file), so that an IPS that matches packet
by packet, or reassembles in-order data only, misses it.

Three sources of evidence, read over the same window, make the record:

- the sender: how many clean datagrams and how many attacks (per sid) it sent;
- the receiver in the server: how many of each arrived;
- the IPS/IDS of the variant: its match counters per sid and its drop counter,
  read before and after (secperf-nfq's stats on SIGUSR2, fwsnort's iptables rule
  counters, the ids sensor's stats), and its own losses (the NFQUEUE overflow,
  the sensor's socket drops).

From them: `detected` = attacks the IPS/IDS matched (per sid, at most what was
sent of it); `blocked` = attacks of drop rules that did not arrive, at most what
the IPS dropped; `missed` = attacks sent that nothing detected; `leaked` = attacks
of drop rules that reached the server (0 means the policy held under this load);
`clean_delivered_pct` is the normal traffic's delivery, the cost beside them.
Over UDP one attack is one packet; over TCP each piece is sent once (no
retransmission), so an engine that counts per packet counts an attack once either way.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, PlainValidator, ValidationInfo, model_validator

from secperf import ips_rules
from secperf.engine import Record
from secperf.errors import SecperfError
from secperf.mechanisms.capabilities import Counts, Detecting, Detector
from secperf.metric import Metric, MetricRow, busy_us_per, field, path
from secperf.schema.fields import bounded, one_or_sweep, parse_count, rule_file
from secperf.testbed.testbed import Host
from secperf.workloads.attack_mix import tcp_attacker
from secperf.workloads.base import (
    MeasureContext,
    WorkloadKind,
    WorkloadPoint,
    WorkloadSpec,
    scalar,
)

DEFAULT_PORT = 5390
SETTLE_S = 3.0  # at most this long for the last datagrams to land and counters to settle
TAG = b"|SPMX"


class AttackMixError(SecperfError):
    """The attack mix could not be measured."""


def _attack_rules(value: object, info: ValidationInfo) -> str:
    if isinstance(value, int):
        raise ValueError("an attack mix takes its attacks from a rule file, not a count")
    if not isinstance(value, str | Path):
        raise ValueError("rules must be a rule file")
    return str(rule_file(value, info))


AttackRules = Annotated[str, PlainValidator(_attack_rules)]

AttackRate = Annotated[
    int | list[int],
    PlainValidator(one_or_sweep(bounded(parse_count, 10, 200_000, "an attack-mix rate"))),
]


class AttackMixWorkload(WorkloadSpec):
    """Detection under load (issue 13): messages at `rate` messages/s (the load level;
    a list sweeps it), `attack_share` of them carrying an attack string built from the
    rule file's content rules; UDP datagrams, or over TCP each attack on a connection of
    its own cut into `segments` pieces sent in `order` (issue 24). The record gives
    detected / blocked / missed / leaked attacks from the sender's, the server's and the
    IPS/IDS's own counts, and the clean traffic's delivery beside them."""

    sweepable: ClassVar[dict[str, str]] = {"rate": "count"}

    kind: Literal["attack_mix"]
    protocol: Literal["udp", "tcp"] = "udp"
    """`"udp"` (one attack is one datagram), `"tcp"` (below)."""
    # tcp: each attack's data in this many pieces, cut inside the attack string ...
    segments: int = Field(default=1, ge=1, le=16)
    """1 … 16; `protocol = "tcp"` only: each attack's data in this many TCP segments, cut evenly
    inside the attack string.
    """
    # ... sent in order, or last piece first (every piece ahead of its predecessor)
    order: Literal["in-order", "reverse"] = "in-order"
    """`"in-order"`, `"reverse"` (the last piece first: each piece arrives ahead of the one before
    it in the stream); `protocol = "tcp"` only.
    """
    rate: AttackRate = 1000
    """10 … 200000 (a list sweeps)."""
    attack_share: float = Field(default=0.01, gt=0.0, le=1.0)
    """0 < share ≤ 1."""
    size: int = Field(default=512, ge=64, le=1400)
    """Bytes of each message."""
    port: int = Field(default=DEFAULT_PORT, ge=1024, le=65535)
    """The messages' destination port."""
    # A string (the resolved path), so that the point's record stays plain JSON.
    rules: AttackRules = "rules/secperf-attacks.rules"
    """A rule file."""

    @model_validator(mode="after")
    def _pieces_need_tcp(self) -> AttackMixWorkload:
        if self.protocol == "udp" and (self.segments != 1 or self.order != "in-order"):
            raise ValueError(
                'segments and order cut an attack into TCP segments: set protocol = "tcp" '
                "(a UDP attack is one datagram)"
            )
        return self

    def default_name(self) -> str:
        return "attack-mix" if self.protocol == "udp" else "attack-mix-tcp"


@dataclass(frozen=True)
class Attack:
    sid: int
    action: str  # "drop" or "alert"
    port: int
    payload: bytes


def attack_payload(rule: ips_rules.Rule) -> bytes | None:
    """A payload that carries every content of the rule where its offset/depth allow;
    None for a rule this workload cannot build (pcre, no content)."""
    if not rule.patterns or any(p.kind != "content" for p in rule.patterns):
        return None
    out = b""
    for p in rule.patterns:
        if p.offset is not None and len(out) < p.offset:
            out += b" " * (p.offset - len(out))
        if p.depth is not None and len(out) + len(p.data) > (p.offset or 0) + p.depth:
            return None  # cannot place it after what came before
        out += p.data + (b"" if p.offset is not None and p.offset == 0 else b" ")
    return out


def attacks_from(rules: Sequence[ips_rules.Rule], protocol: str, port: int) -> list[Attack]:
    """The attacks the rule file gives for `protocol`: one per buildable rule."""
    out = []
    for r in rules:
        if r.proto not in (protocol, "ip"):
            continue
        payload = attack_payload(r)
        if payload is None:
            continue
        dport = r.dport[0][0] if r.dport else port
        out.append(Attack(r.sid, r.action, dport, payload))
    return out


def is_attack(i: int, share: float) -> bool:
    """Message i carries an attack: evenly spread, `share` of them."""
    return math.floor((i + 1) * share) > math.floor(i * share)


SENDER = r"""
import json, socket, sys, time
a = json.loads(sys.argv[1])
attacks = [(bytes.fromhex(x["payload"]), x["port"], str(x["sid"])) for x in a["attacks"]]
s = socket.socket(socket.AF_INET6 if ":" in a["server"] else socket.AF_INET, socket.SOCK_DGRAM)
size, share, rate, n = a["size"], a["share"], a["rate"], int(a["rate"] * a["duration"])
fill = (b"abcdefghij0123456789" * (size // 20 + 2))[:size]
sent = {"clean": 0}; errors = 0; k = 0
t0 = time.monotonic()
for i in range(n):
    due = t0 + i / rate
    now = time.monotonic()
    if due > now:
        time.sleep(due - now)
    label = "clean"; port = a["port"]; body = fill
    if int((i + 1) * share) > int(i * share):
        body, port, label = attacks[k % len(attacks)]; k += 1
    tag = b"|SPMX%010d:%s" % (i, label.encode())
    msg = body + fill[: max(0, size - len(body) - len(tag))] + tag
    try:
        s.sendto(msg, (a["server"], port)); sent[label] = sent.get(label, 0) + 1
    except OSError:
        errors += 1
print(json.dumps({"sent": sent, "errors": errors, "messages": n,
                  "seconds": time.monotonic() - t0}), flush=True)
"""

RECEIVER = r"""
import json, select, signal, socket, sys
addr, ports = sys.argv[1], [int(p) for p in sys.argv[2].split(",")]
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
socks = []
for p in ports:
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((addr, p)); s.setblocking(False); socks.append(s)
got = {}; untagged = 0
def report(*_):
    print(json.dumps({"arrived": got, "untagged": untagged}), flush=True)
signal.signal(signal.SIGUSR1, report)
print("ready", flush=True)
while True:
    try:
        r, _, _ = select.select(socks, [], [], 1.0)
    except InterruptedError:
        continue
    for s in r:
        while True:
            try:
                data = s.recv(65536)
            except BlockingIOError:
                break
            at = data.rfind(b"|SPMX")
            if at < 0:
                untagged += 1; continue
            label = data[at + 16:].decode(errors="replace")
            got[label] = got.get(label, 0) + 1
"""


TCP_PROGRAM = Path(tcp_attacker.__file__).read_text()


def rst_filter(table: str) -> str:
    """The client's table that keeps its kernel from answering the hand-spoken attack
    connections (it knows no socket for them and would reset each one); the sender's
    own RSTs carry its mark and pass. Recreated from scratch, safe to load twice."""
    lo, hi = tcp_attacker.ATTACK_PORTS
    return (
        f"table inet {table} {{}}\n"
        f"delete table inet {table}\n"
        f"table inet {table} {{\n"
        "  chain output {\n"
        "    type filter hook output priority raw; policy accept;\n"
        f"    tcp sport {lo}-{hi} tcp flags & rst == rst meta mark != {tcp_attacker.MARK:#x} drop\n"
        "  }\n"
        "}\n"
    )


def _read_json(proc: Any, deadline: float) -> dict[str, Any]:
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        line = line.strip()
        if line.startswith("{"):
            value = json.loads(line)
            assert isinstance(value, dict)
            return value
    raise AttackMixError("the attack-mix receiver stopped answering")


# ----------------------------------------------------------- the detector's counters


Snapshot = Counts


def detector_snapshot(ctx: MeasureContext) -> tuple[Detector | None, Snapshot | None]:
    """(what detects, its counters now) for the variant's IPS or IDS (the first of its
    mechanisms that has a detector: a `Detecting`); (None, None) without."""
    for mech, mctx in ctx.mechanisms:
        if not isinstance(mech, Detecting):
            continue
        detector = mech.detector()
        if detector is not None:
            hosts = [ctx.testbed.host(name) for name in mctx.hosts]
            return detector, mech.detection_counts(hosts, mctx)
    return None, None


def _delta(after: Snapshot, before: Snapshot) -> Snapshot:
    out: Snapshot = {}
    for key, value in after.items():
        old = before.get(key)
        if key == "by_sid":
            sids = set(value) | set(old or {})
            diff = {s: value.get(s, 0) - (old or {}).get(s, 0) for s in sids}
            out[key] = {s: n for s, n in diff.items() if n}
        elif isinstance(value, int) and isinstance(old, int):
            out[key] = value - old
        elif isinstance(value, dict) and isinstance(old, dict):
            # counters grouped (reassembly's): the change of each, bounds as they are
            out[key] = _delta(value, old)
        else:
            out[key] = value
    return out


# ----------------------------------------------------------------- the record


def summarize(
    attacks: Sequence[Attack],
    sent: dict[str, int],
    arrived: dict[str, int],
    detector: Detector | None,
    counts: Snapshot | None,
) -> dict[str, Any]:
    """The record's attack figures from the three sources (see the module's doc)."""
    sids = {str(a.sid): a for a in attacks}
    sent_attacks = sum(n for label, n in sent.items() if label in sids)
    arrived_attacks = sum(n for label, n in arrived.items() if label in sids)
    drop_sids = [s for s, a in sids.items() if a.action == "drop"]
    sent_drop = sum(sent.get(s, 0) for s in drop_sids)
    leaked = sum(arrived.get(s, 0) for s in drop_sids)
    matched = (counts or {}).get("by_sid", {})
    detected: int | None = None
    blocked: int | None = None
    if detector is not None and counts is not None:
        detected = sum(min(int(matched.get(s, 0)), sent.get(s, 0)) for s in sids)
        # what matched a drop rule and did not arrive; a mirror never blocks
        drops = int(counts.get("drops") or 0)
        blocked = min(drops, sent_drop - leaked) if detector.blocks else 0
    clean_sent, clean_arrived = sent.get("clean", 0), arrived.get("clean", 0)

    def pct(n: int | None, of: int) -> float | None:
        return None if n is None or of == 0 else 100.0 * n / of

    missed = sent_attacks - (detected or 0)
    return {
        "detector": None if detector is None else detector.label,
        "attacks_sent": sent_attacks,
        "attacks_arrived": arrived_attacks,
        "drop_attacks_sent": sent_drop,
        "detected": detected,
        "blocked": blocked,
        "missed": missed,
        "leaked": leaked,
        "detected_pct": pct(detected, sent_attacks),
        "blocked_pct": pct(blocked, sent_drop),
        "missed_pct": pct(missed, sent_attacks),
        "clean_sent": clean_sent,
        "clean_arrived": clean_arrived,
        "clean_delivered_pct": pct(clean_arrived, clean_sent),
        "false_alerts": sum(int(n) for s, n in matched.items() if s not in sids)
        if counts is not None
        else None,
        "policy_held": leaked == 0 if detector is not None and detector.blocks else None,
    }


@dataclass(frozen=True)
class AttackMixExecutor:
    def measure(self, ctx: MeasureContext, point: WorkloadPoint[AttackMixWorkload]) -> Record:
        p = point.spec
        rules_path = Path(p.rules)
        if not rules_path.is_absolute() and not rules_path.is_file():
            rules_path = Path(__file__).resolve().parents[3] / rules_path  # the shipped file
        protocol = p.protocol
        port = p.port
        rate = float(scalar(p.rate))
        share = p.attack_share
        size = p.size
        attacks = attacks_from(ips_rules.parse_rules(rules_path), protocol, port)
        if not attacks:
            raise AttackMixError(
                f"{rules_path} has no {protocol} rule made of content patterns alone",
                fix="give the workload a rule file with content rules for the protocol",
            )
        client, server = ctx.testbed.host(ctx.client), ctx.testbed.host(ctx.server)
        server_addr = ctx.target.rsplit(":", 1)[0].strip("[]")
        ports = sorted({port, *(a.port for a in attacks)})
        program = [RECEIVER] if protocol == "udp" else [TCP_PROGRAM, "receive"]
        receiver = server.spawn(
            [
                sys.executable,
                "-c",
                *program,
                "0.0.0.0" if ctx.family == 4 else "::",
                ",".join(map(str, ports)),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            label="attack-mix-receiver",
        )
        table = f"secperf_{ctx.testbed.prefix}_atk"
        try:
            if protocol == "tcp":
                client.run(["nft", "-f", "-"], input=rst_filter(table))
            record = self._run(ctx, client, receiver, server_addr, attacks, p)
        finally:
            receiver.stop(timeout=5.0)
            if protocol == "tcp":
                client.run(["nft", "delete", "table", "inet", table], check=False)
        record.update(
            {
                "type": "result",
                "kind": p.kind,
                "variant": ctx.variant,
                "family": ctx.family,
                "protocol": protocol,
                "rate": rate,
                "attack_share": share,
                "size": size,
                "rules": str(rules_path),
                "attacks": [{"sid": a.sid, "action": a.action, "port": a.port} for a in attacks],
            }
        )
        if protocol == "tcp":
            record.update({"segments": p.segments, "order": p.order})
        ctx.keep(record)
        return record

    def _run(
        self,
        ctx: MeasureContext,
        client: Host,
        receiver: Any,
        server_addr: str,
        attacks: list[Attack],
        p: AttackMixWorkload,
    ) -> Record:
        line = receiver.stdout.readline().strip()
        if line != "ready":
            raise AttackMixError(f"the attack-mix receiver did not start: {line!r}")
        detector, before = detector_snapshot(ctx)
        hosts = [h.name for h in ctx.topology.hosts if not h.is_switch]
        cpu_before = {h: ctx.testbed.host(h).cpu_seconds() for h in hosts}
        args = {
            "server": server_addr,
            "port": p.port,
            "rate": float(scalar(p.rate)),
            "share": p.attack_share,
            "size": p.size,
            "duration": p.duration,
            "segments": p.segments,
            "order": p.order,
            "attacks": [
                {"payload": a.payload.hex(), "port": a.port, "sid": a.sid} for a in attacks
            ],
        }
        program = [SENDER] if p.protocol == "udp" else [TCP_PROGRAM, "send"]
        proc = client.run(
            [sys.executable, "-c", *program, json.dumps(args)],
            check=False,
            timeout=p.duration + 60,
        )
        if proc.returncode != 0:
            raise AttackMixError(f"the attack-mix sender failed: {proc.stderr.strip()[-500:]}")
        sender = json.loads(proc.stdout.strip().splitlines()[-1])
        # Poll until what arrived stops changing (or the deadline).
        deadline = time.monotonic() + SETTLE_S
        last = self._ask(receiver)
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self._ask(receiver)
            if now == last:
                break
            last = now
        _, after = detector_snapshot(ctx)
        counts = _delta(after, before) if after is not None and before is not None else None
        record: Record = summarize(attacks, sender["sent"], last["arrived"], detector, counts)
        record.update(
            {
                "sent": sender["sent"],
                "send_errors": sender["errors"],
                "achieved_rate": sum(sender["sent"].values()) / sender["seconds"]
                if sender["seconds"] > 0
                else None,
                "arrived": last["arrived"],
                "untagged": last["untagged"],
                "detector_counts": counts,
            }
        )
        for key in ("attack_outcomes", "attack_pieces_sent"):  # tcp: the sender's view
            if key in sender:
                record[key] = sender[key]
        host_cpu: dict[str, float] = {}
        for name, before_s in cpu_before.items():
            after_s = ctx.testbed.host(name).cpu_seconds()
            if before_s is not None and after_s is not None:
                host_cpu[name] = after_s - before_s
        if host_cpu:
            record["host_cpu"] = host_cpu
        return record

    @staticmethod
    def _ask(receiver: Any) -> dict[str, Any]:
        receiver.popen.send_signal(signal.SIGUSR1)
        return _read_json(receiver, time.monotonic() + 5.0)


# The clean traffic's delivery is the cost; the attack figures beside it.
CLEAN_DELIVERED = Metric("clean_delivered_pct", "Clean traffic delivered", "%", True, True)
ATTACK_DETECTED = Metric("attacks_detected_pct", "Attacks detected", "%", True, False)
ATTACK_BLOCKED = Metric("attacks_blocked_pct", "Drop-rule attacks blocked", "%", True, False)
ATTACK_MISSED = Metric("attacks_missed_pct", "Attacks missed", "%", False, False)
ATTACK_LEAKED = Metric(
    "attacks_leaked", "Drop-rule attacks reaching the server", "msgs", False, False
)
ATTACK_SENT = Metric("attacks_sent", "Attacks sent", "msgs", True, False)
MIX_RATE = Metric("attack_mix_rate", "Load sent", "msgs/s", True, False)
SD_MSG = Metric("sd_cpu_us_per_message", "Service demand", "CPU µs/msg", False, False)

METRICS: tuple[MetricRow, ...] = (
    (CLEAN_DELIVERED, field("clean_delivered_pct")),
    (ATTACK_DETECTED, field("detected_pct")),
    (ATTACK_BLOCKED, field("blocked_pct")),
    (ATTACK_MISSED, field("missed_pct")),
    (ATTACK_LEAKED, field("leaked")),
    (ATTACK_SENT, field("attacks_sent")),
    (MIX_RATE, field("achieved_rate")),
    (
        SD_MSG,
        lambda r: busy_us_per(
            r, (path(r, "clean_sent") or 0) + (path(r, "attacks_sent") or 0) or None
        ),
    ),
)

KIND = WorkloadKind(
    name="attack_mix",
    model=AttackMixWorkload,
    executor=AttackMixExecutor(),
    metrics=METRICS,
)
