"""Where the cost goes, through a real run: a 1000-rule linear ACL under crr traffic.

The attribution round counts every rule on a copy of the DUT's live rule set (the
permit the traffic needs is hit; a packet walks about 1000 rules of the forward
chain), puts the original back exactly, and profiles the DUT's CPU: `nft_do_chain`
is among the functions that grew against plain forwarding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from secperf.plan import Plan
from secperf.report.terminal import build_tables
from secperf.results.rundir import RunDir
from secperf.run import rulecount
from secperf.run.runner import Runner
from secperf.scenario.scenario import Scenario

pytestmark = pytest.mark.netns

RULES = 1000


def scenario() -> Scenario:
    return Scenario.model_validate(
        {
            "name": "attr",
            "repeat": {
                "min": 2,
                "max": 2,
                "remeasure": 0,
                "trace_softirq": False,
                "attribution": True,
            },
            "timing": {"duration": "1s", "warmup": "0.1s"},
            "variants": {
                "acl": {"mechanisms": [{"kind": "acl", "rules": RULES, "layout": "linear"}]}
            },
            "workloads": [{"kind": "crr"}],
        }
    )


def without_values(value: Any) -> Any:
    """A listing as a reload must give it back: handles (renumbered by any reload)
    and counter values aside."""
    if isinstance(value, dict):
        return {
            k: ("counter" if k == "counter" else without_values(v))
            for k, v in value.items()
            if k != "handle"
        }
    if isinstance(value, list):
        return [without_values(v) for v in value if not (isinstance(v, dict) and "metainfo" in v)]
    return value


def test_hot_rules_walk_restore_and_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listings: list[tuple[str, Any]] = []
    start, finish = rulecount.CountedRules.start, rulecount.CountedRules.finish

    def listing(counted: rulecount.CountedRules) -> Any:
        return json.loads(counted.host.run(["nft", "-j", "list", "ruleset"]).stdout)

    def spy_start(self: rulecount.CountedRules) -> bool:
        listings.append(("before", listing(self)))
        return start(self)

    def spy_finish(self: rulecount.CountedRules) -> dict[str, Any]:
        rec = finish(self)
        listings.append(("after", listing(self)))
        return rec

    monkeypatch.setattr(rulecount.CountedRules, "start", spy_start)
    monkeypatch.setattr(rulecount.CountedRules, "finish", spy_finish)
    sc = scenario()
    run = Runner(Plan.of(sc), RunDir.create(tmp_path, "attr"), Console(quiet=True)).execute()

    lines = [line for line in run.iter_records() if line.get("phase") == "attribution"]
    counts = [line["record"] for line in lines if line["record"]["type"] == "rule_counts"]
    # the baseline has no rules: one counted test, the ACL's
    assert [line["variant"] for line in lines if line["record"]["type"] == "rule_counts"] == ["acl"]
    (rec,) = counts
    (forward,) = [c for c in rec["chains"] if c["hook"] == "forward"]
    assert len(forward["rules"]) == RULES + 2  # the ACL's rules and its two permits
    assert forward["entering"] > 100  # crr for a second: thousands of packets
    permits = forward["rules"][RULES:]
    assert all(r["verdict"] == "accept" and "5201" in r["text"] for r in permits)
    assert permits[0]["packets"] > 0 and permits[1]["packets"] > 0
    assert sum(r["packets"] for r in forward["rules"][:RULES]) == 0

    # the original rule set is back, exactly (handles and counter values aside)
    (before, after) = listings
    assert before[0] == "before" and after[0] == "after"
    assert without_values(after[1]) == without_values(before[1])
    assert rec["restored"] is True

    summary = json.loads((run.path / "summary.json").read_text())
    acl = next(r for r in summary["attribution"] if r["variant"] == "acl")
    (walk,) = [c for c in acl["rules"][0]["chains"] if c["hook"] == "forward"]
    assert walk["mean_walked"] >= 900
    hot = acl["rules"][0]["hot"]
    assert {h["index"] for h in hot[:2]} == {RULES, RULES + 1}
    metrics = [
        t.metric for t in build_tables(summary, json.loads((run.path / "run.json").read_text()))
    ]
    assert "hot_rules" in metrics and "rules_walked" in metrics and "profile" in metrics

    prof = acl["profile"]
    if not prof["profiled"]:
        pytest.skip(f"perf cannot sample here: {prof['why']}")
    grew = [g["function"] for g in prof["grew"]]
    assert "nft_do_chain" in grew, grew


@pytest.mark.parametrize("backend", ["iptables-nft", "iptables-legacy"])
def test_iptables_rules_are_counted(tmp_path: Path, backend: str) -> None:
    """iptables-nft rules are nft rules (counted on a copy, walked); legacy iptables
    rules are read with their own counters (no entering count: no walk)."""
    sc = scenario()
    acl = {"kind": "acl", "rules": 100, "layout": "linear", "backend": backend}
    sc = sc.model_copy(
        update={
            "variants": Scenario.model_validate(
                {
                    "name": "x",
                    "variants": {"acl": {"mechanisms": [acl]}},
                    "workloads": [{"kind": "crr"}],
                }
            ).variants
        }
    )
    run = Runner(Plan.of(sc), RunDir.create(tmp_path, "attr"), Console(quiet=True)).execute()
    summary = json.loads((run.path / "summary.json").read_text())
    (row,) = [r for r in summary["attribution"] if r["variant"] == "acl"]
    (part,) = row["rules"]
    assert part["source"] == ("nft" if backend == "iptables-nft" else "iptables-legacy")
    forward = [c for c in part["chains"] if c["chain"] == "FORWARD"]
    assert forward and forward[0]["rules"] >= 100
    # the permits the measured traffic needs are the hot rules
    assert part["hot"] and all(h["chain"] == "FORWARD" and h["packets"] > 0 for h in part["hot"])
    assert all("ACCEPT" in h["rule"] or "accept" in h["rule"] for h in part["hot"][:2])
    if backend == "iptables-nft":
        assert forward[0]["mean_walked"] >= 90
    else:
        assert forward[0]["mean_walked"] is None
