"""Run inside an empty network namespace (`ip netns exec NS python -m
tests.netns.guardprobe JSON`): speaks the engine's control protocol to an `engine
serve` in that namespace, then sends datagrams to the test's data port from a
"victim" address that is neither the control connection's peer nor a testbed
address, and counts what the server sends back to it. Prints one JSON object.

Nothing can leave: the namespace has only `lo` (with the addresses the test put
on it), so even a server that answered everyone would answer inside it.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time
from typing import Any

HELLO = b"secperf-hello-v1"


def control(server: tuple[str, int], bind_ip: str, spec: dict[str, Any]) -> tuple[Any, int]:
    """A control connection from `bind_ip`, set up with `spec`: (connection, data port)."""
    conn = socket.create_connection(server, timeout=5, source_address=(bind_ip, 0))
    conn.sendall(json.dumps({"op": "setup", "spec": spec}).encode() + b"\n")
    reply = json.loads(conn.makefile("rb").readline())
    if not reply.get("ok"):
        raise SystemExit(json.dumps({"setup_refused": reply}))
    return conn, int(reply["data_port"])


def udp_from(ip: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, 0))
    s.settimeout(0.05)
    return s


def received(sock: socket.socket, within: float) -> int:
    """Datagrams that reach `sock` within `within` seconds."""
    n = 0
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            sock.recv(65536)
            n += 1
        except TimeoutError:
            continue
    return n


def probe(seq: int) -> bytes:
    """A latency probe (wire/probe.rs): sequence number, no stamp."""
    return struct.pack("<QQH", seq, 0, 0)


def main(args: dict[str, Any]) -> dict[str, Any]:
    server = (args["server_ip"], int(args["port"]))
    spec = dict(args["spec"], server=f"{server[0]}:{server[1]}")
    conn, port = control(server, args["peer_ip"], spec)
    data = (server[0], port)
    victim, peer = udp_from(args["victim_ip"]), udp_from(args["peer_ip"])
    out: dict[str, Any] = {"data_port": port}
    what = args["send"]
    payload = {"rr": b"x", "hello": HELLO, "probe": probe(1)}[what]
    for _ in range(5):
        victim.sendto(payload if what != "probe" else probe(_ + 1), data)
    out["victim"] = received(victim, 1.0)
    for _ in range(5):
        peer.sendto(payload if what != "probe" else probe(_ + 100), data)
    out["peer"] = received(peer, 1.0)
    conn.close()
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
