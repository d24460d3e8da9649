"""The ruleset mechanism's scenario keys, and the plan's rule-set step: one map for
every rule set of the scenario and its traffic, each flow placed on its hosts.

Loading (nft in a throwaway namespace) and deriving flows belong to other modules; here
the loaded rule set's prefixes and its flows are given, so the step itself is tested."""

from __future__ import annotations

import os
from collections.abc import Iterator
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from typer.testing import CliRunner

from secperf.cli import app
from secperf.errors import ScenarioError, SecperfError
from secperf.mechanisms.base import CheckContext
from secperf.mechanisms.registry import MECHANISMS
from secperf.mechanisms.ruleset import RuleSetSpec
from secperf.plan import Plan, review
from secperf.rulesets.model import Flow, Named, PlacedFlow, RuleSet
from secperf.rulesets.placement import host_addresses, interface_ends
from secperf.scenario.loader import load_scenario
from secperf.testbed import links
from secperf.testbed.topology import (
    MAPPED_HOSTS_NET4,
    Topology,
    check_testbed_address,
)
from secperf.workloads.base import EngineExecutor, WorkloadKind, WorkloadSpec
from secperf.workloads.registry import WORKLOADS

DATA = Path(__file__).parent.parent / "data" / "rulesets"
ROUTER = DATA / "router.nft"
PROPOSED = DATA / "router-proposed.nft"


class ReviewTraffic(WorkloadSpec):
    """A workload that sends a rule set's traffic (as the flows kind does)."""

    kind: Literal["rsprobe"]
    traffic: str = "coverage"
    sweepable: ClassVar[dict[str, str]] = {}

    def default_name(self) -> str:
        return "rsprobe"


PROBE_KIND = WorkloadKind(
    name="rsprobe",
    model=ReviewTraffic,
    executor=EngineExecutor(),
    rule_set_traffic=lambda spec: spec.traffic,
)

# The router's prefixes (what secperf.rulesets.prefixes collects from router.nft).
PREFIXES = [
    ("10.1.0.0/16", 7),
    ("10.1.5.200/32", 8),
    ("10.1.9.0/24", 14),
    ("192.168.77.5/32", 14),
    ("10.1.66.0/24", 35),
    ("203.0.113.10/32", 50),
]


def flow(name: str, **kw: Any) -> Flow:
    base: dict[str, Any] = {"protocol": "tcp", "ingress": "lan0", "egress": "wan0"}
    return Flow(name=name, **{**base, **kw})


# What secperf.rulesets.flows.derive makes of the router (the part these tests need).
ROUTER_FLOWS = [
    flow("web", src="10.1.2.3", dst="198.51.100.7", dport=80, expect="accept"),
    flow("smtp", src="10.1.2.3", dst="198.51.100.7", dport=25, expect="deny"),
    flow("ssh", src="10.1.9.7", dst="10.1.0.1", dport=22, egress=None, to_dut=True),
    flow(
        "dnat",
        src="198.51.100.7",
        dst="203.0.113.10",
        dport=80,
        ingress="wan0",
        egress="lan0",
        served_by="10.1.5.200",
        served_port=80,
    ),
]


def fake_rule_set(path: Path) -> RuleSet:
    return RuleSet(source=path, format="nft", chains=(), raw=[])


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """The plan step with the loader, the prefix collector and derive given: loads
    are counted, every rule set has the router's prefixes and flows (the proposed
    one without its DNS flow)."""
    loads: list[Path] = []

    def load(path: Path, fmt: str) -> RuleSet:
        loads.append(path)
        return fake_rule_set(path)

    def named(rs: RuleSet) -> list[Named]:
        return [Named(n, f"{rs.source.name}:{line}") for n, line in PREFIXES]

    def derive(
        rs: RuleSet, interfaces: Any, notes: list[str] | None = None, taken: Any = None
    ) -> list[Flow]:
        assert list(interfaces) == ["lan0", "wan0"]
        dns = flow("dns", protocol="udp", src="10.1.2.4", dst="9.9.9.9", dport=53)
        extra = [] if rs.source.name == PROPOSED.name else [dns]
        return [*ROUTER_FLOWS, *extra]

    monkeypatch.setattr(review, "load", load)
    monkeypatch.setattr(review, "named_prefixes", named)
    monkeypatch.setattr(review.derive_flows, "derive", derive, raising=False)
    with WORKLOADS.registered(PROBE_KIND):
        yield loads


def scenario(tmp_path: Path, *, traffic: str | None = "coverage", extra: str = "") -> Path:
    for f in (ROUTER, PROPOSED):
        (tmp_path / f.name).write_text(f.read_text())
    workload = (
        f'[[workloads]]\nkind = "rsprobe"\ntraffic = "{traffic}"\n'
        if traffic
        else '[[workloads]]\nkind = "rr"\n'
    )
    path = tmp_path / "review.toml"
    path.write_text(
        'name = "review"\n'
        "[variants.current]\n"
        'mechanisms = [{ kind = "ruleset", file = "router.nft", '
        'interfaces = { lan0 = "client", wan0 = "server" } }]\n'
        "[variants.proposed]\n"
        'mechanisms = [{ kind = "ruleset", file = "router-proposed.nft", '
        'interfaces = { lan0 = "client", wan0 = "server" }' + extra + " }]\n" + workload
    )
    return path


def test_two_variants_share_one_map_and_one_traffic(tmp_path: Path, stubbed: list[Path]) -> None:
    plan = Plan.of(load_scenario(scenario(tmp_path)))
    assert plan.rule_sets is not None
    assert sorted(p.name for p in stubbed) == ["router-proposed.nft", "router.nft"]
    # deduplicated: the router's flows once, and the DNS flow only one of them has
    names = [p.flow.name for p in plan.traffic.flows]
    assert names == ["web", "smtp", "ssh", "dnat", "dns"]
    # one map renders both variants: the same object in each mechanism's context
    plan.render(tmp_path / "files", "spx")
    maps = {id(ctx.address_map) for v in plan.variants for _m, ctx in v.mechanisms}
    assert maps == {id(plan.address_map)} and plan.address_map is not None
    assert all(
        ctx.plan.flows == plan.traffic.flows for v in plan.variants for _m, ctx in v.mechanisms
    )
    # each variant's rendered rule set has the map beside it
    kept = sorted(p.name for p in (tmp_path / "files").glob("*.addrmap.json"))
    assert kept == ["current.0.addrmap.json", "proposed.0.addrmap.json"]
    assert plan.rule_set_map() is not None and plan.rule_set_map()["lines"]  # type: ignore[index]


def test_the_router_flows_are_placed_on_the_hosts_behind_their_interfaces(
    tmp_path: Path, stubbed: list[Path]
) -> None:
    plan = Plan.of(load_scenario(scenario(tmp_path)))
    amap = plan.address_map
    by = {p.flow.name: p for p in plan.traffic.flows}
    web, ssh, dnat = by["web"], by["ssh"], by["dnat"]
    assert (web.client, web.server) == ("client", "server")
    assert (web.src, web.dst) == (amap.address("10.1.2.3"), amap.address("198.51.100.7"))
    assert (web.listen, web.listen_port) == (web.dst, 80)
    # a flow to the DUT is answered by the DUT
    assert (ssh.client, ssh.server, ssh.listen) == ("client", "dut", amap.address("10.1.0.1"))
    # after the DNAT: sent from the server side to the mapped 203.0.113.10, answered by
    # the client on the mapped 10.1.5.200
    assert (dnat.client, dnat.server) == ("server", "client")
    assert dnat.dst == amap.address("203.0.113.10")
    assert (dnat.listen, dnat.listen_port) == (amap.address("10.1.5.200"), 80)
    for p in plan.traffic.flows:
        for a in (p.src, p.dst, p.listen):
            assert ip_address(a) in MAPPED_HOSTS_NET4
            check_testbed_address(a)
    # the map keeps the router's relations: 10.1.9.0/24 inside 10.1.0.0/16, 10.1.5.200
    # in the LAN, 203.0.113.10 outside it
    lan = amap.network("10.1.0.0/16")
    assert ip_network(amap.network("10.1.9.0/24")).subnet_of(ip_network(lan))  # type: ignore[arg-type]
    assert ip_address(dnat.listen) in ip_network(lan)
    assert ip_address(dnat.dst) not in ip_network(lan)


def test_the_topology_carries_the_names_and_the_addresses(
    tmp_path: Path, stubbed: list[Path]
) -> None:
    plan = Plan.of(load_scenario(scenario(tmp_path)))
    topo = plan.topology
    assert topo.ifnames == {("dut", "client"): "lan0", ("dut", "server"): "wan0"}
    by = {p.flow.name: p for p in plan.traffic.flows}
    assert by["web"].src in topo.extra_addresses["client"]
    assert by["dnat"].listen in topo.extra_addresses["client"]
    assert by["web"].dst in topo.extra_addresses["server"]
    assert by["ssh"].listen in topo.extra_addresses["dut"]
    assert by["dnat"].dst not in {a for v in topo.extra_addresses.values() for a in v}
    # the DUT routes each end host's mapped address to it; end hosts send the range
    # to their gateway; the DUT owns its own on loopback
    dut = links.host_ip_lines(topo, "dut", {"client-dut": "lan0", "dut-server": "wan0"})
    assert f"route add {by['web'].src}/32 via 198.18.1.2" in dut
    assert f"route add {by['web'].dst}/32 via 198.18.2.2" in dut
    assert f"addr add {by['ssh'].listen}/32 dev lo" in dut
    client = links.host_ip_lines(topo, "client", {"client-dut": "spx-cd"})
    assert f"addr add {by['web'].src}/32 dev spx-cd" in client
    assert f"route add {MAPPED_HOSTS_NET4} via 198.18.1.1 metric 100" in client


def test_a_scenario_without_rule_sets_plans_as_before(tmp_path: Path) -> None:
    path = tmp_path / "plain.toml"
    path.write_text(
        'name = "p"\n[variants.acl]\nmechanisms = [{ kind = "acl", rules = 10 }]\n'
        '[[workloads]]\nkind = "rr"\n'
    )
    plan = Plan.of(load_scenario(path))
    assert plan.rule_sets is None and plan.traffic.flows == ()
    assert plan.topology == Topology.standard()
    assert plan.rule_set_map() is None


def test_a_rule_set_without_rule_set_traffic_is_mapped_and_named_only(
    tmp_path: Path, stubbed: list[Path]
) -> None:
    plan = Plan.of(load_scenario(scenario(tmp_path, traffic=None)))
    assert plan.rule_sets is not None and plan.traffic.flows == ()
    assert plan.topology.ifnames == {("dut", "client"): "lan0", ("dut", "server"): "wan0"}
    assert plan.topology.extra_addresses == {}
    assert plan.address_map.address("10.1.5.200")


def test_rule_set_traffic_without_a_rule_set_is_refused(
    tmp_path: Path, stubbed: list[Path]
) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        'name = "t"\n[variants.acl]\nmechanisms = [{ kind = "acl", rules = 1 }]\n'
        '[[workloads]]\nkind = "rsprobe"\n'
    )
    with pytest.raises(ScenarioError, match="no variant loads a rule set") as info:
        Plan.of(load_scenario(path))
    assert info.value.where == "workloads[0]"


def test_one_link_two_names_across_variants_is_refused(tmp_path: Path, stubbed: list[Path]) -> None:
    path = scenario(tmp_path)
    path.write_text(
        path.read_text().replace(
            '{ lan0 = "client", wan0 = "server" } }]\n[[',
            '{ lan1 = "client", wan0 = "server" } }]\n[[',
        )
    )
    with pytest.raises(ScenarioError, match=r"'lan0' in one rule set's interfaces and 'lan1'"):
        Plan.of(load_scenario(path))


# -- the schema and the check ------------------------------------------------------------


def spec(**kw: Any) -> RuleSetSpec:
    return RuleSetSpec.model_validate(
        {"kind": "ruleset", "file": str(ROUTER), **kw}, context={"check_files": False}
    )


def test_format_comes_from_the_suffix_or_is_required() -> None:
    assert spec().fmt == "nft"
    assert spec(file="rules.v4", format="iptables").fmt == "iptables"
    with pytest.raises(ValueError, match=r"format is required for rules\.v4"):
        spec(file="rules.v4")


def test_the_rule_set_is_loaded_on_one_host() -> None:
    with pytest.raises(ValueError, match="one host"):
        spec(on="ends")
    with pytest.raises(ValueError, match="not a host name"):
        spec(interfaces={"lan0": "Client!"})


@pytest.mark.parametrize(
    ("interfaces", "message"),
    [
        ({"lan0": "router"}, "which the testbed does not have"),
        ({"lan0": "dut"}, "has no link to dut"),
        ({"lan0": "client", "eth0": "client"}, "both name dut's link to client"),
        ({"a/b": "client"}, "cannot name an interface"),
    ],
)
def test_a_bad_interfaces_map_is_refused_with_its_key(
    interfaces: dict[str, str], message: str
) -> None:
    kind = MECHANISMS.get("ruleset")
    ctx = CheckContext("variants.v.mechanisms[0]", "s.toml", 4, Topology.standard())
    assert kind.check is not None
    with pytest.raises(ScenarioError, match=message) as info:
        kind.check(spec(interfaces=interfaces), ctx)
    assert (info.value.where or "").startswith("variants.v.mechanisms[0].interfaces.")


def test_a_host_with_no_link_to_the_rule_sets_host_is_refused() -> None:
    topo = Topology.standard(attacker=True)
    with pytest.raises(ScenarioError, match="no link to client"):
        interface_ends(topo, "client", {"x": "server"}, "k")
    assert interface_ends(topo, "dut", {"wan1": "attacker"}, "k") == {("dut", "attacker"): "wan1"}


def test_an_address_two_hosts_need_is_refused() -> None:
    a = PlacedFlow(
        ROUTER_FLOWS[0], "client", "server", "198.19.128.1", "198.19.128.2", "198.19.128.2", 80
    )
    b = PlacedFlow(
        ROUTER_FLOWS[1], "client", "server", "198.19.128.2", "198.19.128.3", "198.19.128.3", 80
    )
    with pytest.raises(SecperfError, match=r"198\.19\.128\.2 would be on server"):
        host_addresses([a, b])


# -- `secperf check`: a bad rule file or interfaces map is bad input (exit 3) ----------

BAD_NFT = (
    "table inet f {\n  chain c {\n    type filter hook forward priority 0;\n    acept\n  }\n}\n"
)


def check_exit(tmp_path: Path, entry: str) -> tuple[int, str]:
    (tmp_path / "bad.nft").write_text(BAD_NFT)
    (tmp_path / "good.nft").write_text(ROUTER.read_text())
    path = tmp_path / "s.toml"
    path.write_text(
        f'name = "s"\n[variants.v]\nmechanisms = [{entry}]\n[[workloads]]\nkind = "rr"\n'
    )
    result = CliRunner().invoke(app, ["check", str(path)])
    return result.exit_code, " ".join(result.output.split())


def test_check_refuses_an_interfaces_map_the_graph_cannot_carry(tmp_path: Path) -> None:
    code, out = check_exit(
        tmp_path, '{ kind = "ruleset", file = "good.nft", interfaces = { lan0 = "router" } }'
    )
    assert code == 3, out
    assert "variants.v.mechanisms[0].interfaces.lan0" in out and "'router'" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="nft checks a rule file as root only")
@pytest.mark.parametrize(
    "entry",
    [
        '{ kind = "ruleset", file = "bad.nft", interfaces = { lan0 = "client" } }',
        '{ kind = "custom", file = "bad.nft", format = "nft" }',
    ],
)
def test_check_exits_3_for_a_rule_file_nft_rejects(tmp_path: Path, entry: str) -> None:
    code, out = check_exit(tmp_path, entry)
    assert code == 3, out
    assert "bad.nft:4" in out  # nft's own file:line


@pytest.mark.skipif(os.geteuid() != 0, reason="nft loads a rule set in a namespace as root")
def test_the_router_coverage_traffic_is_placed_through_the_real_pipeline(tmp_path: Path) -> None:
    """Loaded by nft, derived, mapped and placed as a run does it."""
    with WORKLOADS.registered(PROBE_KIND):
        plan = Plan.of(load_scenario(scenario(tmp_path)))
    amap, flows = plan.address_map, plan.traffic.flows
    assert amap is not None and flows
    dnat = [p for p in flows if p.flow.served_by == "10.1.5.200"]
    assert dnat and all((p.client, p.server) == ("server", "client") for p in dnat)
    assert {p.listen for p in dnat} == {amap.address("10.1.5.200")}
    assert {p.dst for p in dnat} == {amap.address("203.0.113.10")}
    to_dut = [p for p in flows if p.flow.to_dut]
    assert to_dut and {p.server for p in to_dut} == {"dut"}
    owners = plan.topology.extra_owner(4)
    for p in flows:
        assert owners[p.src] == p.client and owners[p.listen] == p.server


def test_an_interface_towards_a_switch_is_refused() -> None:
    topo = Topology.zoned({"inside": (2, 0), "outside": (0, 1)})
    with pytest.raises(ScenarioError, match="a switch"):
        interface_ends(topo, "dut", {"lan0": "inside-sw"}, "k")
    assert interface_ends(topo, "dut", {"wan0": "outside-s1"}, "k") == {
        ("dut", "outside-s1"): "wan0"
    }


def test_the_users_own_flows_are_placed_with_the_same_map(
    tmp_path: Path, stubbed: list[Path]
) -> None:
    (tmp_path / "mine.csv").write_text(
        "protocol,src,dst,dport,weight,request,response,ingress,egress,name\n"
        "tcp,10.1.2.3,198.51.100.9,443,3,100,1KiB,lan0,wan0,https\n"
        "udp,10.1.9.7,10.1.0.1,53,1,40,80,lan0,,dns\n"
    )
    plan = Plan.of(load_scenario(scenario(tmp_path, traffic="mine.csv")))
    amap = plan.address_map
    assert amap is not None
    https, dns = plan.traffic.flows
    assert (https.flow.name, https.client, https.server) == ("https", "client", "server")
    assert https.src == amap.address("10.1.2.3") and https.flow.origin == "csv:2"
    # no egress and no DUT flag: answered by the other side's host
    assert (dns.client, dns.server) == ("client", "server")
    # the rule sets' prefixes are in the same map as the user's addresses
    assert ip_address(https.src) in ip_network(amap.network("10.1.0.0/16"))


def test_a_missing_traffic_file_is_refused_with_its_key(
    tmp_path: Path, stubbed: list[Path]
) -> None:
    with pytest.raises(ScenarioError, match=r"traffic file 'gone\.csv' not found") as info:
        Plan.of(load_scenario(scenario(tmp_path, traffic="gone.csv")))
    assert info.value.where == "workloads[0].traffic"


@pytest.mark.skipif(os.geteuid() != 0, reason="nft loads a rule set in a namespace as root")
def test_check_names_an_interface_the_map_lacks(tmp_path: Path) -> None:
    kind = MECHANISMS.get("ruleset")
    assert kind.kernel_check is not None
    ctx = CheckContext("variants.v.mechanisms[0]", "s.toml", 4, Topology.standard())
    kind.kernel_check(spec(interfaces={"lan0": "client", "wan0": "server"}), ctx)
    with pytest.raises(ScenarioError, match="matches interface 'wan0'") as info:
        kind.kernel_check(spec(interfaces={"lan0": "client"}), ctx)
    assert info.value.where == "variants.v.mechanisms[0].interfaces"
    assert 'wan0 = "HOST"' in (info.value.fix or "")
