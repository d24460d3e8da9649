"""The traffic of a rule-set review: flows derived from the router's rules, and the
user's own traffic read from a CSV, a conntrack dump and a pcap."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
from pathlib import Path

import dpkt
import pytest

from secperf.errors import MechanismError, ScenarioError
from secperf.rulesets.flows import (
    check_weights,
    derive,
    read_conntrack,
    read_csv,
    read_pcap,
    sides,
)
from secperf.rulesets.load import load
from secperf.rulesets.model import Flow, RuleSet

DATA = Path(__file__).parent.parent / "data" / "rulesets"
IFACES = ["lo", "lan0", "wan0"]
needs_nft = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("unshare") is None,
    reason="loading an nft file needs root, nft and unshare",
)


def _in(addr: str, net: str) -> bool:
    return ipaddress.ip_address(addr) in ipaddress.ip_network(net)


@pytest.fixture(scope="module")
def router() -> RuleSet:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("loading an nft file needs root and unshare")
    return load(DATA / "router.nft", "nft")


def _by_line(flows: list[Flow]) -> dict[int | None, Flow]:
    return {f.rule.line if f.rule else None: f for f in flows if f.rule is not None}


@needs_nft
def test_a_flow_for_every_accepting_rule_and_a_probe_for_every_denying_one(
    router: RuleSet,
) -> None:
    notes: list[str] = []
    flows = derive(router, IFACES, notes)
    accepts = {f.rule.line for f in flows if f.expect == "accept" and f.rule}
    # every accept but loopback (24) and established/related (25, 33), which no new flow is
    assert accepts == {18, 27, 28, 36, 37, 39, 47, 52}
    denies = {f.rule.line for f in flows if f.expect == "deny" and f.rule}
    assert denies == {19, 35, 38, 40}  # `ct state invalid drop` (34) gets no probe
    assert any(":34: no flow" in n and "invalid" in n for n in notes)
    assert any(":25: no flow" in n for n in notes)
    assert any(":28: limit" in n for n in notes)  # kept, but noted
    policy = [f for f in flows if f.origin == "coverage:policy"]
    assert len(policy) == 2 and all(f.rule is None and f.expect == "deny" for f in policy)
    assert {f.to_dut for f in policy} == {True, False}
    # the policy probes' port is one no rule names
    assert all(f.dport not in (22, 25, 53, 80, 443) for f in policy)


@needs_nft
def test_flows_are_named_in_rule_order_and_stable(router: RuleSet) -> None:
    flows = derive(router, IFACES)
    assert [f.name for f in flows] == [f"f{i}" for i in range(1, len(flows) + 1)]
    assert flows == derive(router, IFACES)
    lines = [f.rule.line for f in flows if f.rule]
    assert lines == sorted(lines)  # one file: rule order is line order
    assert flows[-1].rule is None  # policy probes last


@needs_nft
def test_the_dnat_flow_goes_to_the_public_address_served_inside(router: RuleSet) -> None:
    f = _by_line(derive(router, IFACES))[47]
    assert (f.protocol, f.dst, f.dport) == ("tcp", "203.0.113.10", 80)
    assert (f.served_by, f.served_port) == ("10.1.5.200", 80)
    assert (f.ingress, f.egress, f.to_dut) == ("wan0", "lan0", False)
    assert not _in(f.src, "10.1.0.0/16")  # from the internet
    # the forward rule that accepts DNAT'd traffic gets the same flow
    g = _by_line(derive(router, IFACES))[39]
    assert (g.dst, g.served_by, g.expect) == ("203.0.113.10", "10.1.5.200", "accept")


@needs_nft
def test_the_ssh_flow_is_to_the_dut_from_an_admin(router: RuleSet) -> None:
    f = _by_line(derive(router, IFACES))[18]
    assert f.to_dut and f.ingress == "lan0" and f.egress is None
    assert (f.protocol, f.dport) == ("tcp", 22)  # inherited from the jump into ssh_in
    assert _in(f.src, "10.1.9.0/24") or f.src == "192.168.77.5"
    probe = _by_line(derive(router, IFACES))[19]  # ssh_in's `counter drop`
    assert probe.expect == "deny" and probe.dport == 22
    assert not _in(probe.src, "10.1.9.0/24") and probe.src != "192.168.77.5"


@needs_nft
def test_addresses_land_where_their_rule_means(router: RuleSet) -> None:
    flows = _by_line(derive(router, IFACES))
    probe = flows[35]  # iifname "lan0" ip saddr 10.1.66.0/24 drop
    assert _in(probe.src, "10.1.66.0/24") and probe.ingress == "lan0"
    web = flows[36]  # $LAN tcp dport { 80, 443 } accept
    assert _in(web.src, "10.1.0.0/16") and not _in(web.src, "10.1.66.0/24")
    assert (web.protocol, web.dport, web.ingress, web.egress) == ("tcp", 80, "lan0", "wan0")
    assert not _in(web.dst, "10.0.0.0/8")  # lan0 -> wan0: the internet
    dns = flows[27]  # input: iifname "lan0" udp dport 53 accept, source unconstrained
    assert _in(dns.src, "10.1.0.0/16") and not _in(dns.src, "10.1.66.0/24") and dns.to_dut
    masq = flows[52]  # a flow the forward chain lets out, so its source NAT is seen
    assert masq.egress == "wan0" and _in(masq.src, "10.1.0.0/16") and masq.dport == 80
    smtp = flows[38]
    assert smtp.expect == "deny" and smtp.dport == 25 and not _in(smtp.src, "10.1.66.0/24")


def test_the_iptables_router_gives_the_same_coverage() -> None:
    rs = load(DATA / "router.iptables", "iptables")
    flows = derive(rs, IFACES)
    accepts = {f.rule.line for f in flows if f.expect == "accept" and f.rule}
    assert accepts == {8, 9, 19, 20, 24, 25, 27, 29, 30}
    by = _by_line(flows)
    assert (by[8].dst, by[8].served_by) == ("203.0.113.10", "10.1.5.200")
    assert _in(by[23].src, "10.1.66.0/24") and by[23].expect == "deny"


def test_a_probe_shadowed_by_an_earlier_accept_is_left_out_with_a_note(tmp_path: Path) -> None:
    f = tmp_path / "shadow.rules"
    f.write_text(
        "*filter\n:FORWARD DROP [0:0]\n"
        "-A FORWARD -i lan0 -o wan0 -s 10.0.0.0/8 -p tcp -j ACCEPT\n"
        "-A FORWARD -i lan0 -o wan0 -s 10.1.0.0/16 -p tcp --dport 25 -j DROP\n"
        "-A FORWARD -i lan0 -o wan0 -s 10.2.0.0/16 -p udp --dport 53 -j DROP\nCOMMIT\n"
    )
    notes: list[str] = []
    flows = derive(load(f, "iptables"), IFACES, notes)
    assert {fl.rule.line for fl in flows if fl.rule} == {3, 5}
    assert any(":4: no probe" in n and ":3" in n for n in notes)


# -- the user's own traffic --------------------------------------------------------


def test_read_csv_with_units_and_optional_columns(tmp_path: Path) -> None:
    f = tmp_path / "flows.csv"
    f.write_text(
        "protocol,src,dst,dport,weight,request,response,ingress,egress,name\n"
        "tcp,10.1.0.5,198.51.100.7,443,3,200,16KiB,lan0,wan0,web\n"
        "# a comment line\n"
        "udp,10.1.0.6,198.51.100.8,53,1,40,1KB,,,\n"
    )
    flows = read_csv(f)
    assert [(x.name, x.protocol, x.dport, x.weight, x.request, x.response) for x in flows] == [
        ("web", "tcp", 443, 3.0, 200, 16384),
        ("u2", "udp", 53, 1.0, 40, 1000),
    ]
    assert flows[0].ingress == "lan0" and flows[1].ingress is None
    assert flows[1].origin == "csv:4" and flows[0].expect is None
    check_weights(flows)


@pytest.mark.parametrize(
    ("line", "word"),
    [
        ("tcp,10.1.0.5,198.51.100.7,443,0,1,1", "weight"),
        ("tcp,10.1.0.5,198.51.100.7,443,-2,1,1", "weight"),
        ("tcp,10.1.0.5,198.51.100.7,443,nan,1,1", "weight"),
        ("tcp,10.1.0.500,198.51.100.7,443,1,1,1", "src"),
        ("tcp,10.1.0.5,198.51.100.7,http,1,1,1", "dport"),
        ("sctp,10.1.0.5,198.51.100.7,443,1,1,1", "protocol"),
        ("tcp,10.1.0.5,198.51.100.7,443,1,1zz,1", "request"),
        ("tcp,10.1.0.5,198.51.100.7,443,1,1", "fields"),
    ],
)
def test_read_csv_names_the_bad_line(tmp_path: Path, line: str, word: str) -> None:
    f = tmp_path / "flows.csv"
    f.write_text(
        "protocol,src,dst,dport,weight,request,response\n"
        "tcp,10.1.0.5,198.51.100.7,443,1,64,64\n" + line + "\n"
    )
    with pytest.raises(ScenarioError) as err:
        read_csv(f)
    assert err.value.where == f"{f}:3"
    assert word in err.value.message
    assert err.value.fix


def test_read_csv_refuses_a_wrong_header(tmp_path: Path) -> None:
    f = tmp_path / "flows.csv"
    f.write_text("proto,src,dst\ntcp,1.2.3.4,5.6.7.8\n")
    with pytest.raises(ScenarioError) as err:
        read_csv(f)
    assert err.value.where == f"{f}:1"


# `conntrack -L -o extended` of the router: two connections share one tuple.
CONNTRACK = (DATA / "conntrack.txt").read_text()


def test_read_conntrack_counts_identical_tuples(tmp_path: Path) -> None:
    f = tmp_path / "ct.txt"
    f.write_text(CONNTRACK)
    flows = read_conntrack(f)
    got = [(x.protocol, x.src, x.dst, x.dport, x.weight, x.origin) for x in flows]
    assert got == [
        ("tcp", "10.1.0.5", "198.51.100.7", 443, 2.0, "conntrack:1"),
        ("udp", "10.1.0.6", "198.51.100.8", 53, 1.0, "conntrack:2"),
        ("icmp", "10.1.0.5", "198.51.100.9", None, 1.0, "conntrack:4"),
    ]


def test_read_conntrack_names_the_bad_line(tmp_path: Path) -> None:
    f = tmp_path / "ct.txt"
    f.write_text(CONNTRACK.splitlines()[0] + "\nthis is not conntrack\n")
    with pytest.raises(ScenarioError) as err:
        read_conntrack(f)
    assert err.value.where == f"{f}:2"


def _ether(src: str, dst: str, l4: dpkt.Packet, proto: int) -> bytes:
    ip = dpkt.ip.IP(src=socket.inet_aton(src), dst=socket.inet_aton(dst), p=proto, data=l4)
    ip.len = len(ip)
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, data=ip))


def _tcp(sport: int, dport: int, flags: int, data: bytes = b"") -> dpkt.tcp.TCP:
    return dpkt.tcp.TCP(sport=sport, dport=dport, flags=flags, data=data)


def _write_pcap(path: Path, packets: list[bytes]) -> None:
    with path.open("wb") as fh:
        w = dpkt.pcap.Writer(fh)
        for i, p in enumerate(packets):
            w.writepkt(p, ts=1700000000 + i * 0.001)


def test_read_pcap_groups_connections_and_counts_payload_each_way(tmp_path: Path) -> None:
    c, s, s2 = "10.1.0.5", "198.51.100.7", "198.51.100.8"
    syn, ack = dpkt.tcp.TH_SYN, dpkt.tcp.TH_ACK
    packets = [
        _ether(c, s, _tcp(40000, 443, syn), 6),
        _ether(s, c, _tcp(443, 40000, syn | ack), 6),
        _ether(c, s, _tcp(40000, 443, ack, b"x" * 100), 6),
        _ether(s, c, _tcp(443, 40000, ack, b"y" * 3000), 6),
        _ether(c, s2, dpkt.udp.UDP(sport=5353, dport=53, data=b"q" * 40), 17),
        _ether(s2, c, dpkt.udp.UDP(sport=53, dport=5353, data=b"r" * 90), 17),
        # a connection whose SYN the capture missed: left out
        _ether(c, s, _tcp(40500, 80, ack, b"z" * 10), 6),
        _ether(c, s, _tcp(40001, 443, syn), 6),
        _ether(c, s, _tcp(40001, 443, ack, b"x" * 7), 6),
    ]
    f = tmp_path / "t.pcap"
    _write_pcap(f, packets)
    flows = read_pcap(f)
    got = [(x.protocol, x.src, x.dst, x.dport, x.request, x.response, x.weight) for x in flows]
    assert got == [
        ("tcp", c, s, 443, 100, 3000, 2.0),
        ("udp", c, s2, 53, 40, 90, 1.0),
        ("tcp", c, s, 443, 7, 0, 2.0),
    ]
    assert all(x.origin == "pcap:t.pcap" for x in flows)


def test_a_pcap_without_tcp_or_udp_flows_is_refused(tmp_path: Path) -> None:
    icmp = dpkt.icmp.ICMP(type=8, data=dpkt.icmp.ICMP.Echo(id=1, seq=1, data=b"ping"))
    f = tmp_path / "ping.pcap"
    _write_pcap(f, [_ether("10.1.0.5", "198.51.100.7", icmp, 1)])
    with pytest.raises(ScenarioError) as err:
        read_pcap(f)
    assert "no TCP connection" in err.value.message
    (tmp_path / "junk.pcap").write_bytes(b"not a pcap at all")
    with pytest.raises(ScenarioError):
        read_pcap(tmp_path / "junk.pcap")


def test_check_weights_refuses_zero_and_infinite_weights() -> None:
    ok = Flow("a", "tcp", "10.0.0.1", "10.0.0.2", 80, None, None, origin="csv:2")
    check_weights([ok])
    for bad in (0.0, float("inf"), -1.0):
        zero = Flow("b", "tcp", "10.0.0.1", "10.0.0.2", 80, None, None, weight=bad, origin="csv:3")
        with pytest.raises(ScenarioError) as err:
            check_weights([ok, zero])
        assert "line 3" in (err.value.where or "")


@needs_nft
def test_each_verdict_map_element_gets_its_flow(tmp_path: Path) -> None:
    f = tmp_path / "vmap.nft"
    f.write_text(
        "table inet t {\n"
        "\tchain web {\n\t\ttcp dport 443 accept\n\t}\n"
        "\tchain forward {\n"
        "\t\ttype filter hook forward priority 0; policy drop;\n"
        "\t\tiifname lan0 ip saddr vmap { 10.2.0.0/16 : jump web, 10.3.0.1 : drop, "
        "10.4.0.0/24 : accept }\n"
        "\t}\n}\n"
    )
    rs = load(f, "nft")
    assert rs.rules()[1].verdict == "vmap"
    flows = derive(rs, IFACES)
    got = {(x.expect, x.rule.line if x.rule else None, x.src, x.dport) for x in flows}
    assert ("accept", 3, "10.2.0.1", 443) in got  # through the jump, with its source
    assert ("deny", 7, "10.3.0.1", 9999) in got
    assert any(e == "accept" and line == 7 and _in(src, "10.4.0.0/24") for e, line, src, _ in got)


def test_a_loop_of_jumps_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "loop.rules"
    f.write_text(
        "*filter\n:FORWARD DROP [0:0]\n:a - [0:0]\n:b - [0:0]\n"
        "-A FORWARD -j a\n-A a -j b\n-A b -j a\nCOMMIT\n"
    )
    with pytest.raises(MechanismError) as err:
        derive(load(f, "iptables"), IFACES)
    assert "jumps back" in err.value.message


def test_no_address_is_both_a_client_s_and_the_dut_s() -> None:
    """A to_dut flow's destination is the DUT's own address: no flow sends from it, and
    no forwarded flow is sent to it (it would meet the input chain instead)."""
    flows = derive(load(DATA / "router.nft", "nft", ["lan0", "wan0"]), ["lan0", "wan0"])
    dut = {f.dst for f in flows if f.to_dut}
    assert dut, "the router has input-chain rules"
    assert not dut & {f.src for f in flows}
    assert not dut & {f.dst for f in flows if not f.to_dut}


def test_an_address_lies_on_one_side_only(tmp_path: Path) -> None:
    """A probe from the outside and a flow to the outside never share an address that
    would then have to be on both sides of the DUT (one host owns each address)."""
    f = tmp_path / "edge.nft"
    f.write_text(
        "table inet filter {\n\tchain forward {\n"
        "\t\ttype filter hook forward priority filter; policy drop;\n"
        '\t\tiifname "lan0" oifname "wan0" ip saddr 10.20.0.1 tcp dport 443 accept\n'
        '\t\tiifname "wan0" drop\n\t}\n}\n'
        "table ip nat {\n\tchain postrouting {\n"
        "\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
        '\t\toifname "wan0" ip saddr 10.20.0.0/16 masquerade\n\t}\n}\n'
    )
    sides: dict[str, set[str]] = {}
    for fl in derive(load(f, "nft", ["lan0", "wan0"]), ["lan0", "wan0"]):
        sides.setdefault(fl.src, set()).add(str(fl.ingress))
        sides.setdefault(fl.dst, set()).add("dut" if fl.to_dut else str(fl.egress))
    assert all(len(s) == 1 for s in sides.values()), sides


# -- firewalld's shape: a source zone first, interface zones by goto ---------------

ZONES = (
    "table inet fw {\n"
    "\tset blocklist {\n\t\ttype ipv4_addr\n\t\tflags interval\n"
    "\t\telements = { 192.0.2.0/24, 198.51.100.0/24 }\n\t}\n"
    "\tchain input {\n"
    "\t\ttype filter hook input priority filter + 10; policy accept;\n"
    "\t\tct state { established, related } accept\n"
    "\t\tct status dnat accept\n"
    "\t\tjump zones\n"
    "\t\treject with icmpx admin-prohibited\n"
    "\t}\n"
    "\tchain zones {\n"
    "\t\tip saddr @blocklist goto drop_zone\n"
    '\t\tiifname "lan0" goto internal\n'
    '\t\tiifname "wan0" goto external\n'
    "\t}\n"
    "\tchain drop_zone {\n\t\tjump policies\n\t\tdrop\n\t}\n"
    '\tchain policies {\n\t\tiifname "wan0" tcp dport 8443 accept\n\t}\n'
    "\tchain internal {\n\t\ttcp dport 53 accept\n\t\treject\n\t}\n"
    "\tchain external {\n\t\ttcp dport 22 accept\n\t\treject\n\t}\n"
    "}\n"
)


def _zones(tmp_path: Path) -> tuple[list[Flow], list[str]]:
    f = tmp_path / "zones.nft"
    f.write_text(ZONES)
    notes: list[str] = []
    return derive(load(f, "nft"), IFACES, notes), notes


def test_a_flow_after_a_source_zone_comes_from_outside_its_set(tmp_path: Path) -> None:
    """The zone dispatch sends the blocklist to the drop zone: the flows for the
    interface zones' accepts come from outside it, the drop zone's probe from inside."""
    flows, _ = _zones(tmp_path)
    by_line = {f.rule.line: f for f in flows if f.rule is not None}
    for line in (27, 31):  # tcp dport 53 (lan0), tcp dport 22 (wan0)
        assert by_line[line].expect == "accept"
        assert not _in(by_line[line].src, "192.0.2.0/24"), by_line[line]
        assert not _in(by_line[line].src, "198.51.100.0/24"), by_line[line]
    drop = by_line[21]
    assert drop.expect == "deny" and _in(drop.src, "192.0.2.0/24")
    # the policy chain the drop zone jumps to first is met by a blocklisted source
    assert _in(by_line[24].src, "192.0.2.0/24") and by_line[24].dport == 8443


def test_what_a_goto_or_earlier_deny_takes_is_said_once_with_its_rule(tmp_path: Path) -> None:
    flows, notes = _zones(tmp_path)
    lines = {f.rule.line for f in flows if f.rule is not None}
    # the reject after `jump zones`: every flow is decided in a zone chain first
    assert 12 not in lines
    assert any(":12: no probe: every flow it matches is denied first by" in n for n in notes)
    # `ct status dnat accept` on input: no rule redirects to the DUT
    assert any(":10: no flow: it accepts traffic DNAT'd to the DUT itself" in n for n in notes)
    assert len(notes) == len(set(notes))
    # a rule with a flow on one path has no note from another
    assert not [n for n in notes if any(f":{line}: no " in n for line in lines)]


def test_the_public_firewalld_router_has_a_flow_for_its_zones_and_set(tmp_path: Path) -> None:
    path = Path(__file__).parent.parent.parent / "rules" / "public" / "firewalld-router.nft"
    rs = load(path, "nft")
    notes: list[str] = []
    flows = derive(rs, ["lan0", "wan0", "dmz0"], notes)
    src = {(f.rule.line, f.expect): f.src for f in flows if f.rule is not None}
    text = path.read_text().splitlines()
    # every zone's ssh accept is reached from outside the blocklist
    for line, f in ((n, src.get((n, "accept"))) for n, t in enumerate(text, 1) if "dport 22" in t):
        if "filter_IN_public" in _chain_of(text, line):
            continue  # no interface is left for the catch-all zone
        assert f is not None and not _in(f, "192.0.2.0/24"), (line, f)
    public_ssh = next(
        n for n, t in enumerate(text, 1) if "dport 22" in t and "public" in _chain_of(text, n)
    )
    assert any(
        f":{public_ssh}: no flow: every flow it matches is sent to chain" in n for n in notes
    )


def _chain_of(text: list[str], line: int) -> str:
    return next(t for t in reversed(text[:line]) if t.strip().startswith("chain "))


def test_a_second_rule_set_keeps_each_address_on_the_side_the_first_gave_it() -> None:
    """Two rule sets of one review are derived one after the other: an address the
    current set's flows put behind lan0 is never the proposed set's host behind wan0."""
    public = Path(__file__).parent.parent.parent / "rules" / "public"
    ifaces = ["lan0", "wan0", "dmz0"]
    current = derive(load(public / "firewalld-router.nft", "nft"), ifaces)
    before = sides(current)
    proposed = derive(load(public / "firewalld-router-changed.nft", "nft"), ifaces, None, before)
    after = sides(proposed)
    clash = {
        a: (before[a], after[a]) for a in before.keys() & after.keys() if before[a] != after[a]
    }
    assert not clash, clash
    # without it, the two derivations put one address on two sides
    alone = sides(derive(load(public / "firewalld-router-changed.nft", "nft"), ifaces))
    assert any(before[a] != alone[a] for a in before.keys() & alone.keys())
