"""RFC 3511 §5.9: fragmented UDP through the DUT with the shipped rule files.

The client sends datagrams of 4000 bytes (the sender's kernel cuts each into three
fragments at the 1500-byte MTU) and a small end marker; the server counts what it
reassembles. The custom kind with `counters = true` reads the rule file's named
counters and the DUT's /proc/net/snmp over the test:
- stateful (conntrack, so nf_defrag): the DUT reassembles each datagram
  (ReasmOKs), its rules see whole datagrams, and it fragments them again;
- stateless (notrack before defrag): the DUT reassembles nothing and forwards
  fragments as fragments, the later ones let through by their offset;
- stateless, ports only: the later fragments carry no UDP header, so the port rule
  cannot match them: they drop and nothing is delivered.
"""

from __future__ import annotations

import selectors
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.mechanisms.custom import Custom, CustomSpec
from secperf.mechanisms.dut_counters import ip_counters, ip_delta
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology

pytestmark = pytest.mark.netns

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SERVER = "198.18.2.2"
PORT = 5300  # the engine's first data port: the rule files' port range
SIZE = 4000  # UDP payload: 4008 B datagram, three fragments at MTU 1500
COUNT = 300
FRAGMENTS = 3

RECEIVER = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
s.settimeout(15.0)
n = size = 0
end = False
while True:
    try:
        data = s.recv(65535)
    except socket.timeout:
        break
    if data == b"END":
        end = True
        s.settimeout(0.3)  # a datagram completed just before the marker
        continue
    n += 1
    size += len(data)
print(n, size, int(end), flush=True)
"""

SENDER = r"""
import socket, sys, time
addr, port, size, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
payload = b"x" * size
for i in range(count):
    s.sendto(payload, (addr, port))
    if i % 20 == 19:
        time.sleep(0.002)  # paced: a burst must not overflow a veth backlog on a busy machine
for _ in range(3):
    s.sendto(b"END", (addr, port))
"""


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    state = tmp_path_factory.mktemp("state")
    with Testbed.build(Topology.standard(), state_dir=state) as tb:
        yield tb


def transfer(tb: Testbed) -> tuple[int, int]:
    """Send COUNT datagrams through the DUT; (datagrams, bytes) the server received."""
    proc = tb.host("server").spawn(
        [sys.executable, "-c", RECEIVER, str(PORT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        label="frag-receiver",
    )
    assert proc.stdout is not None
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout=10.0), "the receiver did not start"
        assert proc.stdout.readline().strip() == "ready"
        tb.host("client").run(
            [sys.executable, "-c", SENDER, SERVER, str(PORT), str(SIZE), str(COUNT)], timeout=30
        )
        assert sel.select(timeout=20.0), "the receiver did not finish"
        n, size, end = map(int, proc.stdout.readline().split())
        sel.close()
    finally:
        proc.stop(timeout=2.0)
    assert end == 1, "the end marker (one unfragmented datagram) did not arrive"
    return n, size


def with_rules(tb: Testbed, name: str, tmp_path: Path) -> tuple[tuple[int, int], dict[str, Any]]:
    dut = tb.host("dut")
    mech = Custom(CustomSpec(file=SCENARIOS / name, format="nft", counters=True))
    plan = traffic_plan(tb.topology, 4)
    ctx = MechanismContext(plan=plan, files_dir=tmp_path, name="v.0", table=f"secperf_{tb.prefix}")
    ctx.rendered = mech.render(ctx)
    try:
        mech.apply(dut, ctx)
        got = transfer(tb)
        observed = mech.observe()
    finally:
        reset_dut(dut, mech.backends())
    assert observed is not None and observed["kind"] == "custom"
    return got, observed


def counter(observed: dict[str, Any], name: str) -> int:
    return int(observed["nft_counters"][f"secperf_frag/{name}"]["packets"])


def test_plain_forwarding_reassembles_nothing(bed: Testbed) -> None:
    dut = bed.host("dut")
    reset_dut(dut, {"nft"})
    before = ip_counters(dut)
    n, size = transfer(bed)
    ip = ip_delta(before, ip_counters(dut))
    assert n >= COUNT * 0.95 and size == n * SIZE
    assert ip["ReasmOKs"] == 0 and ip["FragCreates"] == 0
    assert ip["ForwDatagrams"] >= n * FRAGMENTS  # fragments forwarded as they came


def test_stateful_rules_reassemble_at_the_dut(bed: Testbed, tmp_path: Path) -> None:
    (n, size), seen = with_rules(bed, "rfc3511-frag-stateful.nft", tmp_path)
    ip = seen["ip"]
    assert n >= COUNT * 0.95 and size == n * SIZE
    assert counter(seen, "fragments_in") >= n * FRAGMENTS
    assert ip["ReasmOKs"] >= n  # conntrack's defrag made whole datagrams
    assert ip["FragCreates"] >= n * FRAGMENTS  # and the forward path cut them again
    # the rules saw whole datagrams (and the end markers), with their ports
    assert n <= counter(seen, "udp_seen") <= COUNT + 3
    # every one matched its port (a UDP flow without replies stays `new`)
    assert counter(seen, "udp_ports_matched") == counter(seen, "udp_seen")
    assert counter(seen, "dropped") == 0


def test_stateless_rules_forward_fragments(bed: Testbed, tmp_path: Path) -> None:
    (n, size), seen = with_rules(bed, "rfc3511-frag-stateless.nft", tmp_path)
    ip = seen["ip"]
    assert n >= COUNT * 0.95 and size == n * SIZE
    assert ip["ReasmOKs"] == 0 and ip["FragCreates"] == 0
    assert counter(seen, "udp_seen") >= n * FRAGMENTS  # every fragment, one by one
    assert counter(seen, "later_fragments") >= n * (FRAGMENTS - 1)
    assert counter(seen, "udp_ports_matched") >= n  # first fragments (+ end markers)
    assert counter(seen, "dropped") == 0


def test_stateless_port_rule_drops_later_fragments(bed: Testbed, tmp_path: Path) -> None:
    (n, size), seen = with_rules(bed, "rfc3511-frag-ports.nft", tmp_path)
    assert n == 0 and size == 0  # no datagram could be reassembled at the server
    assert seen["ip"]["ReasmOKs"] == 0
    first = counter(seen, "udp_ports_matched")
    assert first >= COUNT * 0.95  # the first fragments matched their port
    assert counter(seen, "dropped") >= first * (FRAGMENTS - 1) * 0.95  # the rest: no port
    assert counter(seen, "fragments_in") >= COUNT * FRAGMENTS * 0.95
