"""Several generators: one UDP stream point driven from two client hosts of a zone at
once, through the DUT to one server. The merged result's rate is the sum of the two
generators' (each paced at its own rate), and the server's interface counters saw
that many datagrams arrive. (Over SSH: tests/netns/test_ssh_remote.py, end to end.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from secperf.engine import CONTROL_PORT, DATA_PORTS, start_server
from secperf.plan.placement import endpoints, generator_hosts
from secperf.scenario.loader import parse_scenario
from secperf.scenario.sweep import expand_scenario
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.registry import WORKLOADS

pytestmark = pytest.mark.netns

RATE = 40_000_000  # bit/s per generator
MESSAGE = 1000  # bytes per datagram

SCENARIO = f"""
name = "two-generators"
[variants.none]
mechanisms = []
[topology.zones.inside]
clients = 2
[topology.zones.outside]
servers = 1
[[workloads]]
kind = "stream"
protocol = "udp"
message = {MESSAGE}
rate = {RATE}
duration = "2s"
warmup = "0.5s"
clients = ["inside"]
servers = ["outside"]
generators = 2
"""


@pytest.mark.serial
def test_two_generators_report_the_summed_rate(tmp_path: Path, state_dir: Path) -> None:
    scenario = parse_scenario(SCENARIO, tmp_path / "two.toml")
    point = expand_scenario(scenario)[0]
    topo = Topology.zoned({"inside": (2, 0), "outside": (0, 1)})
    gens = generator_hosts(topo, point)
    client, server = endpoints(topo, point)
    assert gens == ("inside-c1", "inside-c2") and server == "outside-s1"

    kept: list[dict[str, object]] = []
    with Testbed.build(topo, state_dir=state_dir) as tb:
        srv = start_server(tb.host(server), f"0.0.0.0:{CONTROL_PORT}", data_ports=DATA_PORTS)
        try:
            target = f"{topo.primary_address(server)}:{CONTROL_PORT}"
            ctx = MeasureContext.on(tb, target, keep=kept.append, client=client, server=server)
            ctx.generators = list(gens)
            dev = tb.ifname(topo.links_of(server)[0].name, server)
            before = tb.host(server).interface_counters()[dev]
            result = WORKLOADS.get("stream").executor.measure(ctx, point)
            after = tb.host(server).interface_counters()[dev]
        finally:
            srv.stop()

    gen = result["generators"]
    assert isinstance(gen, dict)
    assert gen["count"] == 2 and gen["hosts"] == list(gens)
    each = gen["each"]
    # the summed rate is the sum of what each generator's receiver measured ...
    assert result["bits_per_second"] == pytest.approx(sum(e["bits_per_second"] for e in each))
    # ... both really sent: each near its paced RATE (loose: a loaded 2-CPU machine
    # loses some datagrams at the receiver), the sum near twice that
    for e in each:
        assert e["bits_per_second"] > 0.5 * RATE
    assert result["bits_per_second"] > 1.5 * max(e["bits_per_second"] for e in each)
    assert result["bits_per_second"] == pytest.approx(2 * RATE, rel=0.3)
    # the server's interface counted the datagrams both generators sent (whole test,
    # warm-up included; a few control-connection packets beside them), and the summed
    # receivers got no more than arrived
    sent = result["totals"]["client"]["messages_sent"]
    arrived = after.rx_packets - before.rx_packets
    assert arrived == pytest.approx(sent, rel=0.03)
    assert result["totals"]["server"]["messages_received"] <= arrived
    # every generator's own records are kept, nested; the merged result is top level
    roles = {r.get("role") for r in kept if r.get("type") == "side"}
    assert roles == {"generator-inside-c1", "generator-inside-c2"}
    assert [r for r in kept if r.get("type") == "result"] == [result]
