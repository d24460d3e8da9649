"""ACL rendering: the right number of entries, none matching the measured flow, permits placed."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest

from secperf.errors import MechanismError
from secperf.mechanisms.acl import (
    Acl,
    AclSpec,
    generated_entries,
    render_ipset,
    render_iptables,
    render_nft,
)
from secperf.mechanisms.base import MechanismContext, TrafficPlan

PLAN = TrafficPlan(
    family=4,
    client_net="198.18.1.2/32",
    server_net="198.18.2.2/32",
    client_addr="198.18.1.2",
    server_addr="198.18.2.2",
)
PLAN6 = TrafficPlan(
    family=6,
    client_net="2001:2:0:1::2/128",
    server_net="2001:2:0:2::2/128",
    client_addr="2001:2:0:1::2",
    server_addr="2001:2:0:2::2",
)


def chain_rules(text: str) -> list[str]:
    body = text.split("policy drop;", 1)[1]
    return [line.strip() for line in body.splitlines() if line.strip() not in ("", "}")]


@pytest.mark.parametrize("entries", ["standard", "extended"])
def test_generated_entries_never_match_measured_traffic(entries: str) -> None:
    gen = generated_entries(3000, entries, PLAN)  # type: ignore[arg-type]
    assert len(gen) == 3000
    assert len(set(gen)) == 3000, "entries must be distinct"
    measured_ports = {5201, *range(5300, 5400)}
    for e in gen:
        assert ipaddress.ip_address(e.src) in ipaddress.ip_network("198.18.0.0/15")
        if entries == "standard":
            # a standard entry differs in source from both ends of the measured flow
            assert e.src not in (PLAN.client_addr, PLAN.server_addr)
        else:
            assert e.port is not None and e.port not in measured_ports


def test_linear_nft_has_n_rules_then_permits_last() -> None:
    text = render_nft(AclSpec(rules=100), generated_entries(100, "extended", PLAN), PLAN, "t")
    rules = chain_rules(text)
    assert len(rules) == 102
    assert all("dport 5201" not in r for r in rules[:100])
    assert "th dport { 5201, 5300-5399 } accept" in rules[100]
    assert "th sport { 5201, 5300-5399 } accept" in rules[101]


def test_match_first_puts_permits_first_and_stateful_adds_ct() -> None:
    acl = AclSpec(rules=10, match="first", stateful=True)
    rules = chain_rules(render_nft(acl, generated_entries(10, "extended", PLAN), PLAN, "t"))
    assert rules[0] == "ct state established,related accept"
    assert "th dport" in rules[1] and "th sport" in rules[2]
    assert len(rules) == 13


def test_set_layout_puts_entries_in_one_set_and_one_lookup_rule() -> None:
    acl = AclSpec(rules=500, layout="set")
    text = render_nft(acl, generated_entries(500, "extended", PLAN), PLAN, "t")
    assert "type ipv4_addr . ipv4_addr . inet_proto . inet_service" in text
    assert (
        len(re.findall(r"^\s+198\.18\.1\.2 \. 198\.18\.2\.2 \. (tcp|udp) \. \d+,$", text, re.M))
        == 500
    )
    rules = chain_rules(text)
    assert rules[0] == "ip saddr . ip daddr . meta l4proto . th dport @acl accept"
    assert len(rules) == 3


def test_standard_entries_match_source_only() -> None:
    acl = AclSpec(rules=3, entries="standard")
    rules = chain_rules(render_nft(acl, generated_entries(3, "standard", PLAN), PLAN, "t"))
    assert rules[:3] == [
        "ip saddr 198.19.0.1 accept",
        "ip saddr 198.19.0.2 accept",
        "ip saddr 198.19.0.3 accept",
    ]
    assert rules[3:] == ["ip saddr 198.18.1.2/32 accept", "ip saddr 198.18.2.2/32 accept"]


def test_ipv6_uses_ip6_matches() -> None:
    text = render_nft(AclSpec(rules=2), generated_entries(2, "extended", PLAN6), PLAN6, "t")
    assert "ip6 saddr 2001:2:0:1::2 ip6 daddr 2001:2:0:2::2 tcp dport 10000 accept" in text
    assert " ip saddr" not in text


def test_iptables_rendering_with_policy_drop_and_ipset() -> None:
    gen = generated_entries(4, "extended", PLAN)
    text = render_iptables(AclSpec(rules=4, backend="iptables-nft"), gen, PLAN, "s")
    assert ":FORWARD DROP [0:0]" in text and text.rstrip().endswith("COMMIT")
    lines = [x for x in text.splitlines() if x.startswith("-A FORWARD")]
    assert len(lines) == 4 + 4  # entries + tcp/udp permits each way
    assert lines[0] == "-A FORWARD -s 198.18.1.2 -d 198.18.2.2 -p tcp --dport 10000 -j ACCEPT"
    sets = render_ipset(AclSpec(rules=4, layout="set"), gen, PLAN, "s")
    assert sets.splitlines()[0].startswith("create s hash:ip,port,ip family inet")
    assert "add s 198.18.1.2,udp:10001,198.18.2.2" in sets
    text = render_iptables(AclSpec(rules=4, layout="set", backend="iptables-nft"), gen, PLAN, "s")
    assert "-A FORWARD -m set --match-set s src,dst,dst -j ACCEPT" in text


def test_render_writes_files_into_the_run_directory(tmp_path: Path) -> None:
    ctx = MechanismContext(plan=PLAN, files_dir=tmp_path / "files", name="v.0", table="secperf_x")
    files = Acl(AclSpec(rules=10, layout="set", backend="iptables-legacy")).render(ctx)
    assert [f.tool for f in files] == ["ipset", "iptables-restore"]
    assert all(f.path.parent == tmp_path / "files" and f.path.is_file() for f in files)
    nft = Acl(AclSpec(rules=10)).render(ctx)
    assert nft[0].path.name == "v.0.nft" and "table inet secperf_x" in nft[0].path.read_text()


def test_too_many_rules_is_a_clear_error() -> None:
    with pytest.raises(MechanismError, match="at most 65536"):
        generated_entries(70000, "standard", PLAN)


def test_generated_entries_stay_in_the_acl_half_of_198_19() -> None:
    reserved = ipaddress.ip_network("198.19.0.0/17")
    mapped = ipaddress.ip_network("198.19.128.0/17")
    standard = generated_entries(32767, "standard", PLAN)
    assert all(ipaddress.ip_address(e.src) in reserved for e in standard)
    assert ipaddress.ip_address(standard[-1].src) not in mapped
    extended = generated_entries(65536, "extended", PLAN)
    assert all(e.dst is not None and ipaddress.ip_address(e.dst) not in mapped for e in extended)
    with pytest.raises(MechanismError, match=r"no address of its own in 198\.19\.0\.0/17"):
        generated_entries(32768, "standard", PLAN)
