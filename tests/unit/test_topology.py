"""The topology graph: the address plan, routes, validation, and interface naming."""

from __future__ import annotations

from dataclasses import replace
from ipaddress import IPv4Interface, IPv4Network, IPv6Interface, IPv6Network, ip_address

import pytest

from secperf.errors import TestbedError
from secperf.testbed.links import host_ip_lines, ifname, priority_commands, tbf_params
from secperf.testbed.testbed import check_prefix, new_prefix
from secperf.testbed.topology import (
    LinkSpec,
    Topology,
    check_testbed_address,
)

V4 = IPv4Network("198.18.0.0/15")
V4_RESERVED = IPv4Network("198.19.0.0/17")
V6 = IPv6Network("2001:2::/48")


def _all_addresses(topo: Topology) -> list[str]:
    out = []
    for link in topo.links:
        out += [str(i.ip) for i in link.addr4.values()]
        out += [str(i.ip) for i in link.addr6.values()]
    for role in ("client", "server"):
        for fam in (4, 6):
            out += topo.emulated_addresses(role, fam)
    return out


def test_standard_address_plan() -> None:
    t = Topology.standard()
    assert t.roles == ("client", "dut", "server")
    assert t.address("client", "client-dut") == "198.18.1.2"
    assert t.address("dut", "client-dut") == "198.18.1.1"
    assert t.address("dut", "dut-server") == "198.18.2.1"
    assert t.address("client", "client-dut", 6) == "2001:2:0:1::2"
    assert t.server_address() == "198.18.2.2"
    assert t.server_address(6) == "2001:2:0:2::2"
    assert t.host("client").zone == "inside" and t.host("server").zone == "outside"
    assert [h.role for h in t.hosts if h.forwarding] == ["dut"]
    with pytest.raises(TestbedError):
        t.server_address(via="direct")  # no direct link in this topology


def test_direct_and_attacker() -> None:
    t = Topology.standard(direct=True, attacker=True, link_rate_bps=100_000_000)
    assert t.server_address(via="direct") == "198.18.3.2"
    assert t.server_address(6, via="direct") == "2001:2:0:3::2"
    assert t.address("client", "client-server") == "198.18.3.1"
    assert t.address("attacker", "attacker-dut") == "198.18.4.2"
    assert t.host("attacker").zone == "outside"
    assert all(link.rate_bps == 100_000_000 for link in t.links)


def test_gateways_are_the_dut() -> None:
    t = Topology.standard(attacker=True, direct=True)
    assert t.gateway("client") == "198.18.1.1"
    assert t.gateway("server") == "198.18.2.1"
    assert t.gateway("attacker") == "198.18.4.1"
    assert t.gateway("client", 6) == "2001:2:0:1::1"
    assert t.gateway("dut") is None


def test_every_address_within_testbed_ranges() -> None:
    t = Topology.standard(direct=True, attacker=True, emulated_hosts=200)
    addrs = _all_addresses(t)
    assert len(addrs) > 800
    for a in addrs:
        ip = ip_address(a)
        if ip.version == 4:
            assert ip in V4 and ip not in V4_RESERVED, a
        else:
            assert ip in V6 and ip not in IPv6Network("2001:2:0:ff::/64"), a


def test_emulated_hosts() -> None:
    t = Topology.standard(emulated_hosts=200)
    client = t.emulated_addresses("client")
    assert client[0] == "198.18.1.10" and client[-1] == "198.18.1.209"
    assert t.emulated_addresses("server")[0] == "198.18.2.10"
    assert t.emulated_addresses("client", 6)[:2] == ("2001:2:0:1::a", "2001:2:0:1::b")
    assert t.emulated_addresses("dut") == ()
    assert Topology.standard().emulated_addresses("client") == ()
    with pytest.raises(TestbedError):
        Topology.standard(emulated_hosts=201)


def _bad_link(net4: str, net6: str = "2001:2:0:9::/64") -> LinkSpec:
    n4, n6 = IPv4Network(net4), IPv6Network(net6)
    return LinkSpec(
        name="client-dut",
        a="client",
        b="dut",
        net4=n4,
        net6=n6,
        addr4={"client": IPv4Interface(f"{n4[2]}/24"), "dut": IPv4Interface(f"{n4[1]}/24")},
        addr6={"client": IPv6Interface(f"{n6[2]}/64"), "dut": IPv6Interface(f"{n6[1]}/64")},
        rate_bps=None,
    )


@pytest.mark.parametrize(
    ("net4", "net6"),
    [
        ("10.0.0.0/24", "2001:2:0:9::/64"),  # private, not the benchmark range
        ("198.19.5.0/24", "2001:2:0:9::/64"),  # reserved for generated ACL entries
        ("198.18.9.0/24", "2001:db8::/64"),  # documentation v6, not 2001:2::/48
        ("198.18.9.0/24", "2001:2:0:ff::/64"),  # reserved for generated v6 ACL entries
    ],
)
def test_addresses_outside_ranges_refused(net4: str, net6: str) -> None:
    t = Topology.standard()
    with pytest.raises(TestbedError):
        Topology(t.hosts, (_bad_link(net4, net6),))


def test_check_testbed_address() -> None:
    check_testbed_address("198.18.200.1")
    check_testbed_address("2001:2:0:fe::1")
    for bad in ("8.8.8.8", "198.19.0.1", "127.0.0.1", "2001:3::1", "::1", "2001:2:0:ff::5"):
        with pytest.raises(TestbedError):
            check_testbed_address(bad)


def test_host_lines_route_via_dut_and_direct_on_link() -> None:
    t = Topology.standard(direct=True)
    names = {"client-dut": "spx-cd", "client-server": "spx-cs"}
    lines = host_ip_lines(t, "client", names)
    routes = [ln for ln in lines if ln.startswith("route")]
    assert routes == ["route add 0.0.0.0/0 via 198.18.1.1", "route add ::/0 via 2001:2:0:1::1"]
    assert "addr add 198.18.3.1/24 dev spx-cs" in lines  # on-link, more specific than default
    assert all("nodad" in ln for ln in lines if "addr add 2001" in ln)
    dut = host_ip_lines(t, "dut", {"client-dut": "spx-dc", "dut-server": "spx-ds"})
    assert not [ln for ln in dut if ln.startswith("route")]


def test_ifnames_short_and_prefixed() -> None:
    t = Topology.standard(direct=True, attacker=True)
    for prefix in (new_prefix(), new_prefix(), "abcdefghijkl"):
        check_prefix(prefix)
        names = set()
        for link in t.links:
            for role in link.ends():
                name = ifname(prefix, t.tag(role), t.tag(link.peer(role)))
                assert len(name) <= 15 and name.startswith(prefix)
                names.add(name)
        assert len(names) == 2 * len(t.links)  # no two ends share a name
    assert ifname("sp1a2b3", t.tag("client"), t.tag("dut")) == "sp1a2b3-cd"
    with pytest.raises(TestbedError):
        ifname("abcdefghijklm", "c", "d")
    with pytest.raises(TestbedError):
        check_prefix("abcdefghijklm")
    with pytest.raises(TestbedError):
        check_prefix("sp-x")


def test_new_prefix_shape() -> None:
    p = new_prefix()
    assert len(p) == 7 and p.startswith("sp") and int(p[2:], 16) >= 0


def test_tbf_params() -> None:
    fast = tbf_params(100_000_000)
    assert (fast.burst_bytes, fast.latency_ms) == (125_000, 50)
    slow = tbf_params(33_600)
    assert (slow.burst_bytes, slow.latency_ms) == (1600, 500)
    assert tbf_params(999_999).latency_ms == 500 and tbf_params(1_000_000).latency_ms == 50
    assert fast.tc_args()[:3] == ["tbf", "rate", "100000000bit"]


def test_priority_queue_under_tbf_sends_the_control_port_first() -> None:
    cmds = [" ".join(c) for c in priority_commands("d0", 10_000_000, None, [5201])]
    # an htb under tbf's class 1:1, far above the rate (tbf alone holds the rate)
    assert cmds[0] == "qdisc add dev d0 parent 1:1 handle 2: htb default 20"
    assert "classid 2:10 htb rate 100000000bit ceil 100000000bit" in cmds[2]
    assert cmds[2].endswith("prio 0") and cmds[3].endswith("prio 1")
    # everything else waits in a FIFO as deep as tbf's own queue: 50 ms + the burst
    assert cmds[5] == "qdisc add dev d0 parent 2:20 handle 20: bfifo limit 75000"
    filters = [c for c in cmds if c.startswith("filter")]
    assert len(filters) == 4  # sport and dport, IPv4 and IPv6
    assert all("match" in f and "5201 0xffff flowid 2:10" in f for f in filters)
    assert any("protocol ipv6" in f and "match ip6 dport 5201" in f for f in filters)


def test_named_ends_and_extra_addresses_are_checked() -> None:
    base = Topology.standard()
    named = replace(base, ifnames={("dut", "client"): "lan0", ("dut", "server"): "wan0"})
    assert named.ifnames[("dut", "client")] == "lan0"
    for bad, message in [
        ({("dut", "nobody"): "x"}, "no link"),
        ({("client", "server"): "x"}, "no link"),
        ({("dut", "client"): "a/b"}, "not a name"),
        ({("dut", "client"): "lan0", ("dut", "server"): "lan0"}, "already has"),
    ]:
        with pytest.raises(TestbedError, match=message):
            replace(base, ifnames=bad)
    extra = replace(base, extra_addresses={"client": ("198.19.128.5",), "dut": ("198.19.128.1",)})
    assert extra.extra_owner(4) == {"198.19.128.5": "client", "198.19.128.1": "dut"}
    check_testbed_address("198.19.128.5")  # the mapped range is the testbed's
    for bad_extra, message in [
        ({"client": ("198.19.0.5",)}, "outside"),  # the ACL's never-matching range
        ({"client": ("198.18.1.2",)}, "outside"),  # a link's address
        ({"client": ("198.19.128.5",), "server": ("198.19.128.5",)}, "used twice"),
        ({"nobody": ("198.19.128.5",)}, "no such host"),
    ]:
        with pytest.raises(TestbedError, match=message):
            replace(base, extra_addresses=bad_extra)


def test_plain_beds_have_no_named_ends_or_extra_routes() -> None:
    t = Topology.standard()
    dut = host_ip_lines(t, "dut", {"client-dut": "spx-dc", "dut-server": "spx-ds"})
    assert not any("198.19" in line or " lo" in line.split("dev")[-1] for line in dut[1:])
    assert "ifnames" not in t.describe() and "extra_addresses" not in t.describe()


def test_extra_ipv6_addresses_and_their_routes() -> None:
    t = replace(
        Topology.standard(),
        extra_addresses={"client": ("2001:2:0:8000::5",), "dut": ("2001:2:0:8000::1",)},
    )
    client = host_ip_lines(t, "client", {"client-dut": "x-cd"})
    assert "addr add 2001:2:0:8000::5/128 dev x-cd nodad" in client
    assert "route add 2001:2:0:8000::/49 via 2001:2:0:1::1 metric 100" in client
    dut = host_ip_lines(t, "dut", {"client-dut": "x-dc", "dut-server": "x-ds"})
    assert "route add 2001:2:0:8000::5/128 via 2001:2:0:1::2" in dut
    assert "addr add 2001:2:0:8000::1/128 dev lo nodad" in dut
