"""The public rule sets of rules/public (ferm's examples, compiled by ferm) as the review
reads them: service names and ferm's long options, the router's DNAT answered behind
its DMZ leg, its SNAT address, the rules no flow can exercise, and a third interface
as a testbed host. (tests/netns/test_review_public.py reviews them end to end.)"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from secperf.errors import MechanismError, ScenarioError
from secperf.review import review_scenario
from secperf.rulesets.addrmap import AddressMap
from secperf.rulesets.flows import derive, dnat_served
from secperf.rulesets.load import load
from secperf.rulesets.model import Flow
from secperf.rulesets.placement import own_nat_sources, place, snat_sources
from secperf.rulesets.prefixes import named_prefixes
from secperf.testbed.topology import Topology

PUBLIC = Path(__file__).parent.parent.parent / "rules" / "public"
ROUTER = PUBLIC / "dmz-router.rules"


def test_the_router_reads_with_service_names_and_long_options() -> None:
    rs = load(ROUTER, "iptables")
    notes: list[str] = []
    flows = derive(rs, ["eth0", "eth1", "eth2"], notes)
    by_rule = {f.rule.line: f for f in flows if f.rule is not None}
    # `--dport ssh` from the admin host, `--dport domain` over UDP, `--dport auth`
    assert by_rule[22].dport == 22 and by_rule[22].src == "192.168.0.4"
    assert (by_rule[24].protocol, by_rule[24].dport) == ("udp", 53)
    assert by_rule[28].dport == 113
    # each DNAT to the DMZ leaves by eth2, the leg its FORWARD accept names
    dnat = [f for f in flows if f.served_by is not None]
    assert {f.served_by for f in dnat} == {"192.168.1.2", "192.168.1.3", "192.168.1.4"}
    assert {f.egress for f in dnat} == {"eth2"} and {f.ingress for f in dnat} == {"eth1"}
    # what no flow can exercise is said, with the line
    assert f"{ROUTER}:20: no flow: protocol esp is not sent" in notes
    assert f"{ROUTER}:21: no flow: protocol ah is not sent" in notes
    assert snat_sources(rs) == ["193.43.91.203"]


def test_an_unknown_service_name_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.rules"
    path.write_text(
        "*filter\n:INPUT DROP [0:0]\n-A INPUT --protocol tcp --dport nosuchsvc --jump ACCEPT\n"
        "COMMIT\n"
    )
    with pytest.raises(MechanismError) as err:
        derive(load(path, "iptables"), [])
    assert err.value.where == f"{path}:3" and "nosuchsvc" in err.value.message


def test_the_snat_address_is_the_rule_sets_host_and_no_one_elses() -> None:
    addresses = {"client": ["198.19.128.1"]}
    own_nat_sources(addresses, "dut", ["198.19.128.9"])
    assert addresses["dut"] == ["198.19.128.9"]
    with pytest.raises(MechanismError):
        own_nat_sources(addresses, "dut", ["198.19.128.1"])


def test_a_third_interface_is_a_third_host_linked_to_the_dut() -> None:
    data = review_scenario(
        ROUTER,
        PUBLIC / "dmz-router-https.rules",
        interfaces={"eth0": "client", "eth1": "server", "eth2": "dmz"},
    )
    hosts = {h["name"]: h["role"] for h in data["topology"]["hosts"]}
    assert hosts == {"client": "client", "dut": "dut", "server": "server", "dmz": "server"}
    assert ["dut", "dmz"] in [lk["between"] for lk in data["topology"]["links"]]
    two = review_scenario(ROUTER, ROUTER, interfaces={"eth0": "client", "eth1": "server"})
    assert "topology" not in two  # the standard plan
    with pytest.raises(ScenarioError):
        review_scenario(ROUTER, ROUTER, interfaces={"eth0": "client", "eth2": "DMZ!"})


def test_a_flow_files_flow_to_a_dnat_address_is_answered_where_the_dnat_sends_it() -> None:
    rs = load(ROUTER, "iptables")
    ifaces = ["eth0", "eth1", "eth2"]
    web = Flow("web", "tcp", "198.51.100.7", "193.43.91.203", 80, "eth1", None)
    served = dnat_served(rs, ifaces, web)
    assert (served.served_by, served.served_port, served.egress) == ("192.168.1.2", 80, "eth2")
    # no DNAT for the port, no ingress the rule names: as it was
    for f in (
        replace(web, dport=8443),
        replace(web, ingress=None),
        replace(web, ingress="eth0"),
    ):
        assert dnat_served(rs, ifaces, f) is f


def test_ufws_chains_return_local_flows_and_name_the_dhcp_source_port() -> None:
    rs = load(PUBLIC / "ufw-host.rules", "iptables")
    notes: list[str] = []
    flows = derive(rs, [], notes)
    by_dport = {(f.protocol, f.dport): f for f in flows if f.expect == "accept"}
    # ufw-not-local returns a flow to the DUT (addrtype LOCAL), so what follows is met
    assert {("udp", 5353), ("udp", 1900), ("tcp", 22), ("udp", 68)} <= set(by_dport)
    assert by_dport[("udp", 5353)].dst == "224.0.0.251"
    assert by_dport[("udp", 68)].sport == 67
    # its DROP of what is not local gets no probe: every input flow is local
    drop = next(r for r in rs.rules() if r.ref.chain == "ufw-not-local" and r.verdict == "drop")
    assert not [f for f in flows if f.rule == drop.ref]
    assert any(n.startswith(f"{drop.ref.where()}: no probe: a RETURN before it") for n in notes)
    assert any("addrtype dst-type BROADCAST" in n for n in notes)


def test_firewalld_s_forward_port_is_answered_behind_the_dmz_not_by_the_dut() -> None:
    """firewalld's forward-port names no destination: its flow is to the DUT's own
    address on wan0, rewritten to the DMZ server, which answers it (not the DUT)."""
    rs = load(PUBLIC / "firewalld-router.nft", "nft")
    ifaces = {"lan0": "client", "wan0": "server", "dmz0": "attacker"}  # a third host
    flows = [f for f in derive(rs, list(ifaces)) if f.served_by is not None]
    assert {(f.served_by, f.served_port) for f in flows} == {
        ("10.0.10.80", 80),
        ("10.0.10.80", 443),
    }
    assert all(f.to_dut and f.ingress == "wan0" and f.egress == "dmz0" for f in flows)
    amap = AddressMap.build(named_prefixes(rs))
    placed = place(flows, amap, ifaces, Topology.standard(attacker=True), "dut")
    target = amap.address("10.0.10.80")
    assert all(p.server == "attacker" and p.listen == target for p in placed), placed
