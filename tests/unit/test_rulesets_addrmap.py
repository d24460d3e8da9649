"""The address map keeps every relation among the networks a rule set names.

Containment, disjointness and equality between every pair of named networks, and the
order of every named address and of every network's ends, are the same after the map
as before; addresses that were not named land in the same gap (inside the same
prefixes, between the same neighbours); and everything lands in the testbed's range.
"""

from __future__ import annotations

import json
import random
from ipaddress import IPv4Address, IPv4Network, IPv6Network, ip_address, ip_network

import pytest

from secperf.errors import MechanismError
from secperf.rulesets.addrmap import MAPPED_NET4, MAPPED_NET6, AddressMap
from secperf.rulesets.model import Flow, Named

Net = IPv4Network | IPv6Network

ROUTER = [
    Named("10.1.0.0/16", "router.nft:7"),
    Named("10.1.5.200/32", "router.nft:8", "address"),
    Named("10.1.9.0/24", "router.nft:14"),
    Named("192.168.77.5/32", "router.nft:14", "address"),
    Named("10.1.66.0/24", "router.nft:36"),
    Named("203.0.113.10/32", "router.nft:48", "address"),
]


def _relation(a: Net, b: Net) -> str:
    if a == b:
        return "equal"
    if a.subnet_of(b):  # type: ignore[arg-type]
        return "inside"
    if b.subnet_of(a):  # type: ignore[arg-type]
        return "contains"
    return "disjoint"


def _assert_keeps_relations(amap: AddressMap, nets: list[Net], probes: list[str]) -> None:
    """Every pairwise relation, every end's order, and every probe's place are kept."""
    mapped = {n: ip_network(amap.network(str(n))) for n in nets}
    for net, m in mapped.items():
        inside = MAPPED_NET4 if net.version == 4 else MAPPED_NET6
        assert m.subnet_of(inside), (net, m)  # type: ignore[arg-type]
    for a in nets:
        for b in nets:
            assert _relation(mapped[a], mapped[b]) == _relation(a, b), (a, b)
    # The ends of each network map to the ends of its block, and the map is monotone
    # on every end (a range between named ends keeps its members).
    ends: dict[int, int] = {}
    for net, m in mapped.items():
        for orig, image in ((net.network_address, m.network_address),):
            assert ip_address(amap.address(str(orig))) == image
        for orig, image in ((net.broadcast_address, m.broadcast_address),):
            assert ip_address(amap.address(str(orig))) == image
        ends[int(net.network_address)] = int(m.network_address)
        ends[int(net.broadcast_address)] = int(m.broadcast_address)
    order = sorted(ends)
    assert [ends[x] for x in order] == sorted(ends.values())
    assert len(set(ends.values())) == len(ends)
    # Next to each end is where an off-by-one would cross a neighbour.
    kind = type(nets[0].network_address) if nets else IPv4Address
    width = 32 if kind is IPv4Address else 128
    beside = [str(kind(e + d)) for e in ends for d in (-1, 1) if 0 <= e + d < 1 << width]
    for probe in [*probes, *beside]:
        value = ip_address(probe)
        if int(value) in ends:
            continue
        image = ip_address(amap.address(probe))
        for net, m in mapped.items():
            assert (image in m) == (value in net), (probe, net, image, m)
        for orig, end in ends.items():
            assert (int(image) < end) == (int(value) < orig), (probe, orig, image)
            assert (int(image) > end) == (int(value) > orig), (probe, orig, image)


def test_the_router_prefixes_keep_every_relation() -> None:
    amap = AddressMap.build(ROUTER)
    nets = [ip_network(n.network) for n in ROUTER]
    probes = ["10.1.5.7", "10.1.5.201", "10.1.9.9", "10.1.70.1", "10.1.255.254", "10.2.0.1"]
    _assert_keeps_relations(amap, nets, [*probes, "8.8.8.8", "192.168.77.6", "255.255.255.254"])
    # 10.0.0.0/8-style nesting: the host and both /24s lie inside the /16's block.
    lan = ip_network(amap.network("10.1.0.0/16"))
    assert ip_address(amap.address("10.1.5.200")) in lan
    assert ip_address(amap.address("192.168.77.5")) not in lan
    assert amap.network("10.1.5.200/32") == amap.address("10.1.5.200") + "/32"


def _laminar(rng: random.Random, version: int) -> tuple[list[Named], list[str]]:
    """A random family of prefixes and addresses in a small corner of the space (so they
    nest), with probes drawn from the same corner."""
    if version == 4:
        base, bits, width = int(ip_address("10.0.0.0")), 20, 32
    else:
        base, bits, width = int(ip_address("2001:db8::")), 28, 128
    low = width - bits  # the corner is /low: prefixes from /low to host addresses
    named = []
    for i in range(rng.randint(1, 40)):
        length = rng.choice([width] * 3 + list(range(low, width + 1)))
        addr = base + rng.randrange(1 << bits)
        net = ip_network((addr, length), strict=False)
        named.append(Named(str(net), f"family.nft:{i + 1}"))
    if rng.random() < 0.2:
        named.append(Named("0.0.0.0/0" if version == 4 else "::/0", "family.nft:99"))
    if rng.random() < 0.3:  # something outside the corner too
        outside = "192.0.2.0/24" if version == 4 else "2001:db9::/48"
        named.append(Named(outside, "family.nft:98"))
    probes = [str(ip_address(base + rng.randrange(1 << bits))) for _ in range(30)]
    return named, probes


@pytest.mark.parametrize("seed", range(60))
def test_random_laminar_families_keep_every_relation(seed: int) -> None:
    rng = random.Random(seed)
    named, probes = _laminar(rng, 4)
    amap = AddressMap.build(named)
    nets = sorted({ip_network(n.network) for n in named}, key=str)
    _assert_keeps_relations(amap, nets, probes)


@pytest.mark.parametrize("seed", range(15))
def test_ipv6_families_keep_every_relation(seed: int) -> None:
    rng = random.Random(1000 + seed)
    named, probes = _laminar(rng, 6)
    amap = AddressMap.build(named)
    nets = sorted({ip_network(n.network) for n in named}, key=str)
    _assert_keeps_relations(amap, nets, probes)
    assert all(ip_network(e.mapped).subnet_of(MAPPED_NET6) for e in amap.entries())


def test_ipv4_and_ipv6_are_mapped_side_by_side() -> None:
    amap = AddressMap.build([*ROUTER, Named("2001:db8:1::/48", "v6.nft:3")])
    assert ip_network(amap.network("2001:db8:1::/48")).subnet_of(MAPPED_NET6)
    assert ip_address(amap.address("2001:db8:1::5")) in ip_network(amap.network("2001:db8:1::/48"))
    assert ip_address(amap.address("2001:db8:2::5")) not in ip_network(
        amap.network("2001:db8:1::/48")
    )


def test_a_range_keeps_its_members() -> None:
    named = [
        Named("10.1.0.0/24", "r.nft:3"),
        Named("10.1.0.10/32", "r.nft:4", "range end"),
        Named("10.1.0.20/32", "r.nft:4", "range end"),
    ]
    amap = AddressMap.build(named)
    lo, hi = (int(ip_address(a)) for a in amap.range("10.1.0.10", "10.1.0.20"))
    for last in range(256):
        image = int(ip_address(amap.address(f"10.1.0.{last}")))
        assert (lo <= image <= hi) == (10 <= last <= 20), last
    with pytest.raises(MechanismError):
        amap.range("10.1.0.20", "10.1.0.10")


def test_a_slash_zero_is_the_whole_range() -> None:
    amap = AddressMap.build([Named("0.0.0.0/0", "any.nft:2"), *ROUTER])
    assert amap.network("0.0.0.0/0") == str(MAPPED_NET4)
    _assert_keeps_relations(amap, [ip_network(n.network) for n in ROUTER], ["10.1.3.3"])


def test_a_family_too_large_is_refused_with_its_where() -> None:
    hosts = [Named(f"10.{i // 250}.{i % 250}.7/32", f"flows.csv:{i + 2}") for i in range(9000)]
    named = [Named("10.0.0.0/8", "big.nft:4"), *hosts, Named("192.0.2.0/24", "big.nft:9")]
    with pytest.raises(MechanismError) as caught:
        AddressMap.build(named)
    err = caught.value
    assert err.where == "big.nft:4"  # the /8 that holds the 9000 hosts is the largest
    assert "10.0.0.0/8" in err.message and "9001 networks and hosts" in err.message
    assert err.fix is not None and "fewer distinct prefixes or hosts" in err.fix


def test_the_map_is_deterministic() -> None:
    shuffled = list(ROUTER)
    random.Random(7).shuffle(shuffled)
    a, b = AddressMap.build(ROUTER), AddressMap.build(shuffled)
    assert [(e.original, e.mapped) for e in a.entries()] == [
        (e.original, e.mapped) for e in b.entries()
    ]


def test_describe_lists_each_network_with_its_where() -> None:
    lines = AddressMap.build(ROUTER).describe()
    assert len(lines) == len(ROUTER)
    lan = next(line for line in lines if line.startswith("10.1.0.0/16 -> "))
    assert lan.endswith("  router.nft:7")
    web = next(line for line in lines if line.startswith("10.1.5.200 -> "))
    assert "/" not in web.split()[2]  # an address is printed as one


def test_a_network_not_named_is_refused() -> None:
    amap = AddressMap.build(ROUTER)
    with pytest.raises(MechanismError, match="not a network the map was built with"):
        amap.network("10.1.7.0/24")
    with pytest.raises(MechanismError, match="not in the address map"):
        amap.known_address("10.1.5.7", "rule inet filter forward (handle 16)")
    with pytest.raises(MechanismError):
        AddressMap.build([Named("10.1.0.0/33", "bad.nft:2")])


def test_a_flow_is_mapped_with_its_dnat_target() -> None:
    amap = AddressMap.build(ROUTER)
    flow = Flow("f1", "tcp", "10.1.5.7", "203.0.113.10", 80, "wan0", "lan0", served_by="10.1.5.200")
    mapped = amap.flow(flow)
    assert mapped.src == amap.address("10.1.5.7")
    assert mapped.dst == amap.address("203.0.113.10")
    assert mapped.served_by == amap.address("10.1.5.200")
    assert (mapped.dport, mapped.name) == (80, "f1")


def test_extend_places_the_traffic_addresses_too() -> None:
    amap = AddressMap.build(ROUTER)
    more = amap.extend([Named("10.1.5.7/32", "flow f1 (csv:2)", "flow")])
    assert any(e.original == "10.1.5.7/32" for e in more.entries())
    assert more.knows("10.1.5.7") and not amap.knows("10.1.5.7") and amap.knows("10.1.9.0/24")
    nets = [ip_network(n.network) for n in [*ROUTER, Named("10.1.5.7/32", "")]]
    _assert_keeps_relations(more, nets, ["10.1.5.8", "10.1.5.6"])
    assert more.known_address("10.1.5.7", "flow f1") == more.address("10.1.5.7")


def test_json_round_trip_keeps_the_map() -> None:
    amap = AddressMap.build([*ROUTER, Named("2001:db8::/32", "v6.nft:2")])
    kept = AddressMap.from_json(json.loads(json.dumps(amap.to_json())))
    assert kept.entries() == amap.entries()
    for probe in ["10.1.5.7", "10.1.70.1", "8.8.8.8", "2001:db8::9", "10.1.5.200"]:
        assert kept.address(probe) == amap.address(probe)
    broken = amap.to_json()
    broken["entries"][1]["mapped"] = "198.19.200.0/30"  # the host outside its /16's block
    with pytest.raises(MechanismError, match="breaks its relations"):
        AddressMap.from_json(broken)
    with pytest.raises(MechanismError):
        AddressMap.from_json({"version": 99, "entries": []})
