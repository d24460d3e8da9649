"""Small real-traffic probes for checks that run inside a measurement (fail-closed).

An echo server answers each TCP connection and UDP datagram with the source
address it saw (so a probe learns what NAT did) and reports every arrival on
stdout, so a check knows that a packet reached the far host even when its
answer could not come back. Both are `python3 -c` programs run in their host:
no engine, no extra tool.
"""

from __future__ import annotations

import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from secperf.errors import SecperfError
from secperf.testbed.hosts import Host, ManagedProcess

ECHO_SERVER = r"""
import socket, sys, threading
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
lock = threading.Lock()
def say(text):
    with lock:
        print(text, flush=True)
def tcp(port):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], port)); s.listen(64)
    while True:
        c, peer = s.accept()
        say("seen tcp %s" % peer[0])
        c.settimeout(2.0)
        try:
            c.recv(64); c.sendall(("%s" % peer[0]).encode())
        except OSError:
            pass
        c.close()
def udp(port):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.bind((sys.argv[1], port))
    while True:
        data, peer = s.recvfrom(64)
        say("seen udp %s" % peer[0])
        s.sendto(("%s" % peer[0]).encode(), peer)
for p in map(int, sys.argv[2:]):
    threading.Thread(target=tcp, args=(p,), daemon=True).start()
    threading.Thread(target=udp, args=(p,), daemon=True).start()
say("ready")
threading.Event().wait()
"""

# A TCP sink on port 5001: prints "ready", then the bytes it received and the
# seconds between the first and the last (tests of link rates).
SINK_SCRIPT = """
import socket, time
s = socket.socket()
s.bind(("0.0.0.0", 5001))
s.listen()
print("ready", flush=True)
c, _ = s.accept()
n, first, last = 0, None, None
while True:
    b = c.recv(65536)
    if not b:
        break
    now = time.monotonic()
    first = first or now
    last = now
    n += len(b)
print(n, last - first, flush=True)
"""

# Sends 64 KiB writes to ADDR:5001 for SECONDS (argv 1 and 2), then closes.
SOURCE_SCRIPT = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5001), timeout=5)
buf = b"x" * 65536
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    c.sendall(buf)
c.close()
"""


PROBE = r"""
import socket, sys
addr, port, proto = sys.argv[1], int(sys.argv[2]), sys.argv[3]
family = socket.AF_INET6 if ":" in addr else socket.AF_INET
try:
    if proto == "tcp":
        s = socket.create_connection((addr, port), timeout=float(sys.argv[4]))
        s.sendall(b"x"); print(s.recv(64).decode())
    else:
        s = socket.socket(family, socket.SOCK_DGRAM); s.settimeout(float(sys.argv[4]))
        s.sendto(b"x", (addr, port)); print(s.recvfrom(64)[0].decode())
except OSError as exc:
    print("FAIL", type(exc).__name__); sys.exit(1)
"""


class EchoServer:
    """A running echo server and the arrivals it has reported so far."""

    def __init__(self, proc: ManagedProcess, where: str) -> None:
        self.proc = proc
        self.where = where
        self._seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        for line in out:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "seen":
                with self._lock:
                    self._seen.append((parts[1], parts[2]))

    def seen(self) -> list[tuple[str, str]]:
        """(protocol, source address) of every arrival so far, oldest first."""
        with self._lock:
            return list(self._seen)

    def stop(self) -> None:
        self.proc.stop(timeout=2.0)
        self._reader.join(timeout=2.0)


def start_echo(host: Host, addr: str, ports: Sequence[int], timeout: float = 10.0) -> EchoServer:
    """Start the echo server on `addr` and `ports` in `host`; return once it listens."""
    proc = host.spawn(
        [sys.executable, "-c", ECHO_SERVER, addr, *map(str, ports)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        label="echo",
    )
    assert proc.stdout is not None
    line = ""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if sel.select(timeout=max(0.0, deadline - time.monotonic())):
                line = proc.stdout.readline()
                break
    finally:
        sel.close()
    if line.strip() != "ready":
        proc.stop(timeout=1.0)
        err = proc.stderr.read().strip()[-500:] if proc.stderr is not None else ""
        raise SecperfError(
            f"the probe echo server in {host.name} did not start: {err or line.strip()!r}",
            where=f"{host.name} {addr} ports {list(ports)}",
            fix="pick a free port for the probes (the workload's `port` key)",
        )
    return EchoServer(proc, host.name)


def probe(host: Host, addr: str, port: int, proto: str = "tcp", timeout: float = 1.0) -> str | None:
    """The source address the far echo server saw, or None if no answer came back."""
    out = host.run(
        [sys.executable, "-c", PROBE, addr, str(port), proto, str(timeout)],
        check=False,
        timeout=timeout + 10,
    )
    return out.stdout.strip() if out.returncode == 0 else None


@dataclass(frozen=True)
class Probe:
    """One attempt to open a new connection (TCP) or flow (UDP) from `src` to `addr`."""

    src: str  # role of the host it starts in
    addr: str
    port: int
    proto: str
    timeout: float


@dataclass
class ProbeResult:
    probe: Probe
    answer: str | None  # the source address the far end saw; None = no answer

    @property
    def answered(self) -> bool:
        return self.answer is not None

    def as_json(self) -> dict[str, object]:
        p = self.probe
        return {
            "from": p.src,
            "to": p.addr,
            "port": p.port,
            "proto": p.proto,
            "answered": self.answered,
            "seen_as": self.answer,
        }


@dataclass
class ProbeSet:
    """Probes run together (their timeouts overlap, so a blocked path costs one timeout)."""

    probes: list[Probe] = field(default_factory=list)

    def run(self, hosts: dict[str, Host]) -> list[ProbeResult]:
        if not self.probes:
            return []
        with ThreadPoolExecutor(max_workers=len(self.probes)) as pool:
            answers = list(
                pool.map(
                    lambda p: probe(hosts[p.src], p.addr, p.port, p.proto, p.timeout),
                    self.probes,
                )
            )
        return [ProbeResult(p, a) for p, a in zip(self.probes, answers, strict=True)]
