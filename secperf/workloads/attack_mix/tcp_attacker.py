"""The two programs of the TCP attack mix (kind `attack_mix`, `protocol = "tcp"`), run in
the client and the server hosts as `python -c SOURCE send|receive ARGS`: standard
library only, so that they run on any host with a Python 3, a lab machine too.

**send** (the client): the clean traffic on one ordinary TCP connection, messages of
`size` bytes at their share of `rate`, each ending with its tag; and each attack on a
connection of its own, spoken by hand over a raw socket, so that the attack's data
can be cut into `segments` pieces at chosen places and sent in a chosen `order`
("in-order", or "reverse": the last piece first, every piece ahead of the one before
it in the stream). A user-space TCP is what makes this exact: a kernel socket decides
its own segment boundaries and never sends data out of order. Each piece is sent once,
not retransmitted, so each attack crosses the IPS exactly once and an engine that
counts per packet counts it once. An attack is then "delivered" when the server
acknowledges all of its data, "cut" when it does not within ACK_WAIT_S (a piece was
dropped on the way: the receiving TCP holds what came after the gap and never gives it
to the application), and it ends with a FIN (delivered) or a RST (cut, or no answer).
The host's kernel knows nothing of these connections and would answer the server's
SYN-ACK with a RST; the workload's nftables table in the client drops those (RSTs from
ATTACK_PORTS without the sender's mark), and the sender's own packets carry the mark.

**receive** (the server): a listener on each port; it counts the tags that arrive in
each connection's byte stream. A tag is the last thing of its message, and a receiving
TCP delivers bytes in order only, so an attack's tag arrives exactly when all of its
data (the whole attack string) reached the application. SIGUSR1 prints the counts.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import re
import select
import signal
import socket
import struct
import sys
import threading
import time
from typing import Any

# Source ports of the hand-spoken attack connections: past the testbed's local port
# range (1024-65000, tests/netns and secperf.testbed.hosts.netns), so the kernel never
# picks one of them for a socket of its own.
ATTACK_PORTS = (65100, 65499)
MARK = 0x5EC7  # SO_MARK on the raw socket: the client's RST filter lets these through
ACK_WAIT_S = 0.5  # the whole attack's data acknowledged within this, or it was cut
HANDSHAKE_WAIT_S = 1.0
FIN_WAIT_S = 0.5
# An attack connection the receiver has heard nothing on for this long is aborted: the
# sender is done with it (delivered, cut or given up) long before.
ATTACK_IDLE_S = HANDSHAKE_WAIT_S + ACK_WAIT_S + FIN_WAIT_S
TAG = re.compile(rb"\|SPMX(\d{10}):([A-Za-z0-9]+)\n")
TAG_MAX = 32  # longer than any tag: what is kept of a stream between reads

SYN, RST, PSH, ACK, FIN = 0x02, 0x04, 0x08, 0x10, 0x01


def tag(i: int, label: str) -> bytes:
    return b"|SPMX%010d:%s\n" % (i, label.encode())


def message(body: bytes, size: int, fill: bytes, i: int, label: str) -> bytes:
    """`body`, then filler up to `size` bytes in all, then the tag (never cut short)."""
    t = tag(i, label)
    return body + fill[: max(0, size - len(body) - len(t))] + t


def cuts(body_len: int, segments: int) -> list[int]:
    """Where to cut a message whose attack string is its first `body_len` bytes into
    `segments` pieces: evenly inside the attack string, so every cut splits it."""
    at = sorted({round(body_len * k / segments) for k in range(1, segments)})
    return [c for c in at if 0 < c < body_len]


def pieces(msg: bytes, body_len: int, segments: int, order: str) -> list[tuple[int, bytes]]:
    """(offset, data) of each piece, in the order they are sent."""
    bounds = [0, *cuts(body_len, segments), len(msg)]
    out = [(a, msg[a:b]) for a, b in itertools.pairwise(bounds)]
    return out[::-1] if order == "reverse" else out


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def segment(
    src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int, data: bytes
) -> bytes:
    """A TCP segment (header without options, then `data`), its checksum over the
    IPv4 or IPv6 pseudo-header."""
    head = struct.pack(
        "!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, 65535, 0, 0
    )
    length = len(head) + len(data)
    if ":" in src:
        pseudo = (
            socket.inet_pton(socket.AF_INET6, src)
            + socket.inet_pton(socket.AF_INET6, dst)
            + struct.pack("!IxxxB", length, socket.IPPROTO_TCP)
        )
    else:
        pseudo = (
            socket.inet_aton(src)
            + socket.inet_aton(dst)
            + struct.pack("!xBH", socket.IPPROTO_TCP, length)
        )
    c = checksum(pseudo + head + data)
    return head[:16] + struct.pack("!H", c) + head[18:] + data


def parse(packet: bytes, v6: bool) -> tuple[int, int, int, int, int, int] | None:
    """(sport, dport, seq, ack, flags, data length) of a received TCP packet (IPv4 raw
    sockets give the IP header, IPv6 ones do not)."""
    if not v6:
        if len(packet) < 20:
            return None
        ihl = (packet[0] & 0x0F) * 4
        total = struct.unpack("!H", packet[2:4])[0]
        packet = packet[ihl:total]
    if len(packet) < 20:
        return None
    sport, dport, seq, ack, off, flags = struct.unpack("!HHIIBB", packet[:14])
    return sport, dport, seq, ack, flags, len(packet) - (off >> 4) * 4


class Attacks:
    """The hand-spoken attack connections, driven from one thread: each is a small
    state machine (syn, data, fin) advanced by the server's answers and deadlines."""

    def __init__(self, a: dict[str, Any]) -> None:
        self.v6 = ":" in a["server"]
        fam = socket.AF_INET6 if self.v6 else socket.AF_INET
        # the canonical text, as recvfrom gives it
        self.server = socket.inet_ntop(fam, socket.inet_pton(fam, a["server"]))
        probe = socket.socket(fam, socket.SOCK_DGRAM)
        probe.connect((self.server, 9))
        self.src = probe.getsockname()[0]
        probe.close()
        self.sock = socket.socket(fam, socket.SOCK_RAW, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, MARK)
        self.sock.setblocking(False)
        self.segments, self.order = a["segments"], a["order"]
        self.conns: dict[int, dict[str, Any]] = {}
        self.reusable: dict[int, float] = {}  # port: when it may start a new attack
        # a random start: a new sender does not reuse the last one's ports first
        self.next_port = random.randint(*ATTACK_PORTS)
        self.outcome = {"delivered": 0, "cut": 0, "no_handshake": 0, "no_port": 0}
        self.pieces_sent = 0

    def _send(self, c: dict[str, Any], seq: int, flags: int, data: bytes = b"") -> None:
        seg = segment(self.src, self.server, c["sport"], c["dport"], seq, c["ack"], flags, data)
        # a failed send is counted by its outcome: the connection does not complete
        with contextlib.suppress(OSError):
            self.sock.sendto(seg, (self.server, 0))

    def _port(self) -> int | None:
        """A source port free on both ends: not in use here, and finished long enough
        ago that the receiver has aborted its side (ATTACK_IDLE_S). None when every
        port is busy (above about 400 / 2.5 s = 160 attacks/s), counted as no_port."""
        lo, hi = ATTACK_PORTS
        now = time.monotonic()
        for _ in range(hi - lo + 1):
            p = self.next_port
            self.next_port = lo if p >= hi else p + 1
            if p not in self.conns and now >= self.reusable.get(p, 0.0):
                return p
        return None

    def start(self, msg: bytes, body_len: int, dport: int) -> None:
        sport = self._port()
        if sport is None:
            self.outcome["no_port"] += 1
            return
        isn = random.getrandbits(32)
        c = {
            "sport": sport,
            "dport": dport,
            "isn": isn,
            "ack": 0,
            "msg": msg,
            "body_len": body_len,
            "state": "syn",
            "deadline": time.monotonic() + HANDSHAKE_WAIT_S,
        }
        self.conns[sport] = c
        self._send(c, isn, SYN)

    def _finish(self, sport: int, outcome: str | None, rst: bool) -> None:
        c = self.conns.pop(sport)
        self.reusable[sport] = time.monotonic() + ATTACK_IDLE_S + 0.5
        if rst:
            self._send(c, c["isn"] + 1 + len(c["msg"]), RST | ACK)
        if outcome:
            self.outcome[outcome] += 1

    def _on_packet(self, sport: int, seq: int, ack: int, flags: int, n: int) -> None:
        c = self.conns.get(sport)
        if c is None:
            return
        end = c["isn"] + 1 + len(c["msg"])
        if flags & RST:
            if c["state"] == "syn":
                self._finish(sport, "no_handshake", rst=False)
            elif c["state"] == "data":
                self._finish(sport, "cut", rst=False)
            else:
                self._finish(sport, None, rst=False)
            return
        if c["state"] == "syn" and flags & SYN and flags & ACK:
            c["ack"] = seq + 1
            self._send(c, c["isn"] + 1, ACK)
            for offset, data in pieces(c["msg"], c["body_len"], self.segments, self.order):
                self._send(c, c["isn"] + 1 + offset, PSH | ACK, data)
                self.pieces_sent += 1
            c["state"], c["deadline"] = "data", time.monotonic() + ACK_WAIT_S
            return
        if c["state"] == "data" and flags & ACK and (ack - end) & 0xFFFFFFFF < 1 << 31:
            self.outcome["delivered"] += 1
            self._send(c, end, FIN | ACK)
            c["state"], c["deadline"] = "fin", time.monotonic() + FIN_WAIT_S
            return
        if c["state"] == "fin" and flags & FIN:
            c["ack"] = seq + n + 1
            self._send(c, end + 1, ACK)
            self._finish(sport, None, rst=False)

    def poll(self, wait: float) -> None:
        """Read what the server answered (up to `wait` s), then act on deadlines."""
        r, _, _ = select.select([self.sock], [], [], max(0.0, wait))
        while r:
            try:
                packet, addr = self.sock.recvfrom(65535)
            except BlockingIOError:
                break
            if addr[0] != self.server:
                continue
            p = parse(packet, self.v6)
            if p is None:
                continue
            sport, dport, seq, ack, flags, n = p
            c = self.conns.get(dport)
            if c is not None and c["dport"] == sport:
                self._on_packet(dport, seq, ack, flags, n)
        now = time.monotonic()
        for sport, c in list(self.conns.items()):
            if now >= c["deadline"]:
                lost = {"syn": "no_handshake", "data": "cut", "fin": None}[c["state"]]
                self._finish(sport, lost, rst=True)


def send(a: dict[str, Any]) -> None:
    attacks = [(bytes.fromhex(x["payload"]), x["port"], str(x["sid"])) for x in a["attacks"]]
    size, share, rate = a["size"], a["share"], a["rate"]
    n = int(rate * a["duration"])
    fill = (b"abcdefghij0123456789" * (size // 20 + 2))[:size]
    clean = socket.create_connection((a["server"], a["port"]), timeout=5.0)
    clean.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    raw = Attacks(a)
    due: list[tuple[float, bytes, int, int]] = []  # (when, message, attack length, port)
    lock = threading.Lock()
    done = threading.Event()
    sent: dict[str, int] = {"clean": 0}
    errors = 0

    def attack_loop() -> None:
        while not (done.is_set() and not due and not raw.conns):
            with lock:
                now = time.monotonic()
                while due and due[0][0] <= now:
                    _, msg, body_len, port = due.pop(0)
                    raw.start(msg, body_len, port)
                wait = min(0.005, (due[0][0] - now) if due else 0.005)
            raw.poll(wait)

    t = threading.Thread(target=attack_loop, daemon=True)
    t.start()
    k = 0
    t0 = time.monotonic()
    for i in range(n):
        at = t0 + i / rate
        now = time.monotonic()
        if at > now:
            time.sleep(at - now)
        if int((i + 1) * share) > int(i * share):
            body, port, label = attacks[k % len(attacks)]
            k += 1
            with lock:
                due.append((at, message(body, size, fill, i, label), len(body), port))
            sent[label] = sent.get(label, 0) + 1
            continue
        try:
            clean.sendall(message(b"", size, fill, i, "clean"))
            sent["clean"] += 1
        except OSError:
            errors += 1
    seconds = time.monotonic() - t0
    done.set()
    t.join(timeout=HANDSHAKE_WAIT_S + ACK_WAIT_S + FIN_WAIT_S + 5.0)
    clean.close()
    print(
        json.dumps(
            {
                "sent": sent,
                "errors": errors,
                "messages": n,
                "seconds": seconds,
                "attack_outcomes": raw.outcome,
                "attack_pieces_sent": raw.pieces_sent,
            }
        ),
        flush=True,
    )


def receive(addr: str, ports: list[int]) -> None:
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    listeners = []
    for p in ports:
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, p))
        s.listen(1024)
        s.setblocking(False)
        listeners.append(s)
    got: dict[str, int] = {}
    conns: dict[socket.socket, bytes] = {}
    # attack connections: when each last moved (an idle one is aborted, below)
    attack_seen: dict[socket.socket, float] = {}

    def report(*_: object) -> None:
        print(json.dumps({"arrived": got, "untagged": 0, "open": len(conns)}), flush=True)

    def drop(s: socket.socket) -> None:
        conns.pop(s, None)
        attack_seen.pop(s, None)
        s.close()

    signal.signal(signal.SIGUSR1, report)
    print("ready", flush=True)
    while True:
        try:
            r, _, _ = select.select([*listeners, *conns], [], [], 0.2)
        except InterruptedError:
            continue
        now = time.monotonic()
        for s in r:
            if s in listeners:
                try:
                    c, peer = s.accept()
                except OSError:
                    continue
                c.setblocking(False)
                conns[c] = b""
                if ATTACK_PORTS[0] <= peer[1] <= ATTACK_PORTS[1]:
                    # Closed with a RST, never a FIN: its state is gone at once, so the
                    # port can start a new attack (an IPS that blocked the flow also
                    # drops the sender's RST: without this the socket would linger).
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    attack_seen[c] = now
                continue
            try:
                data = s.recv(1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                drop(s)
                continue
            if s in attack_seen:
                attack_seen[s] = now
            buf = conns[s] + data
            last = 0
            for m in TAG.finditer(buf):
                label = m.group(2).decode()
                got[label] = got.get(label, 0) + 1
                last = m.end()
            conns[s] = buf[max(last, len(buf) - TAG_MAX) :]
        for s, seen in list(attack_seen.items()):
            if now - seen > ATTACK_IDLE_S:
                drop(s)


def main(argv: list[str]) -> None:
    if argv[1] == "send":
        send(json.loads(argv[2]))
    else:
        receive(argv[2], [int(p) for p in argv[3].split(",")])


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main(sys.argv)
