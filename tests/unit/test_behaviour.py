"""The behaviour section: flows two variants decide differently come first."""

from __future__ import annotations

from typing import Any

from secperf.report.behaviour import behaviour_lines
from secperf.results.behaviour import behaviour


def row(
    flow: str, verdict: str, by: str, expect: str = "accept", derived: str = "r.nft:5"
) -> dict[str, Any]:
    return {
        "flow": flow,
        "describe": f"tcp 10.1.0.5 -> 203.0.113.1:{flow}",
        "expect": expect,
        "derived_for": derived,
        "origin": "coverage",
        "verdict": verdict,
        "decided_by": by,
    }


def test_a_service_the_proposed_set_drops_is_a_behaviour_change() -> None:
    meta = {
        "verdicts": {
            "current": [
                row("f1", "accept", "r.nft:5"),
                row("f2", "accept", "r.nft:6", derived="r.nft:6"),
            ],
            "proposed": [
                row("f1", "accept", "r.nft:5"),
                row("f2", "deny", "the policy of inet filter forward", derived="r.nft:6"),
            ],
        }
    }
    b = behaviour(meta)
    assert b is not None
    assert [c["flow"] for c in b["changes"]] == ["f2"]
    assert b["coverage"]["current"] == {"accepting_rules": 2, "hit": 2}
    assert b["coverage"]["proposed"] == {"accepting_rules": 2, "hit": 1}
    assert [m["flow"] for m in b["misses"]["proposed"]] == ["f2"]
    text = "\n".join(behaviour_lines(b))
    assert "1 flow(s) decided differently" in text
    assert "proposed     deny    the policy of inet filter forward" in text


def test_a_flow_decided_by_another_rule_is_a_miss_not_a_change() -> None:
    meta = {"verdicts": {"current": [row("f1", "accept", "r.nft:9")]}}
    b = behaviour(meta)
    assert b is not None and not b["changes"]
    assert b["misses"]["current"][0]["decided_by"] == "r.nft:9"


def test_no_probes_no_section() -> None:
    assert behaviour({}) is None


def test_a_suggested_rewrite_is_equal_on_these_flows_not_proven() -> None:
    same = [row("f1", "accept", "r.nft:5"), row("f2", "deny", "policy", expect="deny")]
    meta = {"verdicts": {"current": same, "proposed": same, "suggested": same}}
    b = behaviour(meta)
    assert b is not None and b["rewrite"] == {
        "of": "proposed",
        "flows": 2,
        "differ": [],
        "untraced": 0,
    }
    assert "  suggested against proposed: equal on these 2 flows, not a proof" in behaviour_lines(b)
    other = [row("f1", "accept", "s.nft:3"), row("f2", "accept", "s.nft:3", expect="deny")]
    b = behaviour({"verdicts": {"proposed": same, "suggested": other}})
    assert b is not None and b["rewrite"]["differ"] == ["f2"]
    assert any("NOT equivalent: 1 of 2 flows" in line for line in behaviour_lines(b))


def test_the_rules_no_flow_can_exercise_are_listed_apart_from_the_counts() -> None:
    meta = {
        "verdicts": {"current": [row("f1", "accept", "r.nft:5")]},
        "rule_set_map": {"unexercised": ["r.rules:20: no flow: protocol esp is not sent"]},
    }
    b = behaviour(meta)
    assert b is not None
    assert b["unexercised"] == ["r.rules:20: no flow: protocol esp is not sent"]
    assert b["coverage"]["current"] == {"accepting_rules": 1, "hit": 1}
    lines = behaviour_lines(b)
    i = lines.index("  1 rule(s) no coverage flow can exercise (not in the counts):")
    assert lines[i + 1] == "    r.rules:20: no flow: protocol esp is not sent"
    assert "unexercised" not in (behaviour({"verdicts": meta["verdicts"]}) or {})
