"""`review --suggest`'s third pattern: a hot accept moves ahead of the rules before it
whose matches it provably shares no packet with (secperf.rulesets.disjoint), and never
past one it may overlap, one that decides as much of the traffic, or when it counts."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from secperf.review_suggest import write_suggestion
from secperf.rulesets.disjoint import disjoint
from secperf.rulesets.load import load, nft_text
from secperf.rulesets.model import Flow, RuleSet
from secperf.rulesets.suggest import HOT_SHARE, hot_shares, suggest

needs_nft = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("unshare") is None,
    reason="loading an nft file needs root, nft and unshare",
)


def m(left: Any, right: Any, op: str = "==") -> dict[str, Any]:
    return {"match": {"op": op, "left": left, "right": right}}


def pl(proto: str, field: str) -> dict[str, Any]:
    return {"payload": {"protocol": proto, "field": field}}


IIF = {"meta": {"key": "iifname"}}
ACCEPT = {"accept": None}
DROP = {"drop": None}


def prefix(addr: str, length: int) -> dict[str, Any]:
    return {"prefix": {"addr": addr, "len": length}}


@pytest.mark.parametrize(
    ("a", "b", "apart"),
    [
        # ports: values, sets, ranges
        ([m(pl("tcp", "dport"), 443), ACCEPT], [m(pl("tcp", "dport"), 22), DROP], True),
        ([m(pl("tcp", "dport"), 443)], [m(pl("tcp", "dport"), {"set": [22, 443]})], False),
        ([m(pl("tcp", "dport"), 443)], [m(pl("tcp", "dport"), {"range": [400, 500]})], False),
        ([m(pl("tcp", "dport"), 443)], [m(pl("tcp", "dport"), {"range": [1, 442]})], True),
        # a packet is TCP or UDP, IPv4 or IPv6
        ([m(pl("tcp", "dport"), 443)], [m(pl("udp", "dport"), 443)], True),
        ([m(pl("tcp", "dport"), 443)], [m({"meta": {"key": "l4proto"}}, "udp")], True),
        ([m(pl("tcp", "dport"), 443)], [m({"meta": {"key": "l4proto"}}, "tcp")], False),
        ([m(pl("ip", "saddr"), "10.1.0.1")], [m(pl("ip6", "saddr"), "2001:db8::1")], True),
        # prefixes: contained overlaps, disjoint does not
        ([m(pl("ip", "saddr"), prefix("10.1.0.0", 16))], [m(pl("ip", "saddr"), "10.1.9.5")], False),
        (
            [m(pl("ip", "saddr"), prefix("10.1.0.0", 16))],
            [m(pl("ip", "saddr"), prefix("10.2.0.0", 16))],
            True,
        ),
        # interface names, and what proves nothing
        ([m(IIF, "lan0")], [m(IIF, "wan0")], True),
        ([m(IIF, "lan0")], [m(IIF, "lan*")], False),
        ([m(IIF, "lan0")], [m(IIF, "wan0", op="!=")], False),
        ([m(IIF, "lan0")], [m(IIF, "@outside")], False),
        ([m(pl("tcp", "dport"), 443)], [m(pl("ip", "saddr"), "10.1.0.1")], False),
        # a match after a statement is not a leading match: the counter counts every packet
        ([m(IIF, "lan0")], [{"counter": None}, m(IIF, "wan0"), DROP], False),
    ],
)
def test_disjoint_only_where_a_field_proves_it(a: list[Any], b: list[Any], apart: bool) -> None:
    assert disjoint(a, b) is apart
    assert disjoint(b, a) is apart


CHAIN = """table inet filter {{
\tchain forward {{
\t\ttype filter hook forward priority filter; policy drop;
\t\tct state established,related accept
\t\tip saddr 10.66.0.0/16 drop
\t\tudp dport 53 accept
\t\ttcp dport 22 accept
\t\t{before}
\t\t{hot}
\t\tiifname "wan0" drop
\t}}
}}
"""


def _rules(path: Path) -> RuleSet:
    return load(path, "nft")


def _forward(rs: RuleSet) -> list[str]:
    chain = rs.chain("inet", "filter", "forward")
    assert chain is not None
    return [r.text for r in chain.rules]


def _hot(rs: RuleSet, text: str, share: float) -> dict[str, float]:
    [rule] = [r for r in rs.rules() if r.text == text]
    return {rule.ref.key(): share}


@needs_nft
def test_a_hot_accept_moves_ahead_of_the_rules_it_cannot_overlap(tmp_path: Path) -> None:
    path = tmp_path / "router.nft"
    path.write_text(CHAIN.format(before="tcp dport 25 drop", hot="tcp dport 443 accept"))
    rs = _rules(path)
    found = suggest(rs, _hot(rs, "tcp dport 443 accept", 0.8))
    [change] = found.changes
    assert (change.pattern, change.replaces, change.rules) == ("hot-first", f"{path}:9", 4)
    assert "80% of the traffic" in change.text and f"{path}:6-8" in change.text
    out = tmp_path / "suggested.nft"
    out.write_text(nft_text(found.document, where="test"))
    # it stops at the drop of 10.66.0.0/16: a packet from there to 443 meets both
    assert _forward(load(out, "nft")) == [
        "ct state established,related accept",
        "ip saddr 10.66.0.0/16 drop",
        "tcp dport 443 accept",
        "udp dport 53 accept",
        "tcp dport 22 accept",
        "tcp dport 25 drop",
        'iifname "wan0" drop',
    ]


@needs_nft
@pytest.mark.parametrize(
    ("before", "hot", "share", "why"),
    [
        ("tcp dport 400-500 drop", "tcp dport 443 accept", 0.8, "overlaps the rule before"),
        ("tcp dport 25 drop", "tcp dport 443 accept", HOT_SHARE / 2, "not hot"),
        ("tcp dport 25 drop", "tcp dport 443 counter accept", 0.8, "it counts"),
        ("tcp dport 25 drop", "tcp dport 443 drop", 0.8, "it does not accept"),
    ],
)
def test_no_hot_move_where_it_could_change_a_decision_or_a_count(
    tmp_path: Path, before: str, hot: str, share: float, why: str
) -> None:
    path = tmp_path / "router.nft"
    path.write_text(CHAIN.format(before=before, hot=hot))
    rs = _rules(path)
    assert suggest(rs, _hot(rs, hot, share)).changes == (), why


@needs_nft
def test_a_rule_that_decides_as_much_stays_ahead(tmp_path: Path) -> None:
    path = tmp_path / "router.nft"
    path.write_text(CHAIN.format(before="tcp dport 25 drop", hot="tcp dport 443 accept"))
    rs = _rules(path)
    hot = {**_hot(rs, "tcp dport 443 accept", 0.4), **_hot(rs, "tcp dport 22 accept", 0.4)}
    found = suggest(rs, hot)
    assert [c.pattern for c in found.changes] == ["hot-first", "hot-first"]
    out = tmp_path / "suggested.nft"
    out.write_text(nft_text(found.document, where="test"))
    # each moves ahead of what decides less, and 443 stays behind 22
    assert _forward(load(out, "nft"))[2:6] == [
        "tcp dport 22 accept",
        "tcp dport 443 accept",
        "udp dport 53 accept",
        "tcp dport 25 drop",
    ]


@needs_nft
def test_hot_shares_are_the_weight_each_rule_decides_first(tmp_path: Path) -> None:
    path = tmp_path / "router.nft"
    path.write_text(CHAIN.format(before="tcp dport 25 drop", hot="tcp dport 443 accept"))
    rs = _rules(path)

    def flow(name: str, proto: str, src: str, dport: int, weight: float) -> Flow:
        return Flow(name, proto, src, "203.0.113.7", dport, "lan0", "wan0", weight=weight)  # type: ignore[arg-type]

    flows = [
        flow("web", "tcp", "10.1.0.2", 443, 6.0),
        flow("web-66", "tcp", "10.66.0.2", 443, 1.0),  # the 10.66 drop decides it first
        flow("dns", "udp", "10.1.0.2", 53, 3.0),
    ]
    shares = hot_shares(rs, flows)
    by_text = {r.text: shares.get(r.ref.key(), 0.0) for r in rs.rules()}
    assert by_text["tcp dport 443 accept"] == pytest.approx(0.6)
    assert by_text["ip saddr 10.66.0.0/16 drop"] == pytest.approx(0.1)
    assert by_text["udp dport 53 accept"] == pytest.approx(0.3)
    assert by_text["tcp dport 22 accept"] == 0.0
    found = suggest(rs, shares)
    assert [c.pattern for c in found.changes] == ["hot-first"]


@needs_nft
def test_review_suggest_reads_the_hot_rule_off_the_flow_file(tmp_path: Path) -> None:
    path = tmp_path / "router.nft"
    path.write_text(CHAIN.format(before="tcp dport 25 drop", hot="tcp dport 443 accept"))
    flows = tmp_path / "flows.csv"
    flows.write_text(
        "protocol,src,dst,dport,weight,request,response,ingress,egress\n"
        "tcp,10.1.0.2,203.0.113.7,443,0.9,100,1000,lan0,wan0\n"
        "udp,10.1.0.2,203.0.113.7,53,0.1,40,100,lan0,wan0\n"
    )
    found = write_suggestion(path, tmp_path / "out", str(flows))
    assert [c.pattern for c in found.changes] == ["hot-first"]
    assert "90% of the traffic" in found.lines[1]
    # with coverage traffic (one flow per rule) no rule is hot
    none = write_suggestion(path, tmp_path / "out2")
    assert "hot-first" not in [c.pattern for c in none.changes]
