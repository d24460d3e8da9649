"""The attack mix's pure parts: attacks built from rules, the even spread, the
record's figures from the three counts; the schema keys of the mix, the IPS's
reassembly and the fast path; the flowtable and SYN-answer counter rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from secperf import ips_rules
from secperf.mechanisms.capabilities import Detector
from secperf.mechanisms.fastpath import render_flowtable
from secperf.scenario.scenario import Scenario
from secperf.workloads.attack_mix import (
    Attack,
    attack_payload,
    attacks_from,
    is_attack,
    rst_filter,
    summarize,
    tcp_attacker,
)
from secperf.workloads.parts.delivery import FloodMatch, counter_rules

RULES = Path(__file__).resolve().parents[2] / "rules" / "secperf-attacks.rules"


def test_attacks_from_the_shipped_rules() -> None:
    rules = ips_rules.parse_rules(RULES)
    udp = attacks_from(rules, "udp", 5390)
    assert [(a.sid, a.action, a.port) for a in udp] == [
        (9000002, "drop", 5390),
        (9000301, "alert", 53),
        (9000302, "alert", 53),
    ]
    tcp = {a.sid: a for a in attacks_from(rules, "tcp", 5390)}
    # offset 0 depth 4: "GET " first, then the second content
    assert tcp[9000107].payload.startswith(b"GET eval(")
    assert tcp[9000104].payload == b"() { ; "
    # Every attack's payload matches its own rule and only the rules' contents.
    for a in [*udp, *tcp.values()]:
        rule = next(r for r in rules if r.sid == a.sid)
        for p in rule.patterns:
            hay = a.payload.lower() if p.nocase else a.payload
            assert (p.data.lower() if p.nocase else p.data) in hay


def test_a_pcre_rule_gives_no_attack() -> None:
    (rule,) = ips_rules.parse_text(
        'alert udp any any -> any any (msg:"x"; pcre:"/a+b/"; sid:1; rev:1;)'
    )
    assert attack_payload(rule) is None


@pytest.mark.parametrize("share", [0.01, 0.05, 0.5, 1.0])
def test_attacks_are_spread_evenly(share: float) -> None:
    flags = [is_attack(i, share) for i in range(1000)]
    assert sum(flags) == round(1000 * share)
    gaps = [j - i for i, j in zip(*[[k for k, f in enumerate(flags) if f]] * 2, strict=False)]
    assert not gaps or max(gaps) <= round(1 / share)


ATTACKS = [Attack(1, "drop", 9, b"A"), Attack(2, "alert", 9, b"B")]


def test_summary_inline() -> None:
    r = summarize(
        ATTACKS,
        {"clean": 980, "1": 10, "2": 10},
        {"clean": 970, "2": 10},
        Detector("ips-nfq", blocks=True),
        {"by_sid": {"1": 10, "2": 10}, "drops": 10},
    )
    assert (r["detected"], r["blocked"], r["missed"], r["leaked"]) == (20, 10, 0, 0)
    assert r["policy_held"] is True and r["false_alerts"] == 0
    assert r["clean_delivered_pct"] == pytest.approx(100 * 970 / 980)


def test_summary_counts_a_leak_and_an_overflow() -> None:
    # Under load: 2 drop-rule attacks lost in the queue before the matcher (not
    # detected, not arrived), 1 arrived unmatched (leaked), 1 false alert.
    r = summarize(
        ATTACKS,
        {"clean": 980, "1": 10, "2": 10},
        {"clean": 900, "1": 1, "2": 9},
        Detector("ips-nfq", blocks=True),
        {"by_sid": {"1": 7, "2": 9, "77": 1}, "drops": 7},
    )
    assert (r["detected"], r["blocked"], r["missed"], r["leaked"]) == (16, 7, 4, 1)
    assert r["policy_held"] is False and r["false_alerts"] == 1


def test_summary_of_a_mirror_blocks_nothing_and_claims_no_policy() -> None:
    r = summarize(
        ATTACKS,
        {"clean": 980, "1": 10, "2": 10},
        {"clean": 980, "1": 10, "2": 10},
        Detector("ids", blocks=False),
        {"by_sid": {"1": 10, "2": 9}, "drops": 0},
    )
    assert r["detector"] == "ids" and (r["detected"], r["blocked"], r["missed"]) == (19, 0, 1)
    assert r["leaked"] == 10 and r["policy_held"] is None


def test_summary_without_a_detector_claims_no_detection() -> None:
    r = summarize(ATTACKS, {"clean": 5, "1": 1, "2": 1}, {"clean": 5, "1": 1, "2": 1}, None, None)
    assert r["detected"] is None and r["blocked"] is None and r["detected_pct"] is None
    assert r["missed"] == 2 and r["leaked"] == 1 and r["policy_held"] is None


def _scenario(mech: str, workload: str = "") -> Scenario:
    import tomllib

    text = f"""
name = "t"
[variants.v]
mechanisms = [{mech}]
[[workloads]]
kind = "rr"
{workload}
"""
    return Scenario.model_validate(tomllib.loads(text), context={"check_files": False})


def test_schema_reassembly_needs_nfq_and_fastpath_parses() -> None:
    s = _scenario('{ kind = "ips", reassembly = true, reassembly_bytes = "64KiB" }')
    ips = s.variants["v"].mechanisms[0]
    assert ips.reassembly and ips.reassembly_bytes == 65536  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="needs engine"):
        _scenario('{ kind = "ips", engine = "fwsnort", reassembly = true }')
    assert _scenario('{ kind = "fastpath" }').variants["v"].mechanisms[0].kind == "fastpath"


def _mix(keys: str) -> Scenario:
    """A scenario with an IPS variant and one attack_mix workload of `keys` (TOML lines)."""
    import tomllib

    text = f"""
name = "t"
[variants.v]
mechanisms = [{{ kind = "ips" }}]
[[workloads]]
kind = "attack_mix"
{keys}
"""
    return Scenario.model_validate(tomllib.loads(text), context={"check_files": False})


def test_schema_attack_mix() -> None:
    w = _mix("rate = [1000, 5000]\nattack_share = 0.01").workloads[0]
    assert w.rate == [1000, 5000] and w.name == "attack-mix"  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="attack_share"):
        _mix("rate = [1000, 5000]\nattack_share = 0")


def test_schema_tcp_pieces() -> None:
    w = _mix('protocol = "tcp"\nsegments = 3\norder = "reverse"').workloads[0]
    assert (w.segments, w.order, w.name) == (3, "reverse", "attack-mix-tcp")  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match='protocol = "tcp"'):
        _mix('protocol = "udp"\nsegments = 3\norder = "reverse"')
    with pytest.raises(ValidationError, match=r"reassembly_pending|held"):
        _scenario('{ kind = "ips", reassembly = true, reassembly_pending = -1 }')


def test_tcp_attack_pieces_cut_inside_the_attack_string() -> None:
    body = b"SECPERF-IPS-TEST-ATTACK-7e1f "
    msg = tcp_attacker.message(body, 256, b"abcdefghij" * 30, 7, "9000001")
    assert len(msg) == 256 and msg.endswith(b"|SPMX0000000007:9000001\n")
    for segments in (1, 2, 3, 16):
        ps = tcp_attacker.pieces(msg, len(body), segments, "in-order")
        assert b"".join(d for _, d in ps) == msg
        assert [o for o, _ in ps] == sorted(o for o, _ in ps)
        assert len(ps) == segments
        # no piece holds the whole string once it is cut
        assert segments == 1 or not any(body.strip() in d for _, d in ps)
    rev = tcp_attacker.pieces(msg, len(body), 3, "reverse")
    assert [o for o, _ in rev] == sorted((o for o, _ in rev), reverse=True)
    # a string shorter than the pieces asked: cut at every byte at most
    assert len(tcp_attacker.pieces(b"ab" + b"x" * 10, 2, 8, "in-order")) == 2


@pytest.mark.parametrize(
    ("src", "dst"), [("198.18.1.2", "198.18.2.2"), ("2001:2::1", "2001:2:0:2::2")]
)
def test_tcp_segment_checksum_verifies(src: str, dst: str) -> None:
    import socket
    import struct

    seg = tcp_attacker.segment(src, dst, 65100, 80, 2**32 - 1, 5, 0x18, b"odd")
    sport, dport, seq, ack, flags, n = tcp_attacker.parse(seg, v6=True) or (0,) * 6
    assert (sport, dport, seq, ack, flags, n) == (65100, 80, 2**32 - 1, 5, 0x18, 3)
    fam = socket.AF_INET6 if ":" in src else socket.AF_INET
    a, b = socket.inet_pton(fam, src), socket.inet_pton(fam, dst)
    pseudo = (
        a + b + struct.pack("!IxxxB", len(seg), 6)
        if fam == socket.AF_INET6
        else a + b + struct.pack("!xBH", 6, len(seg))
    )
    # a segment with a right checksum sums to zero with its pseudo-header
    assert tcp_attacker.checksum(pseudo + seg) == 0


def test_tcp_receiver_tag_pattern() -> None:
    stream = b"junk" + tcp_attacker.tag(3, "clean") + b"x" + tcp_attacker.tag(4, "9000101")
    assert [m.group(2) for m in tcp_attacker.TAG.finditer(stream)] == [b"clean", b"9000101"]
    assert len(tcp_attacker.tag(9_999_999_999, "9999999")) < tcp_attacker.TAG_MAX


def test_rst_filter_spares_the_senders_own() -> None:
    text = rst_filter("secperf_x_atk")
    assert "tcp sport 65100-65499" in text and "meta mark != 0x5ec7 drop" in text
    assert text.index("delete table") < text.rindex("table inet secperf_x_atk {")


def test_flowtable_rules() -> None:
    text = render_flowtable("secperf_x_fastpath", ["veth-a", "veth-b"])
    assert 'devices = { "veth-a", "veth-b" }' in text
    assert "flow add @ft" in text and "hook ingress" in text


def test_syn_floods_count_the_targets_answers() -> None:
    text = counter_rules(
        "t", [FloodMatch("tcp", "198.18.4.2", "9"), FloodMatch("udp", "198.18.4.2", "9")]
    )
    assert "counter synack_0" in text and "counter rst_0" in text
    assert "synack_1" not in text and "hook output" in text
    assert counter_rules("t", [FloodMatch("udp", "198.18.4.2", "9")]).count("output") == 0
