"""The testbed for real: namespaces, traffic through the dut, shaping, teardown, clean."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from secperf.errors import TestbedError
from secperf.testbed import ManagedProcess, Testbed, Topology, clean, new_prefix
from secperf.testbed.ledger import proc_state
from secperf.workloads.parts.probe import SINK_SCRIPT, SOURCE_SCRIPT

pytestmark = pytest.mark.netns

REPO = Path(__file__).resolve().parents[2]

# Accepts connections and answers each with the peer address it saw, so the client
# learns both that the path works and that nothing rewrote its source.
ECHO_SERVER = """
import socket, sys
addr = sys.argv[1]
s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, 5000))
s.listen()
print("ready", flush=True)
while True:
    c, peer = s.accept()
    c.sendall(peer[0].encode())
    c.close()
"""

CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], 5000), timeout=float(sys.argv[2]))
c.settimeout(float(sys.argv[2]))
print(c.recv(100).decode())
"""

# Receives one stream, reports bytes and the time from first to last byte.


def read_line(stream: IO[Any] | None, timeout: float = 5.0) -> str:
    """One line from a child's stdout, polling with a deadline (never a bare sleep)."""
    assert stream is not None
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            raise AssertionError(f"no output within {timeout} s")
        return str(stream.readline()).strip()
    finally:
        sel.close()


def wait_until(cond: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return bool(cond())


def netns_with(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix + "-")]


def root_links_with(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if prefix in line]


def gone(pid: int) -> bool:
    return proc_state(pid) in (None, "Z", "X")


def start_echo(tb: Testbed, addr: str) -> ManagedProcess:
    proc = tb.host("server").spawn(
        [sys.executable, "-c", ECHO_SERVER, addr], stdout=subprocess.PIPE, label="echo"
    )
    assert read_line(proc.stdout) == "ready"
    return proc


def connect(tb: Testbed, role: str, addr: str, timeout: float = 2.0) -> str | None:
    """The source address the server saw, or None if the connection failed."""
    res = tb.host(role).run(
        [sys.executable, "-c", CLIENT, addr, str(timeout)], check=False, timeout=timeout + 5
    )
    return res.stdout.strip() if res.returncode == 0 else None


def sysctl(tb: Testbed, role: str, path: str) -> str:
    return tb.host(role).run(["cat", f"/proc/sys/{path}"]).stdout.strip()


@pytest.fixture
def testbed() -> Iterator[Testbed]:
    with Testbed.build(Topology.standard()) as tb:
        yield tb


def test_traffic_crosses_the_dut(testbed: Testbed) -> None:
    tb = testbed
    start_echo(tb, "::")  # [::] accepts IPv4 too
    assert connect(tb, "client", tb.topology.server_address()) in (
        "198.18.1.2",
        "::ffff:198.18.1.2",
    )
    assert connect(tb, "client", tb.topology.server_address(6)) == "2001:2:0:1::2"
    # Forwarding on in the dut only.
    assert sysctl(tb, "dut", "net/ipv4/ip_forward") == "1"
    assert sysctl(tb, "dut", "net/ipv6/conf/all/forwarding") == "1"
    for role in ("client", "server"):
        assert sysctl(tb, role, "net/ipv4/ip_forward") == "0"
        assert sysctl(tb, role, "net/ipv6/conf/all/forwarding") == "0"
    # The path really is the dut: without its forwarding, nothing arrives.
    tb.host("dut").run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=0"])
    assert connect(tb, "client", tb.topology.server_address(), timeout=0.5) is None


def test_build_teardown_complete(state_dir: Path) -> None:
    # How fast is measured by bench/testbed_build.py, not here: a timed test fails
    # on a loaded machine without anything being wrong.
    tb = Testbed.build(Topology.standard())
    sleeper = tb.host("server").spawn(["sleep", "60"], label="sleep")
    assert not gone(sleeper.pid)
    assert sorted(netns_with(tb.prefix)) == sorted(f"{tb.prefix}-{r}" for r in tb.topology.roles)
    ledger = tb.ledger.path
    assert ledger.exists()
    removed = tb.teardown()
    assert netns_with(tb.prefix) == []
    assert root_links_with(tb.prefix) == []
    assert gone(sleeper.pid)
    assert f"process {sleeper.pid} (sleep)" in removed
    assert not ledger.exists()
    assert tb.teardown() == []  # idempotent


def test_no_interface_ever_in_root_namespace(testbed: Testbed) -> None:
    assert root_links_with(testbed.prefix) == []
    out = testbed.host("client").run(["ip", "-o", "link"]).stdout
    assert testbed.ifname("client-dut", "client") in out


def test_sigkilled_owner_is_cleaned(state_dir: Path) -> None:
    prefix = new_prefix()
    script = f"""
import json, time
from secperf.testbed import Testbed, Topology
tb = Testbed.build(Topology.standard(), prefix={prefix!r})
p = tb.host("server").spawn(["sleep", "60"], label="sleep")
print(json.dumps({{"pid": p.pid}}), flush=True)
time.sleep(60)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    owner = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        sleeper = json.loads(read_line(owner.stdout, timeout=10))["pid"]
    finally:
        owner.kill()
        owner.wait()
    assert len(netns_with(prefix)) == 3 and not gone(sleeper)
    removed = clean()
    assert netns_with(prefix) == []
    assert wait_until(lambda: gone(sleeper))
    assert f"netns {prefix}-dut" in removed
    assert any(r.startswith(f"process {sleeper} ") for r in removed)
    assert not (state_dir / f"{prefix}.jsonl").exists()


def test_clean_leaves_live_owner_alone(testbed: Testbed) -> None:
    removed = clean()
    assert not any(testbed.prefix in r for r in removed)
    assert len(netns_with(testbed.prefix)) == 3
    assert testbed.ledger.path.exists()
    assert testbed.ledger.owner_alive()


def test_failed_build_tears_down_and_names_command(state_dir: Path) -> None:
    prefix = new_prefix()
    # Someone else's namespace in the way: the build must fail and must not delete it.
    subprocess.run(["ip", "netns", "add", f"{prefix}-server"], check=True)
    try:
        with pytest.raises(TestbedError) as err:
            Testbed.build(Topology.standard(), prefix=prefix)
        assert f"ip netns add {prefix}-server" in str(err.value)
        assert netns_with(prefix) == [f"{prefix}-server"]
        assert not (state_dir / f"{prefix}.jsonl").exists()
    finally:
        subprocess.run(["ip", "netns", "del", f"{prefix}-server"], check=True)


def test_rate_shapes_both_ends(state_dir: Path) -> None:
    with Testbed.build(Topology.standard(link_rate_bps=100_000_000)) as tb:
        for link in tb.topology.links:
            for role in link.ends():
                out = (
                    tb.host(role)
                    .run(["tc", "qdisc", "show", "dev", tb.ifname(link.name, role)])
                    .stdout
                )
                assert "tbf" in out and "rate 100Mbit" in out, (link.name, role, out)


@pytest.mark.serial
def test_rate_holds_on_real_traffic(state_dir: Path) -> None:
    rate = 20_000_000
    with Testbed.build(Topology.standard(link_rate_bps=rate)) as tb:
        sink = tb.host("server").spawn(
            [sys.executable, "-c", SINK_SCRIPT], stdout=subprocess.PIPE, label="sink"
        )
        assert read_line(sink.stdout) == "ready"
        tb.host("client").run(
            [sys.executable, "-c", SOURCE_SCRIPT, tb.topology.server_address(), "1.0"]
        )
        nbytes, seconds = read_line(sink.stdout).split()
        bps = int(nbytes) * 8 / float(seconds)
        assert 0.5 * rate < bps < 1.15 * rate, f"{bps / 1e6:.1f} Mbit/s through a 20 Mbit/s link"


def test_direct_path_skips_the_dut(state_dir: Path) -> None:
    with Testbed.build(Topology.standard(direct=True)) as tb:
        start_echo(tb, "::")
        tb.host("dut").run(
            ["sysctl", "-q", "-w", "net.ipv4.ip_forward=0", "net.ipv6.conf.all.forwarding=0"]
        )
        direct = tb.topology.server_address(via="direct")
        assert direct == "198.18.3.2"
        assert connect(tb, "client", direct) in ("198.18.3.1", "::ffff:198.18.3.1")
        assert connect(tb, "client", tb.topology.server_address(6, via="direct")) == "2001:2:0:3::1"
        assert connect(tb, "client", tb.topology.server_address(), timeout=0.5) is None


def test_stop_escalates_to_sigkill(testbed: Testbed) -> None:
    stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    stubborn += "print('ready', flush=True)\ntime.sleep(60)\n"
    proc = testbed.host("client").spawn(
        [sys.executable, "-c", stubborn], stdout=subprocess.PIPE, label="stubborn"
    )
    assert read_line(proc.stdout) == "ready"
    t0 = time.monotonic()
    assert proc.stop(timeout=0.2) == -signal.SIGKILL
    assert time.monotonic() - t0 < 2.0
    assert not any(e["type"] == "process" for e in testbed.ledger.live_entries())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_tears_down(state_dir: Path, sig: int) -> None:
    prefix = new_prefix()
    script = f"""
import time
from secperf.testbed import Testbed, Topology, install_teardown_handlers
tb = Testbed.build(Topology.standard(), prefix={prefix!r})
try:
    with install_teardown_handlers(tb):
        print("ready", flush=True)
        time.sleep(60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise SystemExit(130)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    owner = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert read_line(owner.stdout, timeout=10) == "ready"
        assert len(netns_with(prefix)) == 3
        owner.send_signal(sig)
        code = owner.wait(timeout=10)
    finally:
        owner.kill()
        owner.wait()
    assert code == (143 if sig == signal.SIGTERM else 130)
    assert netns_with(prefix) == []
    assert not (state_dir / f"{prefix}.jsonl").exists()
