"""Rule files rewritten with the address map load as written, with mapped addresses.

Each nft test loads a rule set in a throwaway network namespace (`unshare -n`) to get
nft's own JSON, rewrites it, loads the result in another and reads back what the
kernel holds; each iptables test runs `iptables-nft-restore --test` on the result.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import pytest

from secperf.errors import MechanismError
from secperf.rulesets.addrmap import AddressMap, map_iptables, map_nft
from secperf.rulesets.lookup import is_address
from secperf.rulesets.model import Chain, Named, Rule, RuleRef, RuleSet

ROUTER = Path(__file__).resolve().parents[1] / "data" / "rulesets" / "router.nft"
_CAN_UNSHARE = os.geteuid() == 0 and shutil.which("unshare") is not None
needs_nft = pytest.mark.skipif(
    not (_CAN_UNSHARE and shutil.which("nft")), reason="needs root, unshare and nft"
)
needs_iptables = pytest.mark.skipif(
    not (_CAN_UNSHARE and shutil.which("iptables-nft-restore")),
    reason="needs root, unshare and iptables-nft-restore",
)


def _in_netns(script: str, *args: str) -> str:
    proc = subprocess.run(
        ["unshare", "-n", "sh", "-c", script, "sh", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _nft_raw(path: Path) -> list[dict[str, Any]]:
    """The `nftables` list of `nft -j -a list ruleset` after loading `path`."""
    out = _in_netns('nft -f "$1" && nft -j -a list ruleset', str(path))
    raw: list[dict[str, Any]] = json.loads(out)["nftables"]
    return raw


def _load_mapped(doc: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    """What the kernel holds after `nft -j -f` of the rewritten document."""
    path = tmp / "mapped.json"
    path.write_text(json.dumps(doc))
    loaded: list[dict[str, Any]] = json.loads(
        _in_netns('nft -j -f "$1" && nft -j list ruleset', str(path))
    )["nftables"]
    return loaded


def _collect(value: Any, out: list[Named], where: str = "t.nft") -> list[Named]:
    """Every address value of nft's JSON, as the collector would name it (a stand-in
    for secperf.rulesets.prefixes in these tests)."""
    if isinstance(value, str) and is_address(value):
        out.append(Named(value, where, "address"))
    elif isinstance(value, dict):
        prefix = value.get("prefix")
        if isinstance(prefix, dict) and len(value) == 1:
            out.append(Named(f"{prefix['addr']}/{prefix['len']}", where))
        else:
            for key, inner in value.items():
                if key not in ("comment", "name"):
                    _collect(inner, out, where)
    elif isinstance(value, list):
        for inner in value:
            _collect(inner, out, where)
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _objects(raw: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o[kind] for o in raw if kind in o]


def _rule(raw: list[dict[str, Any]], chain: str, index: int) -> dict[str, Any]:
    return [r for r in _objects(raw, "rule") if r["chain"] == chain][index]


def _prefix(amap: AddressMap, net: str) -> dict[str, Any]:
    mapped = ip_network(amap.network(net))
    return {"prefix": {"addr": str(mapped.network_address), "len": mapped.prefixlen}}


@needs_nft
def test_the_router_loads_with_mapped_addresses(tmp_path: Path) -> None:
    raw = _nft_raw(ROUTER)
    amap = AddressMap.build(_collect(raw, []))
    loaded = _load_mapped(map_nft(raw, amap), tmp_path)
    # The named set holds the mapped admins' /24 and host.
    admins = next(s for s in _objects(loaded, "set") if s["name"] == "admins")
    assert admins["elem"] == [_prefix(amap, "10.1.9.0/24"), amap.address("192.168.77.5")]
    # The rules: a prefix match, the LAN's prefix, the web server's address.
    drop66 = _rule(loaded, "forward", 2)["expr"][1]["match"]
    assert drop66["right"] == _prefix(amap, "10.1.66.0/24")
    web = _rule(loaded, "forward", 6)["expr"][2]["match"]
    assert web["right"] == amap.address("10.1.5.200")
    # The DNAT: matched on the mapped public address, rewritten to the mapped server.
    dnat = _rule(loaded, "prerouting", 0)["expr"]
    assert dnat[1]["match"]["right"] == amap.address("203.0.113.10")
    assert dnat[-1]["dnat"]["addr"] == amap.address("10.1.5.200")
    masq = _rule(loaded, "postrouting", 0)["expr"]
    assert masq[1]["match"]["right"] == _prefix(amap, "10.1.0.0/16")
    # The interfaces and everything else are as written; no production address is left.
    assert _rule(loaded, "forward", 6)["expr"][0]["match"]["right"] == "wan0"
    left = [s for s in _strings(loaded) if is_address(s)]
    assert left and all(ip_address(s) in ip_network("198.19.128.0/17") for s in left)
    assert len(_objects(loaded, "rule")) == len(_objects(raw, "rule"))


CONSTRUCTS = """
flush ruleset
table inet t {
  set s4 { type ipv4_addr; flags interval;
    elements = { 10.0.0.0/16, 10.1.0.5-10.1.0.9, 192.168.1.1 } }
  set c { type ipv4_addr . inet_service; elements = { 10.1.2.3 . 80, 10.1.2.4 . 443 } }
  set ci { type ifname . ipv4_addr; elements = { "lan0" . 10.1.2.3 } }
  set s6 { type ipv6_addr; flags interval; elements = { 2001:db8::/48, 2001:db8:1::1 } }
  map m { type ipv4_addr : verdict; elements = { 10.1.2.3 : accept } }
  map nm { type inet_service : ipv4_addr; elements = { 80 : 10.1.5.200, 443 : 10.1.5.201 } }
  counter cnt { packets 5 bytes 10 }
  chain f { type filter hook forward priority 0; policy accept;
    ip saddr 10.1.0.0/16 ip daddr != 10.2.0.1 counter packets 3 bytes 4 accept
    ip saddr { 10.3.0.0/16, 10.4.0.1 } accept
    ip daddr 10.5.0.1-10.5.0.9 accept
    ip saddr . tcp dport @c accept
    iifname . ip saddr { "wan0" . 10.1.2.4 } accept
    ct original ip saddr 10.6.0.1 accept
    ip daddr vmap @m
    ip6 saddr 2001:db8::/48 accept
  }
  chain n { type nat hook prerouting priority dstnat;
    ip daddr 203.0.113.10 tcp dport 80 dnat ip to 10.1.5.200:8080
    dnat ip to tcp dport map @nm
    dnat ip to ip saddr map { 10.1.0.0/16 : 10.1.5.200, 10.2.0.0/16 : 10.1.5.201 }
    ip daddr 203.0.113.11 dnat ip to 10.1.5.200-10.1.5.210
  }
}
"""


@needs_nft
def test_sets_maps_concatenations_and_nat_are_mapped(tmp_path: Path) -> None:
    source = tmp_path / "t.nft"
    source.write_text(CONSTRUCTS)
    raw = _nft_raw(source)
    amap = AddressMap.build(_collect(raw, []))
    doc = map_nft(raw, amap)
    assert doc["nftables"][0] == {"flush": {"ruleset": None}}
    assert not any("metainfo" in o for o in doc["nftables"])
    assert not any("handle" in body for o in doc["nftables"] for body in o.values() if body)
    loaded = _load_mapped(doc, tmp_path)
    a = amap.address
    sets = {s["name"]: s for s in _objects(loaded, "set") + _objects(loaded, "map")}
    assert {"range": [a("10.1.0.5"), a("10.1.0.9")]} in sets["s4"]["elem"]
    assert sets["c"]["elem"][0] == {"concat": [a("10.1.2.3"), 80]}
    assert sets["ci"]["elem"] == [{"concat": ["lan0", a("10.1.2.3")]}]
    assert a("2001:db8:1::1") in sets["s6"]["elem"]
    assert sets["m"]["elem"] == [[a("10.1.2.3"), {"accept": None}]]
    assert sets["nm"]["elem"] == [[80, a("10.1.5.200")], [443, a("10.1.5.201")]]
    # Counters start from zero on the DUT.
    assert next(c for c in _objects(loaded, "counter"))["packets"] == 0
    assert _rule(loaded, "f", 0)["expr"][2] == {"counter": {"packets": 0, "bytes": 0}}
    assert _rule(loaded, "f", 4)["expr"][0]["match"]["right"] == {
        "set": [{"concat": ["wan0", a("10.1.2.4")]}]
    }
    saddr_map = _rule(loaded, "n", 2)["expr"][0]["dnat"]["addr"]["map"]["data"]["set"]
    assert saddr_map[0] == [_prefix(amap, "10.1.0.0/16"), a("10.1.5.200")]
    assert _rule(loaded, "n", 3)["expr"][-1]["dnat"]["addr"] == {
        "range": [a("10.1.5.200"), a("10.1.5.210")]
    }
    assert _rule(loaded, "n", 0)["expr"][-1]["dnat"]["port"] == 8080
    left = [s for s in _strings(loaded) if is_address(s)]
    assert all(
        ip_address(s) in ip_network("198.19.128.0/17" if "." in s else "2001:2:0:8000::/49")
        for s in left
    )


@needs_nft
def test_an_address_the_collector_missed_is_refused(tmp_path: Path) -> None:
    raw = _nft_raw(ROUTER)
    named = [n for n in _collect(raw, []) if n.network != "203.0.113.10"]
    amap = AddressMap.build(named)
    with pytest.raises(MechanismError, match=r"203\.0\.113\.10 in rule ip nat prerouting"):
        map_nft(raw, amap)
    # With the loaded rule set at hand, the error names the rule's file:line.
    body = _rule(raw, "prerouting", 0)
    ref = RuleRef(ROUTER, 48, "ip", "nat", "prerouting", 0, body["handle"])
    rule = Rule(ref, "dnat", "10.1.5.200", tuple(body["expr"]), "dnat to $WEB")
    chain = Chain("ip", "nat", "prerouting", "prerouting", "nat", -100, "accept", (rule,))
    rs = RuleSet(ROUTER, "nft", (chain,), raw)
    with pytest.raises(MechanismError) as caught:
        map_nft({"nftables": raw}, amap, ruleset=rs)
    assert caught.value.where == f"{ROUTER}:48"
    assert "flush" not in json.dumps(map_nft(raw, AddressMap.build(_collect(raw, [])), flush=False))


def test_a_masked_match_is_refused() -> None:
    raw = [
        {"table": {"family": "ip", "name": "t"}},
        {
            "rule": {
                "family": "ip",
                "table": "t",
                "chain": "c",
                "handle": 4,
                "expr": [
                    {
                        "match": {
                            "op": "==",
                            "left": {
                                "&": [
                                    {"payload": {"protocol": "ip", "field": "saddr"}},
                                    "255.0.255.0",
                                ]
                            },
                            "right": "10.0.5.0",
                        }
                    }
                ],
            }
        },
    ]
    amap = AddressMap.build([Named("10.0.5.0/32", "m.nft:3"), Named("255.0.255.0/32", "m.nft:3")])
    with pytest.raises(MechanismError, match="bit mask"):
        map_nft(raw, amap)
    raw[1]["rule"]["expr"] = [{"xt": {"type": "match", "name": "conntrack"}}]
    with pytest.raises(MechanismError, match="iptables extension"):
        map_nft(raw, amap)


def test_an_interface_named_like_an_address_is_kept() -> None:
    raw = [
        {
            "set": {
                "family": "inet",
                "table": "t",
                "name": "ci",
                "type": ["ifname", "ipv4_addr"],
                "elem": [{"concat": ["10.9.9.9", "10.1.2.3"]}],
            }
        },
        {
            "rule": {
                "family": "inet",
                "table": "t",
                "chain": "c",
                "expr": [
                    {
                        "match": {
                            "op": "==",
                            "left": {"meta": {"key": "iifname"}},
                            "right": "10.9.9.9",
                        }
                    }
                ],
            }
        },
    ]
    amap = AddressMap.build([Named("10.1.2.3/32", "i.nft:3")])
    doc = map_nft(raw, amap)["nftables"]
    assert doc[1]["set"]["elem"] == [{"concat": ["10.9.9.9", amap.address("10.1.2.3")]}]
    assert doc[2]["rule"]["expr"][0]["match"]["right"] == "10.9.9.9"


IPTABLES = """# Generated by iptables-save v1.8.9 on a router
*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d 203.0.113.10/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.1.5.200:8080
-A POSTROUTING -s 10.1.0.0/16 -o wan0 -j SNAT --to-source 198.51.100.1-198.51.100.9
COMMIT
*filter
:INPUT DROP [0:0]
:FORWARD DROP [12:345]
:OUTPUT ACCEPT [0:0]
-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD ! -s 10.1.66.0/255.255.255.0 -i lan0  -j ACCEPT
-A FORWARD -s 10.1.9.0/24,192.168.77.5 -p tcp -m comment --comment "admins -s 10.9.9.9" -j ACCEPT
-A FORWARD -m iprange ! --src-range 10.1.0.10-10.1.0.20 -j ACCEPT
-A FORWARD -d 10.1.5.200 -m conntrack --ctorigdst 203.0.113.10 -j ACCEPT
COMMIT
"""
IPT_NAMED = [
    Named(n, f"router.rules:{line}")
    for n, line in [
        ("203.0.113.10/32", 5),
        ("10.1.5.200/32", 5),
        ("10.1.0.0/16", 6),
        ("198.51.100.1/32", 6),
        ("198.51.100.9/32", 6),
        ("10.1.66.0/24", 13),
        ("10.1.9.0/24", 14),
        ("192.168.77.5/32", 14),
        ("10.1.0.10/32", 15),
        ("10.1.0.20/32", 15),
    ]
]
_ADDRESSY = re.compile(r"[0-9a-f:.]*[.:][0-9a-f:.]*[0-9a-f](/[0-9.]+)?")


def test_iptables_values_are_rewritten_and_every_other_byte_kept() -> None:
    amap = AddressMap.build(IPT_NAMED)
    out = map_iptables(IPTABLES, amap, source="router.rules")
    before, after = IPTABLES.splitlines(keepends=True), out.splitlines(keepends=True)
    assert len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        # With every address-like token blanked, each line is byte for byte the same.
        assert _ADDRESSY.sub("A", old) == _ADDRESSY.sub("A", new) or '"admins' in old
    a = amap.address
    assert f"--to-destination {a('10.1.5.200')}:8080" in after[4]
    assert f"--to-source {a('198.51.100.1')}-{a('198.51.100.9')}" in after[5]
    lan = ip_network(amap.network("10.1.66.0/24"))
    assert f"! -s {lan.network_address}/{lan.netmask} -i lan0  -j" in after[12]
    assert f"-s {amap.network('10.1.9.0/24')},{a('192.168.77.5')} " in after[13]
    assert '--comment "admins -s 10.9.9.9"' in after[13]  # a comment is not a rule
    assert f"! --src-range {a('10.1.0.10')}-{a('10.1.0.20')} " in after[14]
    assert f"--ctorigdst {a('203.0.113.10')} " in after[15]
    assert after[9] == ":FORWARD DROP [12:345]\n"


@needs_iptables
def test_iptables_output_passes_restore_test(tmp_path: Path) -> None:
    path = tmp_path / "mapped.rules"
    path.write_text(map_iptables(IPTABLES, AddressMap.build(IPT_NAMED)))
    _in_netns('iptables-nft-restore --test < "$1"', str(path))


@needs_iptables
def test_ip6tables_output_passes_restore_test(tmp_path: Path) -> None:
    text = (
        "*nat\n:PREROUTING ACCEPT [0:0]\n"
        "-A PREROUTING -d 2001:db8::80/128 -p tcp --dport 80 "
        "-j DNAT --to-destination [2001:db8:1::5]:8080\nCOMMIT\n"
        "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -s 2001:db8::/32 -j ACCEPT\nCOMMIT\n"
    )
    named = [Named(n, "v6.rules:3") for n in ("2001:db8::80/128", "2001:db8:1::5/128")]
    amap = AddressMap.build([*named, Named("2001:db8::/32", "v6.rules:6")])
    out = map_iptables(text, amap)
    assert f"[{amap.address('2001:db8:1::5')}]:8080" in out
    assert f"-s {amap.network('2001:db8::/32')} " in out
    path = tmp_path / "mapped6.rules"
    path.write_text(out)
    _in_netns('ip6tables-nft-restore --test < "$1"', str(path))


def test_iptables_refuses_what_it_cannot_map() -> None:
    amap = AddressMap.build(IPT_NAMED)
    with pytest.raises(MechanismError) as caught:
        map_iptables("*filter\n-A FORWARD -s 10.7.0.1 -j ACCEPT\nCOMMIT\n", amap, source="f.rules")
    assert caught.value.where == "f.rules:2"
    with pytest.raises(MechanismError, match="host name"):
        map_iptables("*filter\n-A FORWARD -s gateway.lan -j ACCEPT\nCOMMIT\n", amap)
    with pytest.raises(MechanismError, match="host bits"):
        map_iptables("*nat\n-A PREROUTING -d 10.1.0.0/16 -j NETMAP --to 10.1.0.0/16\n", amap)
