"""Every VPN implementation between the client and the server, across the forwarding DUT.

Per tunnel, with real daemons: an engine fixed transfer (`bytes`) through the inner
address (exactly that many bytes arrived, the far end's tunnel device received those
bytes plus at most 10 % of headers, and the near end's sent at least that), a
fixed transfer of a known text while tcpdump records the DUT's underlay
interface (no cleartext of it there, and with compression fewer bytes crossed
than were sent), memory of each end's daemon, and after stop(): the devices,
addresses and daemons are gone and nothing reaches the server at the inner
address any more.
"""

from __future__ import annotations

import random
import re
import selectors
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.engine import EngineServer, run_test, start_server
from secperf.errors import MechanismError
from secperf.mechanisms.vpn import (
    TunnelEnd,
    Vpn,
    daemon_cpu,
    device_counters,
    make,
    memory,
    tunnel_addresses,
    tunnel_name,
)
from secperf.mechanisms.vpn.ipsec import kernel_has_esp
from secperf.testbed.hosts import Host, ManagedProcess
from secperf.testbed.ledger import proc_state
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.parts.probe import EchoServer, probe, start_echo

pytestmark = pytest.mark.netns

CONTROL = 5201
DATA_PORTS = (5300, 5399)
SINK_PORT = 5400  # the fixed transfer's receiver
ECHO_PORT = 5401  # the denied-when-down probes' echo server
MARKER = b"SECPERFCLEARTEXT"
PAYLOAD_BYTES = 4 * 1024 * 1024
TRANSFER_BYTES = 8 * 1024 * 1024 + 4321  # the engine's fixed transfer (not a whole message)

WORDS = (  # noqa: SIM905 - a sentence reads better than 34 quoted words
    "the of and to in a is that for it as was with be by on not this are or from at which "
    "network packet firewall traffic server client measure security rule tunnel between"
).split()

SINK = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(8)
print("ready", flush=True)
while True:
    c, peer = s.accept()
    n = 0
    while True:
        data = c.recv(1 << 20)
        if not data:
            break
        n += len(data)
    c.close()
    print("received %d from %s" % (n, peer[0]), flush=True)
"""

SEND = r"""
import socket, sys
data = open(sys.argv[3], "rb").read()
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
c.sendall(data)
c.shutdown(socket.SHUT_WR)
c.settimeout(20)
c.recv(1)
c.close()
"""


def text_payload(size: int) -> bytes:
    """English-like text with a marker every line: compressible, and findable in a capture."""
    rng = random.Random(3)
    lines, total = [], 0
    while total < size:
        line = MARKER.decode() + " " + " ".join(rng.choice(WORDS) for _ in range(12)) + ".\n"
        lines.append(line)
        total += len(line)
    return "".join(lines).encode()[:size]


# -- the testbed, shared by the module -------------------------------------------------


class Sink:
    def __init__(self, proc: ManagedProcess) -> None:
        self.proc = proc

    def next_count(self, timeout: float = 30.0) -> tuple[int, str]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while time.monotonic() < deadline:
                if sel.select(timeout=deadline - time.monotonic()):
                    line = self.proc.stdout.readline()
                    if line.startswith("received"):
                        _, n, _, peer = line.split()
                        return int(n), peer
                    if not line:
                        break
        finally:
            sel.close()
        raise AssertionError("the sink reported no transfer")


@pytest.fixture(scope="module")
def bed(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Testbed, EngineServer, Sink, EchoServer, Path]]:
    state = tmp_path_factory.mktemp("state")
    payload = tmp_path_factory.mktemp("payload") / "text.bin"
    payload.write_bytes(text_payload(PAYLOAD_BYTES))
    with Testbed.build(Topology.standard(), state_dir=state) as tb:
        server = tb.host("server")
        engine = start_server(server, f"0.0.0.0:{CONTROL}", data_ports=DATA_PORTS)
        proc = server.spawn(
            ["python3", "-c", SINK, str(SINK_PORT)], stdout=subprocess.PIPE, label="sink"
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        echo = start_echo(server, "0.0.0.0", [ECHO_PORT])
        try:
            yield tb, engine, Sink(proc), echo, payload
        finally:
            echo.stop()
            proc.stop()
            engine.stop()


def tunnel_ends(tb: Testbed, v6: bool = False) -> tuple[TunnelEnd, TunnelEnd]:
    (a4, b4), (a6, b6) = tunnel_addresses(0)
    topo = tb.topology
    a = TunnelEnd(
        tb.host("client"), "client", topo.address("client", "client-dut"), a4, a6 if v6 else None
    )
    b = TunnelEnd(
        tb.host("server"), "server", topo.address("server", "dut-server"), b4, b6 if v6 else None
    )
    return a, b


# -- measuring helpers ----------------------------------------------------------------


class Capture:
    """tcpdump on one interface of a host, written to a file, started and stopped by us."""

    def __init__(self, host: Host, iface: str, path: Path) -> None:
        self.path = path
        self.log = path.with_suffix(".log")
        with self.log.open("w") as err:
            self.proc = host.spawn(
                ["tcpdump", "-i", iface, "-n", "-s", "0", "-B", "16384", "-U", "-w", str(path)],
                stderr=err,
                label="tcpdump",
            )
        deadline = time.monotonic() + 10
        while "listening on" not in self.log.read_text():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "tcpdump did not start"
            time.sleep(0.05)

    def stop(self) -> tuple[bytes, int, int]:
        """(all packet bytes concatenated, packets, dropped by the kernel)."""
        self.proc.stop(timeout=5.0)
        data = self.path.read_bytes()
        assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"), "not a pcap file"
        chunks, off, packets = [], 24, 0
        while off + 16 <= len(data):
            incl = int.from_bytes(data[off + 8 : off + 12], "little")
            chunks.append(data[off + 16 : off + 16 + incl])
            off += 16 + incl
            packets += 1
        text = self.log.read_text()
        dropped = 0
        for line in text.splitlines():
            if "dropped by kernel" in line:
                dropped = int(line.split()[0])
        return b"".join(chunks), packets, dropped


def transfer(tb: Testbed, sink: Sink, payload: Path, addr: str) -> int:
    """Send the payload from the client to `addr`; the bytes the server's sink received."""
    tb.host("client").run(["python3", "-c", SEND, addr, str(SINK_PORT), str(payload)], timeout=60.0)
    n, _peer = sink.next_count()
    return n


def dut_rx(tb: Testbed) -> int:
    return device_counters(tb.host("dut"), tb.ifname("client-dut", "dut")).rx_bytes


def link_names(host: Host) -> set[str]:
    out = host.run(["ip", "-o", "link", "show"]).stdout
    return {line.split(":", 2)[1].strip().split("@")[0] for line in out.splitlines()}


# -- the cases -------------------------------------------------------------------------

CASES: list[tuple[str, dict[str, Any]]] = [
    ("wireguard", {}),
    ("openvpn", {"cipher": "aes-256-gcm"}),
    ("openvpn", {"cipher": "aes-256-cbc", "compression": "lzo", "auth": "static"}),
    ("openvpn", {"cipher": "bf-cbc"}),  # document 003's Blowfish (OpenSSL's legacy provider)
    ("openvpn", {"cipher": "chacha20-poly1305", "compression": "lz4", "transport": "tcp"}),
    ("ipsec", {"cipher": "aes-128-gcm"}),
    ("ipsec", {"cipher": "aes-256-cbc"}),
    ("tinc", {"cipher": "aes-256-cbc", "compression": "zlib"}),
    ("tinc", {"cipher": "blowfish"}),  # OpenSSL 3's legacy provider, or tinc falls back to TCP
    ("vtun", {"cipher": "aes-128-ecb", "compression": "lzo"}),
    # encryption off: the capture must show the text (the paper's "encryption off")
    ("openvpn", {"cipher": "none"}),
    ("ipsec", {"cipher": "none"}),
    # the MAC alone: no cipher, HMAC-SHA256 (document 003's cause row for Blowfish)
    ("openvpn", {"cipher": "none", "digest": "sha256"}),
]


def case_id(case: tuple[str, dict[str, Any]]) -> str:
    impl, params = case
    return "-".join([impl, *(str(v) for v in params.values())])


def test_detector_sees_cleartext_without_a_tunnel(
    bed: tuple[Testbed, EngineServer, Sink, EchoServer, Path], tmp_path: Path
) -> None:
    """The control for the cleartext check: the same transfer on the plain path shows it."""
    tb, _engine, sink, _echo, payload = bed
    cap = Capture(tb.host("dut"), tb.ifname("client-dut", "dut"), tmp_path / "plain.pcap")
    before = dut_rx(tb)
    got = transfer(tb, sink, payload, tb.topology.address("server", "dut-server"))
    crossed = dut_rx(tb) - before
    data, packets, _dropped = cap.stop()
    assert got == PAYLOAD_BYTES
    assert packets > 10
    assert data.count(MARKER) > 1000, "the capture should show the plain text"
    assert crossed >= PAYLOAD_BYTES  # no compression on a plain path


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_tunnel_carries_traffic_encrypted_and_denies_when_down(
    bed: tuple[Testbed, EngineServer, Sink, EchoServer, Path],
    tmp_path: Path,
    case: tuple[str, dict[str, Any]],
) -> None:
    tb, _engine, sink, echo, payload = bed
    impl, params = case
    client, server = tb.host("client"), tb.host("server")
    a, b = tunnel_ends(tb)
    vpn: Vpn = make(impl, **params)
    vpn.render(a, b, tmp_path / "files", tunnel_name(tb.prefix, 0))
    links_before = {h.name: link_names(h) for h in (client, server)}
    vpn.start(a, b)
    try:
        devs = vpn.devices()
        assert set(devs) == {"client", "server"}
        info = vpn.describe()
        assert info["implementation"] == impl and info["version"] not in ("", "unknown")
        if impl == "ipsec":
            assert info["backend"] == "kernel-libipsec"  # this kernel has no ESP transform
        if impl == "openvpn":  # what the data channel runs, in openvpn's words
            want = {"none": "[null-cipher]"}.get(params["cipher"], params["cipher"].upper())
            lines = info["data_channel"]
            assert set(lines) == {"client", "server"}, lines
            mac = {"sha256": "SHA256"}.get(params.get("digest", ""), "")
            mac = mac or ("[null-digest]" if params["cipher"] == "none" else "")
            for line in lines.values():
                assert f"cipher '{want}'" in line and params.get("compression", "") in line
                assert not mac or f"auth '{mac}'" in line, line

        host_files = vpn.host_files()
        assert all(f.exists() for f in host_files), host_files
        if impl == "wireguard":
            assert len(host_files) == 2  # wireguard-go's sockets, named with the prefix
            assert all(tb.prefix in f.name for f in host_files)

        # (0) each end's daemon has resident memory
        mem = memory(vpn)
        assert set(mem) == {"client", "server"} and all(v > 1_000_000 for v in mem.values()), mem
        cpu0 = daemon_cpu(vpn)  # and a CPU time that the transfer below adds to
        assert set(cpu0) == {"client", "server"}, cpu0

        # (1) an engine fixed transfer (ttcp-style) of text to the server's inner
        # address: exactly N bytes arrive, and the tunnel devices carried them (the
        # inner packets: N plus TCP/IP headers and the engine's control exchange,
        # uncompressed whatever the daemon does to them on the underlay)
        c0 = device_counters(client, devs["client"])
        s0 = device_counters(server, devs["server"])
        spec = {
            "kind": "stream",
            "server": f"{b.ip4}:{CONTROL}",
            "bytes": TRANSFER_BYTES,
            "duration": 60.0,
            "interval": 0,
            "payload": "text",
        }
        res = run_test(client, spec).result
        assert res["receiver"]["bytes"] == TRANSFER_BYTES, res
        assert res["transfer"]["bytes"] == TRANSFER_BYTES
        assert 0 < res["transfer"]["seconds"] < 60 and res["transfer"]["kib_per_second"] > 100
        c1 = device_counters(client, devs["client"])
        s1 = device_counters(server, devs["server"])
        # The far end's device received the payload and its headers; the near end's sent
        # at least that (more when a daemon's full queue dropped packets and TCP resent).
        received = s1.rx_bytes - s0.rx_bytes
        assert TRANSFER_BYTES <= received <= TRANSFER_BYTES * 1.1 + 65536, (received, s0, s1)
        assert c1.tx_bytes - c0.tx_bytes >= received - 65536, (c0, c1, received)
        # each end's daemon worked for the transfer (its CPU time grew: tunnel_cpu_*)
        cpu1 = daemon_cpu(vpn)
        assert all(cpu1[end] > cpu0[end] for end in cpu0), (cpu0, cpu1)
        # every key exchange worked: no daemon fell back from its cipher (tinc carries
        # packets over its TCP meta connection when OpenSSL refuses the UDP key)
        for log in (tmp_path / "files").rglob("*.log"):
            assert "unsupported" not in log.read_text(errors="replace"), log

        # (2) a known text through the tunnel: not in clear on the DUT's underlay interface
        cap = Capture(tb.host("dut"), tb.ifname("client-dut", "dut"), tmp_path / "tunnel.pcap")
        before = dut_rx(tb)
        got = transfer(tb, sink, payload, b.ip4)
        crossed = dut_rx(tb) - before
        data, packets, dropped = cap.stop()
        assert got == PAYLOAD_BYTES
        assert packets > 10 and dropped == 0, (packets, dropped)
        assert len(data) >= crossed // 2, "the capture missed most of the transfer"
        if params.get("cipher") == "none":
            assert data.count(MARKER) > 1000, "with encryption off the text crosses in clear"
        else:
            assert MARKER not in data, "cleartext of the payload crossed the underlay"
            assert b"firewall traffic" not in data and b" the " not in data
        if params.get("compression", "none") != "none":
            assert crossed < PAYLOAD_BYTES, (crossed, PAYLOAD_BYTES)
        else:
            assert crossed >= PAYLOAD_BYTES, (crossed, PAYLOAD_BYTES)
    finally:
        pids = [p for ps in vpn.pids().values() for p in ps]
        vpn.stop()

    # (3) denied when down: no device, no daemon, no inner address; nothing reaches the server
    for host in (client, server):
        assert link_names(host) == links_before[host.name]
        assert "198.18.240." not in host.run(["ip", "-o", "addr", "show"]).stdout
        v6_default = host.run(["sysctl", "-n", "net.ipv6.conf.default.disable_ipv6"]).stdout
        assert v6_default.strip() == "0"
    assert all(proc_state(p) in (None, "Z", "X") for p in pids), pids
    assert memory(vpn) == {}
    assert not any(f.exists() for f in host_files), host_files
    seen = len(echo.seen())
    assert probe(client, b.ip4, ECHO_PORT, "tcp", timeout=1.0) is None
    assert probe(client, b.ip4, ECHO_PORT, "udp", timeout=1.0) is None
    assert len(echo.seen()) == seen, echo.seen()[seen:]
    assert client.run(["ping", "-c", "1", "-W", "1", b.ip4], check=False).returncode != 0


FAR_NET = "198.18.99.0/24"  # stands for a zone behind the server (site-to-site)
FAR_ADDR = "198.18.99.1"
ROUTED: list[tuple[str, dict[str, Any]]] = [
    ("wireguard", {}),
    ("openvpn", {}),
    ("ipsec", {}),
    ("tinc", {}),
    ("vtun", {}),
]


@pytest.mark.parametrize("case", ROUTED, ids=case_id)
def test_routes_reach_a_network_behind_the_peer_only_through_the_tunnel(
    bed: tuple[Testbed, EngineServer, Sink, EchoServer, Path],
    tmp_path: Path,
    case: tuple[str, dict[str, Any]],
) -> None:
    """The client's `routes` name a network behind the server (on its lo here): reached
    through the tunnel while it runs, unreachable before and after."""
    tb, _engine, _sink, echo, _payload = bed
    impl, params = case
    client, server = tb.host("client"), tb.host("server")
    a, b = tunnel_ends(tb)
    a = TunnelEnd(a.host, a.name, a.underlay, a.inner4, a.inner6, (FAR_NET,))
    server.run(["ip", "addr", "add", f"{FAR_ADDR}/32", "dev", "lo"])
    try:
        assert probe(client, FAR_ADDR, ECHO_PORT, "tcp", timeout=1.0) is None
        vpn = make(impl, **params)
        vpn.render(a, b, tmp_path, tunnel_name(tb.prefix, 0))
        vpn.start(a, b)
        try:
            seen = len(echo.seen())
            # the server sees the client's inner address: the packet came out of the tunnel
            assert probe(client, FAR_ADDR, ECHO_PORT, "tcp", timeout=2.0) == a.ip4
            assert ("tcp", a.ip4) in echo.seen()[seen:]
        finally:
            vpn.stop()
        assert probe(client, FAR_ADDR, ECHO_PORT, "tcp", timeout=1.0) is None
        assert FAR_NET not in client.run(["ip", "route", "show", "table", "all"]).stdout
    finally:
        server.run(["ip", "addr", "del", f"{FAR_ADDR}/32", "dev", "lo"])


@pytest.mark.parametrize("impl", ["wireguard", "openvpn", "ipsec", "tinc"])
def test_ipv6_underlay_carries_both_inner_families(
    bed: tuple[Testbed, EngineServer, Sink, EchoServer, Path], tmp_path: Path, impl: str
) -> None:
    """The tunnel between the ends' IPv6 addresses, with inner IPv4 and IPv6 (vtun has
    neither: its parser takes no IPv6 bindaddr, its device no IPv6)."""
    tb = bed[0]
    a, b = tunnel_ends(tb, v6=True)
    topo = tb.topology
    a = TunnelEnd(a.host, a.name, topo.address("client", "client-dut", 6), a.inner4, a.inner6)
    b = TunnelEnd(b.host, b.name, topo.address("server", "dut-server", 6), b.inner4, b.inner6)
    vpn = make(impl)
    vpn.render(a, b, tmp_path, tunnel_name(tb.prefix, 0))
    vpn.start(a, b)
    try:
        assert b.ip6 is not None
        for addr in (b.ip6, b.ip4):
            out = tb.host("client").run(["ping", "-c", "1", "-W", "2", addr], check=False)
            assert out.returncode == 0, out.stdout + out.stderr
    finally:
        vpn.stop()


def test_a_tunnel_that_cannot_come_up_names_the_daemon_and_leaves_nothing(
    bed: tuple[Testbed, EngineServer, Sink, EchoServer, Path], tmp_path: Path
) -> None:
    """The server end's underlay address is wrong: openvpn there cannot bind it."""
    tb = bed[0]
    a, b = tunnel_ends(tb)
    bad = TunnelEnd(b.host, b.name, "198.18.9.9", b.inner4)
    vpn = make("openvpn")
    vpn.render(a, bad, tmp_path, tunnel_name(tb.prefix, 0))
    with pytest.raises(MechanismError) as info:
        vpn.start(a, bad)
    assert "openvpn" in str(info.value) and "198.18.9.9" in str(info.value)
    assert vpn.pids() == {}
    for role in ("client", "server"):
        assert not any(n.startswith(tunnel_name(tb.prefix, 0)) for n in link_names(tb.host(role)))


def test_ipsec_transport_mode_is_refused_without_kernel_esp(
    bed: tuple[Testbed, EngineServer, Sink, EchoServer, Path], tmp_path: Path
) -> None:
    if kernel_has_esp():
        pytest.skip("this kernel has ESP: transport mode runs on XFRM here")
    tb = bed[0]
    a, b = tunnel_ends(tb)
    vpn = make("ipsec", mode="transport")
    vpn.render(a, b, tmp_path, tunnel_name(tb.prefix, 0))
    with pytest.raises(MechanismError, match="transport mode needs the kernel's ESP"):
        vpn.start(a, b)
    assert vpn.pids() == {}


def udp_buffers(host: Host, port: int) -> tuple[int, int]:
    """(receive, send) buffer of the UDP socket bound to `port` in `host`, as the
    kernel holds them (`ss -m`: rb and tb, twice what setsockopt asked)."""
    out = host.run(["ss", "-uanm", f"sport = :{port}"], check=True).stdout
    m = re.search(r"skmem:\(r\d+,rb(\d+),t\d+,tb(\d+)", out)
    assert m is not None, out
    return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize(("impl", "port"), [("openvpn", 1194), ("tinc", 655)])
def test_socket_buffer_sets_both_udp_buffers_of_each_daemon(
    bed: tuple[Testbed, EngineServer, Sink, EchoServer, Path],
    tmp_path: Path,
    impl: str,
    port: int,
) -> None:
    tb, *_ = bed
    a, b = tunnel_ends(tb)
    for asked in (None, 1_000_000):
        vpn = make(impl, socket_buffer=asked)
        vpn.render(a, b, tmp_path / f"files-{asked}", tunnel_name(tb.prefix, 0))
        vpn.start(a, b)
        try:
            for host in (tb.host("client"), tb.host("server")):
                rb, tb_ = udp_buffers(host, port)
                if asked is None:  # the namespace's default (net.core.rmem_default)
                    assert rb < 2 * 1_000_000 and tb_ < 2 * 1_000_000, (rb, tb_)
                else:  # SO_RCVBUF / SO_SNDBUF as asked (the kernel doubles them)
                    assert (rb, tb_) == (2 * asked, 2 * asked), (rb, tb_)
            assert vpn.describe()["socket_buffer"] == asked
        finally:
            vpn.stop()
