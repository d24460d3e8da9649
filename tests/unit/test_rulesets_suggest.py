"""`secperf review --suggest`'s rewrites: a run of same-shape rules into a set or a
verdict map, ct state established ahead of plain accepts, nothing else; the rest of the
file kept as nft loaded it; the rewrite loads with nft. And the libnftables JSON format
(nft-json) the ruleset kind loads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from secperf.review import review_scenario, rule_format
from secperf.review_suggest import write_suggestion
from secperf.rulesets.load import load, nft_text
from secperf.rulesets.model import RuleSet
from secperf.rulesets.suggest import suggest

DATA = Path(__file__).parent.parent / "data" / "rulesets"
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("unshare") is None,
    reason="loading an nft file needs root, nft and unshare",
)

HEAD = """table inet filter {
\tset admins { type ipv4_addr; elements = { 10.9.9.9 } }
\tchain forward {
\t\ttype filter hook forward priority filter; policy drop;
"""
TAIL = """\t}
\tchain other {
\t\ttcp dport 80 counter accept
\t}
}
table ip nat {
\tchain postrouting {
\t\ttype nat hook postrouting priority srcnat; policy accept;
\t\toifname "wan0" ip saddr 10.1.0.0/16 masquerade
\t}
}
"""


def _file(tmp_path: Path, body: str, name: str = "rules.nft") -> Path:
    path = tmp_path / name
    path.write_text(HEAD + body + TAIL)
    return path


def _chain_rules(rs: RuleSet, chain: str) -> list[str]:
    found = rs.chain("inet", "filter", chain)
    assert found is not None
    return [r.text for r in found.rules]


def _reloaded(tmp_path: Path, rs: RuleSet) -> RuleSet:
    out = tmp_path / "suggested.nft"
    out.write_text(nft_text(suggest(rs).document, where="test"))
    return load(out, "nft")


def _kept(rs: RuleSet) -> list[str]:
    """Everything but the forward chain's rules, as nft lists it."""
    return sorted(
        json.dumps({k: {x: y for x, y in v.items() if x != "handle"} for k, v in o.items()})
        for o in rs.raw
        if "metainfo" not in o and not ("rule" in o and o["rule"]["chain"] == "forward")
    )


def test_six_rules_that_differ_in_one_address_become_one_rule_with_a_set(
    tmp_path: Path,
) -> None:
    body = "".join(
        f'\t\tiifname "lan0" ip saddr 10.1.9.{i} tcp dport 22 accept\n' for i in range(6)
    )
    path = _file(tmp_path, '\t\tiifname "wan0" drop\n' + body)
    rs = load(path, "nft")
    found = suggest(rs)
    assert [(c.pattern, c.replaces, c.rules) for c in found.changes] == [("set", f"{path}:6-11", 6)]
    again = _reloaded(tmp_path, rs)
    rules = _chain_rules(again, "forward")
    assert len(rules) == 2 and rules[0] == 'iifname "wan0" drop'
    assert rules[1].startswith('iifname "lan0" ip saddr { 10.1.9.0, 10.1.9.1,')
    assert rules[1].endswith("} tcp dport 22 accept")
    assert _kept(again) == _kept(rs)  # the set, the other chain, the NAT table


def test_one_source_many_ports_with_verdicts_of_their_own_become_a_verdict_map(
    tmp_path: Path,
) -> None:
    verdicts = ["accept", "drop", "accept", "jump other", "accept"]
    body = "".join(
        f"\t\tip saddr 10.1.9.1 tcp dport {22 + i} {v}\n" for i, v in enumerate(verdicts)
    )
    rs = load(_file(tmp_path, body), "nft")
    assert [c.pattern for c in suggest(rs).changes] == ["vmap"]
    rules = _chain_rules(_reloaded(tmp_path, rs), "forward")
    assert rules == [
        "ip saddr 10.1.9.1 tcp dport vmap { 22 : accept, 23 : drop, 24 : accept, "
        "25 : jump other, 26 : accept }"
    ]


def test_ct_state_moves_ahead_of_plain_accepts_but_never_ahead_of_a_drop(
    tmp_path: Path,
) -> None:
    body = (
        '\t\tiifname "wan0" ip saddr 192.0.2.1 drop\n'
        '\t\tiifname "lan0" tcp dport 80 accept\n'
        '\t\tiifname "lan0" udp dport 53 accept\n'
        "\t\tct state established,related accept\n"
        '\t\tiifname "wan0" drop\n'
    )
    path = _file(tmp_path, body)
    rs = load(path, "nft")
    found = suggest(rs)
    assert [(c.pattern, c.replaces) for c in found.changes] == [("ct-first", f"{path}:6-8")]
    assert _chain_rules(_reloaded(tmp_path, rs), "forward") == [
        'iifname "wan0" ip saddr 192.0.2.1 drop',
        "ct state established,related accept",
        'iifname "lan0" tcp dport 80 accept',
        'iifname "lan0" udp dport 53 accept',
        'iifname "wan0" drop',
    ]


def test_no_rewrite_where_rules_count_limit_or_match_state(tmp_path: Path) -> None:
    body = (
        '\t\tiifname "lan0" tcp dport 80 counter accept\n'
        "\t\tct state established,related accept\n"
        + "".join(f"\t\tip saddr 10.1.9.{i} limit rate 5/second accept\n" for i in range(5))
        + "".join(f"\t\tip saddr 10.1.8.{i} accept\n" for i in range(3))  # a run of 3
        + "".join(f"\t\tip saddr 10.1.7.{i} ct mark 1 accept\n" for i in range(1))
        + "".join(f"\t\tip saddr 10.1.6.{i} ip daddr 10.2.0.{i} accept\n" for i in range(5))
    )
    rs = load(_file(tmp_path, body), "nft")
    assert suggest(rs).changes == ()
    found = write_suggestion(_file(tmp_path, body), tmp_path / "out")
    assert found.file is None and "no rewrite found" in found.lines[0]


def test_a_rewrite_of_the_router_loads_with_nft(tmp_path: Path) -> None:
    rs = load(DATA / "router.nft", "nft")
    found = write_suggestion(DATA / "router.nft", tmp_path / "out")
    assert found.file is not None and [c.pattern for c in found.changes] == ["ct-first"]
    again = load(found.file, "nft")
    before = {(c.family, c.table, c.name): len(c.rules) for c in rs.chains}
    assert {(c.family, c.table, c.name): len(c.rules) for c in again.chains} == before
    assert _chain_rules(again, "input")[0] == "ct state established,related accept"
    assert json.loads((tmp_path / "out" / "suggested.changes.json").read_text())[0][
        "replaces"
    ].endswith("router.nft:24-25")


def test_iptables_is_not_rewritten_and_says_why(tmp_path: Path) -> None:
    found = write_suggestion(DATA / "router.iptables", tmp_path)
    assert found.file is None and "iptables" in found.lines[0] and "not rewritten" in found.lines[0]


def test_a_libnftables_json_file_loads_as_nft_json(tmp_path: Path) -> None:
    listed = subprocess.run(
        ["unshare", "-n", "sh", "-c", f"nft -f {DATA / 'router.nft'} && nft -j list ruleset"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = tmp_path / "live.json"
    path.write_text(listed)
    assert rule_format(path) == "nft-json"
    rs, text = load(path, "nft-json"), load(DATA / "router.nft", "nft")
    assert rs.format == "nft" and not rs.warnings
    assert [r.expr for r in rs.rules()] == [r.expr for r in text.rules()]
    forward = rs.chain("inet", "filter", "forward")
    assert forward is not None and forward.rules[0].ref.where().endswith("forward, rule 1)")


def test_the_suggestion_is_the_reviews_third_variant(tmp_path: Path) -> None:
    found = write_suggestion(DATA / "router.nft", tmp_path)
    assert found.file is not None
    data = review_scenario(DATA / "router.nft", DATA / "router-proposed.nft", suggested=found.file)
    assert list(data["variants"]) == ["current", "proposed", "suggested"]
    entry = data["variants"]["suggested"]["mechanisms"][0]
    assert entry["file"] == str(found.file) and entry["format"] == "nft"
    assert entry["interfaces"] == data["variants"]["proposed"]["mechanisms"][0]["interfaces"]
