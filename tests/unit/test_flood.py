"""Flood workloads without root: schema, ACL flood permits, hosts (the search's
arithmetic: test_search.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from secperf.mechanisms.acl import AclSpec, render_iptables, render_nft
from secperf.mechanisms.base import TrafficPlan
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import expand_scenario
from secperf.workloads.registry import WORKLOADS

PLAN = TrafficPlan(
    family=4,
    client_net="198.18.1.2/32",
    server_net="198.18.2.2/32",
    client_addr="198.18.1.2",
    server_addr="198.18.2.2",
    attacker_net="198.18.4.2/32",
)


def scenario(*workloads: dict[str, Any]) -> Scenario:
    return Scenario.model_validate(
        {"name": "t", "variants": {"a": {}}, "workloads": list(workloads)}
    )


def test_flood_rate_sweep_and_attacker_only_when_flooding() -> None:
    sc = scenario(
        {"kind": "stream", "flood": "udp", "flood_rate": [0, 1000, 20000]},
        {"kind": "rr"},
    )
    points = expand_scenario(sc)
    assert [p.record().get("flood_rate") for p in points] == [0, 1000, 20000, None]
    hosts = [WORKLOADS.get(p.kind).hosts(p.spec) for p in points]
    assert [("attacker" in h) for h in hosts] == [False, True, True, False]


@pytest.mark.parametrize(
    "workload",
    [
        {"kind": "stream", "flood": "udp", "flood_rate": 500},  # below the engine's minimum
        {"kind": "stream", "flood_rate": 1000},  # a rate with no flood kind
        {"kind": "stream", "flood": "icmp", "flood_rate": 1000, "flood_target": "denied"},
        {"kind": "min_flood_rate", "lo": 5000, "hi": 5000},
        {"kind": "flood", "rate": 0},
        {"kind": "flood", "sources": "10.0.0.0/24"},
    ],
)
def test_bad_flood_keys_are_refused(workload: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        scenario(workload)


def test_acl_permits_the_allowed_flood_port_only() -> None:
    nft = render_nft(AclSpec(rules=4), [], PLAN, "t")
    assert (
        "ip saddr 198.18.4.2/32 ip daddr 198.18.2.2/32 meta l4proto { tcp, udp } th dport 9 accept"
        in nft
    )
    assert "dport 19" not in nft
    ipt = render_iptables(AclSpec(rules=4), [], PLAN, "t")
    assert "-s 198.18.4.2/32 -d 198.18.2.2/32 -p udp --dport 9 -j ACCEPT" in ipt
    # no attacker, or the option off: no flood permit at all
    assert "198.18.4.2" not in render_nft(
        AclSpec(rules=4), [], replace(PLAN, attacker_net=None), "t"
    )
    assert "198.18.4.2" not in render_nft(AclSpec(rules=4, flood_permit=False), [], PLAN, "t")
