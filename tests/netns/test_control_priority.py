"""On a shaped link, the engine's control connection goes first: a flood that fills a
10 Mbit/s link overflows the link's queue, and the control port's packets still pass,
none dropped, while the flood's are (secperf.testbed.links, `priority_ports`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from secperf.engine import CONTROL_PORT, EngineTest
from secperf.testbed.testbed import Host, Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.flood import flood_spec
from secperf.workloads.parts.probe import start_echo
from tests.netns.polling import wait_for

pytestmark = pytest.mark.netns

SERVER = "198.18.2.2"
EXCHANGES = r"""
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
ok, worst = 0, 0.0
for _ in range(n):
    t = time.monotonic()
    try:
        s = socket.create_connection((sys.argv[3], port), timeout=2.0)
        s.sendall(b"x" * 64); s.recv(64); s.close(); ok += 1
    except OSError:
        pass
    worst = max(worst, time.monotonic() - t)
print(ok, worst)
"""


def exchanges(client: Host, port: int, n: int) -> tuple[int, float]:
    """(connections that sent and got back 64 bytes, the slowest one's seconds)."""
    out = client.run(
        [sys.executable, "-c", EXCHANGES, str(port), str(n), SERVER], timeout=10 + 3 * n
    )
    ok, worst = out.stdout.split()
    return int(ok), float(worst)


def classes(host: Host, dev: str) -> dict[str, dict[str, int]]:
    """htb class -> its packets sent and dropped (`tc -s class show`; iproute2 6.1
    prints no JSON for classes under a tbf)."""
    out = host.run(["tc", "-s", "class", "show", "dev", dev]).stdout
    found = re.findall(
        r"class htb (\S+) .*?\n Sent \d+ bytes (\d+) pkt \(dropped (\d+),", out, re.DOTALL
    )
    return {h: {"packets": int(p), "drops": int(d)} for h, p, d in found}


def drops_of(host: Host, dev: str, handle: str, before: dict[str, dict[str, int]]) -> int:
    """The htb class's drops since `before`."""
    now = classes(host, dev).get(handle, {}).get("drops", 0)
    return now - before.get(handle, {}).get("drops", 0)


@pytest.mark.serial
def test_a_flood_that_fills_the_link_does_not_starve_the_control_port(tmp_path: Path) -> None:
    topo = Topology.standard(attacker=True, link_rate_bps=10_000_000)
    with Testbed.build(topo, state_dir=tmp_path / "state", priority_ports=(CONTROL_PORT,)) as tb:
        dut, client = tb.host("dut"), tb.host("client")
        to_server = tb.ifname("dut-server", "dut")
        qdiscs = dut.run(["tc", "qdisc", "show", "dev", to_server]).stdout
        assert "tbf" in qdiscs and "htb" in qdiscs, qdiscs  # tbf holds the rate, htb orders
        echo = start_echo(tb.host("server"), "0.0.0.0", [CONTROL_PORT, 5399])
        try:
            before = classes(dut, to_server)
            # ~60 k frames/s of 64 bytes: about 3x what 10 Mbit/s carries
            ctx = MeasureContext.on(tb, f"{SERVER}:{CONTROL_PORT}", keep=lambda _r: None)
            spec = flood_spec(ctx, flood="udp", rate_pps=60_000, duration=4.0, target="allowed")
            flood = EngineTest(tb.host("attacker"), spec)
            flood.wait_started()
            # the queue is full from the flood's first drop on
            wait_for(
                "the flood's class drops packets",
                lambda: drops_of(dut, to_server, "2:20", before) > 0,
                timeout=3.0,
            )
            control = exchanges(client, CONTROL_PORT, 10)
            after = classes(dut, to_server)
            result = flood.collect().result
        finally:
            echo.stop()
    assert int(result["packets"]) > 100_000, result  # the flood ran at its rate
    ok, worst = control
    assert ok == 10, control
    assert worst < 1.0, control  # never behind the flood's queue (50 ms) or a retransmit
    sent = {h: after[h]["packets"] - before.get(h, {}).get("packets", 0) for h in after}
    drops = {h: after[h]["drops"] - before.get(h, {}).get("drops", 0) for h in after}
    assert sent["2:10"] >= 10 * 3, (sent, drops)  # the control port's class carried them
    assert drops["2:10"] == 0, drops
    assert drops["2:20"] > 1000, drops  # the flood overflowed everything else's queue
