"""A rule-set review end to end: the router's own rules, its own traffic, real namespaces.

`check` probes each flow of the coverage traffic through both rule sets and names the
rule that drops one; `secperf review` lists the behaviour change first and fails the gate
for a proposed set that makes every packet walk 1,000 rules before its hot accept.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from secperf.review import review_scenario
from secperf.run.check_traffic import check_traffic
from secperf.scenario.loader import load_scenario
from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns

DATA = Path(__file__).parent.parent / "data" / "rulesets"
HOT = "\t\tct state established,related accept\n"


def slow_router(tmp_path: Path) -> Path:
    """The proposed router (DNS no longer forwarded) with its forward chain's hot accept
    moved after 1,000 rules that match no packet of the traffic: a cost far past the
    gate's 5 % even on a noisy machine."""
    text = (DATA / "router-proposed.nft").read_text()
    head, sep, tail = text.partition("policy drop;\n" + HOT)
    assert sep, "the router's forward chain starts with its ct state accept"
    filler = "".join(f"\t\tmeta mark 0x{0x100 + i:x} drop\n" for i in range(1000))
    path = tmp_path / "router-slow.nft"
    path.write_text(head + "policy drop;\n" + filler + HOT + tail)
    return path


def scenario_file(tmp_path: Path, proposed: Path) -> Path:
    data = review_scenario(DATA / "router.nft", proposed, rounds=3)
    path = tmp_path / "review.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def test_check_names_the_rule_that_drops_a_flow(tmp_path: Path) -> None:
    sc = load_scenario(scenario_file(tmp_path, DATA / "router-proposed.nft"))
    found = check_traffic(sc)
    assert found is not None
    # the current rule set lets every flow meant through pass and denies every probe
    assert found.dropped["current"] == []
    meant, denied = found.probes["current"]
    assert meant >= 4 and denied == meant
    # the proposed one drops forwarded DNS, by its forward policy, and says so
    drops = found.dropped["proposed"]
    assert len(drops) == 1, drops
    assert "udp" in drops[0] and ":53" in drops[0]
    assert "the policy of inet filter forward" in drops[0]
    assert "router.nft:37" in drops[0]


@pytest.mark.serial
def test_review_lists_the_change_first_and_gates_the_slower_set(tmp_path: Path) -> None:
    out = tmp_path / "results"
    junit = tmp_path / "gate.xml"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "secperf",
            "review",
            str(DATA / "router.nft"),
            str(slow_router(tmp_path)),
            "--rounds",
            "5",
            "--out",
            str(out),
            "--expect",
            "proposed vs current flows flow_rate degradation < 5%",
            "--junit",
            str(junit),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 5, text  # the gate failed, nothing else did
    assert "1 flow(s) decided differently" in text
    assert text.index("decided differently") < text.index("The review — proposed against current")
    assert 'failures="1"' in junit.read_text()
    run_dir = only_run(out)
    summary = json.loads((run_dir / "summary.json").read_text())
    b = summary["behaviour"]
    [change] = b["changes"]
    assert change["variants"]["current"]["verdict"] == "accept"
    assert change["variants"]["proposed"]["verdict"] == "deny"
    # the coverage traffic reaches every accepting rule of the current set it has a flow for
    cover = b["coverage"]["current"]
    assert cover["accepting_rules"] >= 6 and cover["hit"] == cover["accepting_rules"], b
    assert "current" not in b["misses"], b["misses"]
    # no probe for a denying rule got through in either variant
    for variant in ("current", "proposed"):
        for f in b["flows"]:
            if f["expect"] == "deny":
                assert f["variants"][variant]["verdict"] == "deny", f
    html = (run_dir / "report.html").read_text()
    assert html.index('id="behaviour"') < html.index('id="answer"')
    assert "1 flow(s) decided differently" in html
    # the map is kept, and the slower set walks its 1,000 rules
    meta = json.loads((run_dir / "run.json").read_text())
    assert any("10.1.0.0/16 ->" in line for line in meta["rule_set_map"]["lines"])
    walks = {
        (row["variant"], c["chain"]): c["mean_walked"]
        for row in summary.get("attribution") or []
        for host in row.get("rules") or []
        for c in host.get("chains") or []
        if c.get("mean_walked") is not None
    }
    slow = [w for (v, chain), w in walks.items() if v == "proposed" and "forward" in chain]
    assert slow and max(slow) > 900, walks
