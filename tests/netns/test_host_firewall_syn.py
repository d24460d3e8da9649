"""Document 002 Fig. 3b's setting: the firewall on the target host itself (an ACL on
the server's input hook), SYN floods allowed or denied by it. The target answers every
allowed SYN to its closed flood port with a RST and none of the denied ones, and the
flood record counts both (`delivered.target_answers`): the paper's explanation of why
allowed floods cost the target more."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.engine import CONTROL_PORT
from secperf.mechanisms.acl import Acl, AclSpec
from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.scenario.sweep import one_point
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.registry import WORKLOADS

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def bed() -> Iterator[Testbed]:
    with Testbed.build(Topology.standard(attacker=True)) as tb:
        yield tb


def syn_flood(tb: Testbed, target: str) -> dict[str, Any]:
    p: dict[str, object] = {"flood": "syn", "rate": 3_000, "duration": 0.5, "flood_target": target}
    point = one_point({"kind": "flood", **p})
    ctx = MeasureContext.on(tb, f"198.18.2.2:{CONTROL_PORT}")
    return dict(WORKLOADS.get("flood").executor.measure(ctx, point))["delivered"]


def test_host_firewall_answers_allowed_syns_and_not_denied_ones(
    bed: Testbed, tmp_path: Path
) -> None:
    server = bed.host("server")
    acl = Acl(AclSpec(rules=4))
    mctx = MechanismContext(
        plan=traffic_plan(bed.topology, 4),
        files_dir=tmp_path,
        name="host-acl.0",
        table=f"secperf_{bed.prefix}",
        hosts=("server",),
        hook="input",
        topology=bed.topology,
    )
    mctx.rendered = acl.render(mctx)
    assert "hook input" in mctx.rendered[0].path.read_text()
    acl.apply(server, mctx)
    try:
        allowed = syn_flood(bed, "allowed")
        denied = syn_flood(bed, "denied")
    finally:
        reset_dut(server, {"nft"})
    # Both floods reach the target host (its counter is in prerouting, before the filter).
    assert allowed["sent"] > 1_400 and allowed["reached"] >= 0.98 * allowed["sent"], allowed
    assert denied["sent"] > 1_400 and denied["reached"] >= 0.98 * denied["sent"], denied
    # Allowed SYNs to a closed port: one RST each; denied ones: nothing at all.
    assert allowed["target_answers"]["rst"] >= 0.98 * allowed["reached"], allowed
    assert allowed["target_answers"]["synack"] == 0, allowed
    assert denied["target_answers"] == {"synack": 0, "rst": 0}, denied
