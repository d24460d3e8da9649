"""The graph testbed without root: [topology] parsing, addresses, routes, tags,
placement of mechanisms and workload endpoints, and the drawing."""

from __future__ import annotations

import tomllib

import pytest

from secperf.errors import ScenarioError, TestbedError
from secperf.mechanisms.registry import MECHANISMS
from secperf.plan.graph import build_topology
from secperf.plan.placement import endpoints, placement_hook, resolve_placement
from secperf.report.topology_svg import render_topology_svg
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import expand_scenario
from secperf.testbed.links import host_ip_lines
from secperf.testbed.topology import GraphHost, GraphLink, Topology

BASE = """
name = "g"
[variants.v]
mechanisms = []
[[workloads]]
kind = "rr"
"""

GATEWAYS = """
[topology]
hosts = [
  { name = "client", role = "client", zone = "inside" },
  { name = "gw-a", role = "gateway" },
  { name = "gw-b", role = "gateway" },
  { name = "server", role = "server", zone = "outside" },
]
links = [
  { between = ["client", "gw-a"] },
  { between = ["gw-a", "gw-b"], rate = "33.6kbit", queue = "200ms", offloads = "off" },
  { between = ["gw-b", "server"] },
]
"""

ZONES = """
[topology.zones.inside]
clients = 1
servers = 3
[topology.zones.dmz]
clients = 1
servers = 3
rate = "100mbit"
"""


def scenario(extra: str, base: str = BASE) -> Scenario:
    return Scenario.model_validate(tomllib.loads(base + extra))


def test_no_topology_is_the_standard_plan() -> None:
    assert build_topology(scenario("")) == Topology.standard()


def test_two_gateways_addresses_rates_and_routes() -> None:
    t = build_topology(scenario(GATEWAYS))
    assert t.roles == ("client", "gw-a", "gw-b", "server")
    assert [h.forwarding for h in t.hosts] == [False, True, True, False]
    link = t.link("gw-a-gw-b")
    assert (link.rate_bps, link.queue_s, link.offloads) == (33_600, 0.2, "off")
    assert t.link("client-gw-a").rate_bps is None  # a rate on one link only
    assert t.primary_address("client") == "198.18.1.2"  # the gateway is .1
    assert t.primary_address("server") == "198.18.3.2"
    assert t.gateway("client") == "198.18.1.1" and t.gateway("gw-a") is None
    # gw-a reaches the server's subnet through gw-b; the client by its default.
    assert t.routes("gw-a") == [("198.18.3.0/24", "198.18.2.2")]
    assert t.routes("gw-b") == [("198.18.1.0/24", "198.18.2.1")]
    assert t.routes("client") == []
    assert t.routes("gw-a", 6) == [("2001:2:0:3::/64", "2001:2:0:2::2")]
    lines = host_ip_lines(t, "gw-a", {"client-gw-a": "x-g1c", "gw-a-gw-b": "x-g1g2"})
    assert "route add 198.18.3.0/24 via 198.18.2.2 metric 100" in lines
    assert t.path("client", "server") == ["client", "gw-a", "gw-b", "server"]
    assert {t.tag(n) for n in t.roles} == {"c", "g1", "g2", "s"}


def test_zones_share_a_lan_each() -> None:
    t = build_topology(scenario(ZONES))
    assert t.zones == ("inside", "dmz")
    assert t.hosts_with(role="server", zone="dmz") == ("dmz-s1", "dmz-s2", "dmz-s3")
    assert t.host("inside-sw").is_switch
    # One /24 per zone, the router first.
    assert t.primary_address("inside-c1") == "198.18.1.2"
    assert t.primary_address("inside-s3") == "198.18.1.5"
    assert t.primary_address("dmz-s1") == "198.18.2.3"
    assert t.gateway("dmz-s2") == "198.18.2.1"
    assert t.link("dmz-sw-dmz-s1").rate_bps == 100_000_000
    assert t.link("inside-sw-inside-s1").rate_bps is None
    assert t.path("inside-c1", "inside-s2") == ["inside-c1", "inside-s2"]
    assert t.path("inside-c1", "dmz-s2") == ["inside-c1", "dut", "dmz-s2"]


def test_workloads_name_hosts_or_zones() -> None:
    sc = scenario(
        ZONES,
        base=BASE + '[[workloads]]\nkind = "stream"\nclients = ["dmz"]\nservers = ["inside-s2"]\n',
    )
    t = build_topology(sc)
    pts = expand_scenario(sc)
    assert endpoints(t, pts[0]) == ("inside-c1", "inside-s1")  # the first of each role
    assert endpoints(t, pts[1]) == ("dmz-c1", "inside-s2")


@pytest.mark.parametrize(
    ("clients", "message"),
    [("nowhere", "neither a host nor a zone"), ("dut", "runs no workload")],
)
def test_bad_endpoints_are_clear(clients: str, message: str) -> None:
    sc = scenario(ZONES, base=BASE + f'[[workloads]]\nkind = "rr"\nclients = ["{clients}"]\n')
    with pytest.raises(ScenarioError, match=message):
        endpoints(build_topology(sc), expand_scenario(sc)[1])


def test_several_endpoints_refused_with_a_fix() -> None:
    with pytest.raises(ValueError, match="one workload per pair"):
        scenario(ZONES, base=BASE + '[[workloads]]\nkind = "rr"\nclients = ["a", "b"]\n')


def test_placement() -> None:
    t = build_topology(scenario(GATEWAYS))
    ends = ("client", "server")
    assert resolve_placement(t, "gateways", ends, where="x") == ("gw-a", "gw-b")
    assert resolve_placement(t, "ends", ends, where="x") == ("client", "server")
    assert resolve_placement(t, ["gw-b", "gw-b"], ends, where="x") == ("gw-b",)
    with pytest.raises(ScenarioError, match="no such host"):
        resolve_placement(t, "dut", ends, where="x")
    acl, nat = MECHANISMS.get("acl"), MECHANISMS.get("nat")
    assert placement_hook(t, acl, ("gw-a", "gw-b"), where="x") == "forward"
    assert placement_hook(t, acl, ("server",), where="x") == "input"
    with pytest.raises(ScenarioError, match="mechanism nat needs a host that forwards"):
        placement_hook(t, nat, ("server",), where="x")
    with pytest.raises(ScenarioError, match="mixes"):
        placement_hook(t, acl, ("gw-a", "server"), where="x")


def test_topology_errors_are_clear() -> None:
    with pytest.raises(ScenarioError, match="does not declare"):
        build_topology(scenario(GATEWAYS), attacker=True)
    bad = GATEWAYS.replace('between = ["gw-b", "server"]', 'between = ["gw-b", "srv"]')
    with pytest.raises(ScenarioError, match="names host 'srv'"):
        build_topology(scenario(bad))
    with pytest.raises(ScenarioError, match="standard testbed"):
        build_topology(scenario('[testbed]\nbaseline = "direct"\n' + GATEWAYS))
    with pytest.raises(TestbedError, match="two switches"):
        Topology.graph([GraphHost("a", "switch"), GraphHost("b", "switch")], [GraphLink("a", "b")])


def test_drawing_names_hosts_rates_and_mechanisms() -> None:
    t = build_topology(scenario(GATEWAYS))
    svg = render_topology_svg(t.describe(), {"vpn": [{"kind": "acl", "hosts": ["gw-a", "gw-b"]}]})
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    for text in ("gw-a", "gw-b", "33.6 kbit/s", "offloads off", "acl (vpn)", "gateway"):
        assert text in svg


def test_a_host_that_carries_several_variants_names_each_kind_once_uncut() -> None:
    t = build_topology(scenario(GATEWAYS))
    placed = {
        "acl-linear": [{"kind": "acl", "hosts": ["gw-a"]}],
        "acl-set": [{"kind": "acl", "hosts": ["gw-a"]}],
        "vpn-wireguard": [{"kind": "vpn", "hosts": ["gw-a"]}],
    }
    svg = render_topology_svg(t.describe(), placed)
    assert "…" not in svg  # wrapped onto more lines, never cut
    assert svg.count(">acl (") == 1 and "acl-set)" in svg and "vpn (vpn-wireguard)" in svg
