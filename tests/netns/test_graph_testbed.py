"""The testbed as a graph, in real namespaces: two gateways, two zones of three
servers, a rate on one link only, a mechanism on a host that is not the DUT, and a
scenario with a [topology] run end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.mechanisms.acl import Acl, AclSpec
from secperf.mechanisms.base import MechanismContext, traffic_plan
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import GraphHost, GraphLink, Topology
from secperf.workloads.parts.probe import SINK_SCRIPT, SOURCE_SCRIPT, EchoServer, probe, start_echo
from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns

PORT = 5201
RATE = 8_000_000  # the gateway-to-gateway link only

GATEWAYS = Topology.graph(
    [
        GraphHost("client", "client", "inside"),
        GraphHost("gw-a", "gateway"),
        GraphHost("gw-b", "gateway"),
        GraphHost("server", "server", "outside"),
    ],
    [
        GraphLink("client", "gw-a"),
        GraphLink("gw-a", "gw-b", rate_bps=RATE),
        GraphLink("gw-b", "server"),
    ],
)


def two_zones() -> Topology:
    return Topology.zoned({"inside": (1, 3), "dmz": (1, 3)})


def ping(tb: Testbed, host: str, addr: str, ttl: int = 64) -> bool:
    argv = ["ping", "-n", "-c", "1", "-W", "1", "-t", str(ttl), addr]
    return tb.host(host).run(argv, check=False).returncode == 0


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, EchoServer]]:
    with Testbed.build(GATEWAYS, state_dir=tmp_path_factory.mktemp("state")) as tb:
        yield tb, start_echo(tb.host("server"), "0.0.0.0", [PORT])


def test_two_gateways_carry_traffic_over_both(gateways: tuple[Testbed, EchoServer]) -> None:
    tb, _ = gateways
    topo = tb.topology
    server = topo.primary_address("server")
    assert topo.path("client", "server") == ["client", "gw-a", "gw-b", "server"]
    # The server sees the client's own address: routed, not translated.
    assert probe(tb.host("client"), server, PORT) == topo.primary_address("client")
    # Three hops: a TTL of 2 dies at the second gateway, 3 arrives.
    assert not ping(tb, "client", server, ttl=2)
    assert ping(tb, "client", server, ttl=3)
    # And the path really is through the gateways: stop gw-b forwarding, nothing passes.
    tb.host("gw-b").run(["sysctl", "-qw", "net.ipv4.ip_forward=0"])
    try:
        assert probe(tb.host("client"), server, PORT, timeout=0.5) is None
    finally:
        tb.host("gw-b").run(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
    assert probe(tb.host("client"), server, PORT) is not None


@pytest.mark.serial
def test_rate_on_one_link_only(gateways: tuple[Testbed, EchoServer]) -> None:
    tb, _ = gateways
    for link in tb.topology.links:
        for end in link.ends():
            dev = tb.ifname(link.name, end)
            qdisc = tb.host(end).run(["tc", "qdisc", "show", "dev", dev]).stdout
            assert ("tbf" in qdisc) == (link.name == "gw-a-gw-b"), (link.name, end, qdisc)
    sink = tb.host("server").spawn(
        [sys.executable, "-c", SINK_SCRIPT], stdout=subprocess.PIPE, label="sink"
    )
    assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
    server = tb.topology.primary_address("server")
    tb.host("client").run([sys.executable, "-c", SOURCE_SCRIPT, server, "1.5"])
    nbytes, seconds = sink.stdout.readline().split()
    bps = int(nbytes) * 8 / float(seconds)
    assert 0.5 * RATE < bps < 1.2 * RATE, f"{bps / 1e6:.1f} Mbit/s through an 8 Mbit/s link"


def test_acl_on_the_server_itself(gateways: tuple[Testbed, EchoServer], tmp_path: Path) -> None:
    """A mechanism on a host that is not a router: an ACL in the server's input hook
    lets the measured ports in, drops the rest, and no gateway holds a rule."""
    tb, _ = gateways
    topo = tb.topology
    server_addr = topo.primary_address("server")
    echo = start_echo(tb.host("server"), "0.0.0.0", [7000])
    try:
        ctx = MechanismContext(
            plan=traffic_plan(topo, 4),
            files_dir=tmp_path,
            name="host-fw.0",
            table=f"secperf_{tb.prefix}",
            hosts=("server",),
            hook="input",
        )
        acl = Acl(AclSpec(rules=100))
        ctx.rendered = acl.render(ctx)
        acl.apply(tb.host("server"), ctx)
        try:
            assert "hook input" in tb.host("server").run(["nft", "list", "ruleset"]).stdout
            for gw in ("gw-a", "gw-b"):
                assert tb.host(gw).run(["nft", "list", "ruleset"]).stdout.strip() == ""
            assert probe(tb.host("client"), server_addr, PORT) == topo.primary_address("client")
            assert probe(tb.host("client"), server_addr, 7000, timeout=0.5) is None
        finally:
            tb.host("server").run(["nft", "flush", "ruleset"])
        assert probe(tb.host("client"), server_addr, 7000) is not None
    finally:
        echo.stop()


def test_two_zones_three_servers_each(tmp_path: Path, state_dir: Path) -> None:
    topo = two_zones()
    assert topo.zones == ("inside", "dmz")
    with Testbed.build(topo, state_dir=state_dir) as tb:
        servers = {z: [f"{z}-s{i}" for i in (1, 2, 3)] for z in ("inside", "dmz")}
        echoes = [
            start_echo(tb.host(s), "0.0.0.0", [PORT]) for zone in servers.values() for s in zone
        ]
        try:
            # The DUT drops everything it would forward: only traffic within a zone passes.
            tb.host("dut").run(
                ["nft", "-f", "-"],
                input="table inet t { chain f { type filter hook forward priority 0; "
                "policy drop; }; }\n",
            )
            for zone, other in (("inside", "dmz"), ("dmz", "inside")):
                client = f"{zone}-c1"
                mine = topo.primary_address(client)
                for s in servers[zone]:  # same LAN: the switch, never the DUT
                    assert probe(tb.host(client), topo.primary_address(s), PORT) == mine
                    assert topo.path(client, s) == [client, s]
                for s in servers[other]:
                    assert (
                        probe(tb.host(client), topo.primary_address(s), PORT, timeout=0.5) is None
                    )
            tb.host("dut").run(["nft", "flush", "ruleset"])
            # Across zones, both ways, through the DUT: TTL 1 dies there, 2 arrives.
            for zone, other in (("inside", "dmz"), ("dmz", "inside")):
                client = f"{zone}-c1"
                for s in servers[other]:
                    addr = topo.primary_address(s)
                    assert topo.path(client, s) == [client, "dut", s]
                    assert probe(tb.host(client), addr, PORT) == topo.primary_address(client)
                    assert not ping(tb, client, addr, ttl=1)
                    assert ping(tb, client, addr, ttl=2)
        finally:
            for e in echoes:
                e.stop()


SCENARIO = """
name = "graph-e2e"
[repeat]
min = 2
max = 2
# the graph is the subject: no traced or attribution round (tests/netns/test_attribution.py)
trace_softirq = false
attribution = false
[timing]
duration = "0.5s"
warmup = "0.1s"
[topology]
hosts = [
  {{ name = "client", role = "client", zone = "inside" }},
  {{ name = "gw-a", role = "gateway" }},
  {{ name = "gw-b", role = "gateway" }},
  {{ name = "server", role = "server", zone = "outside" }},
]
links = [
  {{ between = ["client", "gw-a"] }},
  {{ between = ["gw-a", "gw-b"], rate = "50mbit" }},
  {{ between = ["gw-b", "server"] }},
]
[variants.acl-on-gw-b]
mechanisms = [{{ kind = "acl", rules = 50, on = "gw-b" }}]
[variants.host-firewall]
mechanisms = [{{ kind = "acl", rules = 50, on = "server" }}]
[[workloads]]
kind = "stream"
protocol = "tcp"
"""


@pytest.mark.serial
def test_scenario_with_topology_runs_end_to_end(tmp_path: Path, state_dir: Path) -> None:
    path = tmp_path / "graph.toml"
    path.write_text(SCENARIO.format())
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "secperf", "run", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = only_run(out)
    meta = json.loads((run_dir / "run.json").read_text())
    assert [h["name"] for h in meta["topology"]["hosts"]] == ["client", "gw-a", "gw-b", "server"]
    rates = {lk["name"]: lk["rate_bps"] for lk in meta["topology"]["links"]}
    assert rates == {"client-gw-a": None, "gw-a-gw-b": 50_000_000, "gw-b-server": None}
    assert meta["placements"]["acl-on-gw-b"] == [{"kind": "acl", "hosts": ["gw-b"]}]
    assert meta["placements"]["host-firewall"] == [{"kind": "acl", "hosts": ["server"]}]
    results = [
        json.loads(line)
        for line in (run_dir / "records.jsonl").read_text().splitlines()
        if '"type": "result"' in line or '"type":"result"' in line
    ]
    bps = [r["record"]["bits_per_second"] for r in results]
    assert results and all(b and 10e6 < b < 55e6 for b in bps), bps
    html = (run_dir / "report.html").read_text()
    assert "<svg" in html and "gw-a" in html and "50 Mbit/s" in html
