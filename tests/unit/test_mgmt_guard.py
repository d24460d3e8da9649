"""The management guard (secperf/testbed/hosts/mgmt_guard.py): every rule set an SSH
host loads gets an accept for the SSH session first in every chain that sees the
host's own packets (issue 22, finding 2). The same files, loaded over real SSH, are
in tests/netns/test_ssh_safety.py."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from secperf.mechanisms.acl import AclSpec, generated_entries, render_iptables
from secperf.mechanisms.acl import render_nft as acl_nft
from secperf.mechanisms.appliance import ApplianceSpec
from secperf.mechanisms.appliance import render_nft as appliance_nft
from secperf.mechanisms.base import traffic_plan
from secperf.testbed.hosts.mgmt_guard import (
    GuardError,
    Management,
    base_chains,
    guard_iptables,
    guard_nft,
    guarded,
    loads_rules,
)
from secperf.testbed.topology import Topology

MGMT = Management.parse("198.18.230.5 41234 198.18.230.6 22")
PLAN = traffic_plan(Topology.standard(), 4)


def test_the_session_as_sshd_reports_it() -> None:
    assert Management("198.18.230.5", "198.18.230.6", 22) == MGMT
    assert Management.parse("::ffff:10.0.0.1 5000 ::ffff:10.0.0.2 2222") == Management(
        "10.0.0.1", "10.0.0.2", 2222
    )
    assert Management.parse("2001:db8::1 5000 2001:db8::2 22").family == 6  # type: ignore[union-attr]
    for bad in ("", "10.0.0.1 5000 10.0.0.2", "10.0.0.1 x 2001:db8::2 22", "a b c d"):
        assert Management.parse(bad) is None


def _first_rules(text: str, table: str, chain: str) -> list[str]:
    return [
        line.split(f"{table} {chain} ", 1)[1]
        for line in text.splitlines()
        if line.startswith("insert rule ") and f" {table} {chain} " in line
    ]


def test_an_acl_on_an_end_host_accepts_the_session_before_its_drop_policy() -> None:
    assert MGMT is not None
    acl = AclSpec(rules=5)
    text = acl_nft(acl, generated_entries(5, "extended", PLAN), PLAN, "secperf_t", hook="input")
    assert "policy drop" in text and "ct state" not in text  # stateless: the danger
    assert base_chains(text) == [("inet", "secperf_t", "input")]
    out = guard_nft(text, MGMT)
    assert out.startswith(text.rstrip("\n"))  # the file's own lines keep their numbers
    # inserted last, so first: the inbound accept heads the chain
    inserts = _first_rules(out, "secperf_t", "input")
    assert inserts == [
        "ip saddr 198.18.230.6 ip daddr 198.18.230.5 tcp sport 22 accept",
        "ip saddr 198.18.230.5 ip daddr 198.18.230.6 tcp dport 22 accept",
    ]


def test_the_appliance_input_chain_and_every_other_base_chain_are_guarded() -> None:
    assert MGMT is not None
    text = appliance_nft(ApplianceSpec(), PLAN, "secperf_t_appl")
    chains = base_chains(text)
    assert ("inet", "secperf_t_appl", "input") in chains
    assert {c for _, _, c in chains} == {"forward", "input", "postrouting"}
    out = guard_nft(text, MGMT)
    for _, table, chain in chains:
        assert len(_first_rules(out, table, chain)) == 2


def test_nft_syntaxes_and_what_is_not_a_chain() -> None:
    assert MGMT is not None
    text = """
table inet a {  # a comment { with braces }
  flowtable ft { hook ingress priority filter; devices = { eth0 }; }
  set s { type ipv4_addr; elements = { 198.18.1.1 } }
  chain regular { tcp dport { 22, 80 } accept }
  chain inbound { type filter hook input priority 0; policy drop; }
}
table ip6 six { chain inbound { type filter hook input priority 0; policy drop; } }
table arp a { chain inbound { type filter hook input priority 0; } }
add table ip b
add chain ip b out { type filter hook output priority 0; policy drop; }
add rule ip b out ip daddr 198.18.0.0/15 accept
"""
    assert base_chains(text) == [
        ("inet", "a", "inbound"),
        ("ip6", "six", "inbound"),
        ("arp", "a", "inbound"),
        ("ip", "b", "out"),
    ]
    out = guard_nft(text, MGMT)
    assert len(_first_rules(out, "a", "inbound")) == 2 and len(_first_rules(out, "b", "out")) == 2
    assert not _first_rules(out, "six", "inbound")  # IPv6 chains never see an IPv4 session
    assert not _first_rules(out, "a", "regular") and "insert rule arp" not in out


def test_what_the_guard_cannot_read_is_refused() -> None:
    assert MGMT is not None
    with pytest.raises(GuardError, match="includes another"):
        guard_nft('include "/etc/nftables.d/x.nft"\n', MGMT)
    with pytest.raises(GuardError, match="unmatched"):
        guard_nft("table inet a { chain inbound { type filter hook input priority 0;\n", MGMT)


def test_iptables_restore_files_get_the_accept_in_each_table_before_commit() -> None:
    assert MGMT is not None
    acl = AclSpec(rules=3, backend="iptables-legacy")
    text = render_iptables(acl, generated_entries(3, "extended", PLAN), PLAN, "s", hook="input")
    assert ":INPUT DROP" in text
    out = guard_iptables(text, MGMT, 4)
    lines = out.splitlines()
    commit = lines.index("COMMIT")
    assert lines[commit - 2 : commit] == [
        "-I INPUT 1 -s 198.18.230.5/32 -d 198.18.230.6/32 -p tcp --dport 22 -j ACCEPT",
        "-I OUTPUT 1 -s 198.18.230.6/32 -d 198.18.230.5/32 -p tcp --sport 22 -j ACCEPT",
    ]
    assert guard_iptables(text, MGMT, 6) == text  # ip6tables: another family's packets


def test_only_loads_are_guarded_and_the_command_reads_stdin() -> None:
    assert MGMT is not None
    assert loads_rules(["nft", "-f", "/r/acl.nft"]) == "nft"
    assert loads_rules(["nft", "-c", "-f", "/r/acl.nft"]) is None
    assert loads_rules(["nft", "list", "ruleset"]) is None
    assert loads_rules(["iptables-legacy-restore"]) == "iptables"
    assert loads_rules(["iptables-nft-restore", "--test", "/r/x"]) is None
    argv, text = guarded(["nft", "-j", "-f", "/r/acl.nft"], "table ip t {}\n", MGMT)
    assert argv == ["nft", "-j", "-f", "-"] and text == "table ip t {}\n"
    argv, _ = guarded(["ip6tables-legacy-restore", "/r/x.ipt"], "*filter\nCOMMIT\n", MGMT)
    assert argv == ["ip6tables-legacy-restore"]


def test_an_ipv6_session_keeps_neighbour_discovery_in_every_guarded_chain() -> None:
    """issue 41: without NS/NA (and RS/RA) a drop policy cuts an IPv6 session as soon as
    the neighbour entries expire; only ND's hop limit 255 (never from off the link)."""
    mgmt6 = Management.parse("2001:db8::1 41234 2001:db8::2 22")
    assert mgmt6 is not None
    assert MGMT is not None and not any("icmpv6" in r for r in MGMT.nft_rules())
    nd = [r for r in mgmt6.nft_rules() if "icmpv6" in r]
    assert nd == [
        "ip6 hoplimit 255 icmpv6 type { nd-router-solicit, nd-router-advert, "
        "nd-neighbor-solicit, nd-neighbor-advert } accept"
    ]
    out = guard_iptables("*filter\n:INPUT DROP [0:0]\n:OUTPUT DROP [0:0]\nCOMMIT\n", mgmt6, 6)
    for chain in ("INPUT", "OUTPUT"):
        for kind in ("neighbour-solicitation", "neighbour-advertisement"):
            assert (
                f"-I {chain} 1 -p ipv6-icmp -m icmp6 --icmpv6-type {kind} -m hl --hl-eq 255 "
                "-j ACCEPT" in out
            ), out
    if os.geteuid() == 0 and shutil.which("ip6tables-legacy-restore"):
        # ip6tables-restore itself accepts the lines (--test: nothing is loaded)
        subprocess.run(["ip6tables-legacy-restore", "--test"], input=out, text=True, check=True)
