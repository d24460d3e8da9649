"""Tiny real-traffic probes for namespace tests: a TCP/UDP echo server and a client.

They run as `python3 -c` inside a host, so a test checks what really crosses the
testbed without needing the engine.
"""

from __future__ import annotations

import subprocess
import sys
import time

from secperf.testbed.netns import Host, ManagedProcess

ECHO_SERVER = r"""
import socket, sys, threading
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
def tcp(port):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], port)); s.listen(64)
    while True:
        c, peer = s.accept()
        c.recv(64); c.sendall(("%s" % peer[0]).encode()); c.close()
def udp(port):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.bind((sys.argv[1], port))
    while True:
        data, peer = s.recvfrom(64); s.sendto(("%s" % peer[0]).encode(), peer)
for p in map(int, sys.argv[2:]):
    threading.Thread(target=tcp, args=(p,), daemon=True).start()
    threading.Thread(target=udp, args=(p,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
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


def start_echo(host: Host, addr: str, ports: list[int]) -> ManagedProcess:
    """Start the echo server and wait (polling its stdout) until it listens."""
    proc = host.spawn(
        [sys.executable, "-c", ECHO_SERVER, addr, *map(str, ports)],
        stdout=subprocess.PIPE,
        label="echo",
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until "ready" or EOF; bounded by the server start
    assert line.strip() == "ready", f"echo server did not start: {line!r}"
    return proc


def probe(host: Host, addr: str, port: int, proto: str = "tcp", timeout: float = 1.0) -> str | None:
    """The source address the server saw, or None if the flow did not get through."""
    out = host.run(
        [sys.executable, "-c", PROBE, addr, str(port), proto, str(timeout)],
        check=False,
        timeout=timeout + 10,
    )
    return out.stdout.strip() if out.returncode == 0 else None


def wait_until(predicate: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(0.02)
    return False
