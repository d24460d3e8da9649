"""Detection under load (kind attack_mix) with real datagrams through a real DUT: the
sender's, the server's and the IPS/IDS's own counts agree on what was detected,
blocked, missed and leaked, for no IPS, the IPS inline (nfq and fwsnort) and the IDS
on a mirror."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.mechanisms.base import Mechanism, MechanismContext, reset_dut, traffic_plan
from secperf.mechanisms.ids import Ids, IdsSpec
from secperf.mechanisms.ips import Ips, IpsSpec
from secperf.scenario.sweep import WorkloadPoint, one_point
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.attack_mix import AttackMixExecutor
from secperf.workloads.base import MeasureContext

pytestmark = pytest.mark.netns

RULES = Path(__file__).resolve().parents[2] / "rules" / "secperf-attacks.rules"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with Testbed.build(Topology.standard(ids=True), state_dir=tmp_path_factory.mktemp("s")) as tb:
        yield tb


def _point() -> WorkloadPoint:
    params: dict[str, object] = {
        "kind": "attack_mix",
        "rate": 2000,
        "attack_share": 0.05,
        "size": 256,
        "duration": 1.0,
        "rules": str(RULES),
    }
    return one_point(params)


def _measure(bed: Testbed, tmp_path: Path, variant: str) -> dict[str, Any]:
    mctx = MechanismContext(
        plan=traffic_plan(bed.topology, 4),
        files_dir=tmp_path,
        name=f"{variant}.0",
        table=f"secperf_{bed.prefix}",
        topology=bed.topology,
    )
    mech: Mechanism | Ids | None = None
    hosts = [bed.host("dut")]
    if variant.startswith("ips-"):
        mech = Ips(IpsSpec(engine=variant.removeprefix("ips-"), rules=RULES))
    elif variant == "ids":
        mech = Ids(IdsSpec(rules=RULES))
        mctx.hosts = ("dut", "ids")
        hosts = [bed.host("dut"), bed.host("ids")]
    mechanisms: list[Any] = []
    if mech is not None:
        mctx.rendered = mech.render(mctx)
        if isinstance(mech, Ids):
            mech.apply_group(hosts, mctx)
        else:
            mech.apply(hosts[0], mctx)
        mechanisms = [(mech, mctx)]
    ctx = MeasureContext.on(bed, "198.18.2.2:5201", variant=variant, mechanisms=mechanisms)
    try:
        return AttackMixExecutor().measure(ctx, _point())
    finally:
        if isinstance(mech, Ids):
            mech.release_group(hosts, mctx)
        elif mech is not None:
            mech.release(hosts[0], mctx)
        reset_dut(bed.host("dut"), {"nft", "iptables-nft"})


@pytest.mark.parametrize("variant", ["baseline", "ips-nfq", "ips-fwsnort", "ids"])
def test_attack_mix_counts_agree(bed: Testbed, tmp_path: Path, variant: str) -> None:
    r = _measure(bed, tmp_path, variant)
    sent, drop_sent = r["attacks_sent"], r["drop_attacks_sent"]
    # 5 % of 2000 datagrams: 100 attacks, a third of them of the one UDP drop rule.
    assert 90 <= sent <= 110 and 0 < drop_sent < sent, r
    assert {a["sid"] for a in r["attacks"]} == {9000002, 9000301, 9000302}, r
    assert r["clean_delivered_pct"] >= 99.0, r
    if variant == "baseline":
        assert r["detector"] is None and r["detected"] is None and r["blocked"] is None, r
        assert r["attacks_arrived"] == sent and r["leaked"] == drop_sent, r
        assert r["missed"] == sent, r
    elif variant.startswith("ips"):
        assert r["detector"] == variant, r
        assert r["detected"] == sent and r["missed"] == 0, r
        assert r["blocked"] == drop_sent and r["leaked"] == 0 and r["policy_held"], r
        assert r["attacks_arrived"] == sent - drop_sent, r
        assert r["false_alerts"] == 0, r
    else:
        assert r["detector"] == "ids", r
        assert r["detector_counts"]["sensor_drops"] == 0, r
        assert r["detected"] == sent and r["blocked"] == 0, r
        assert r["attacks_arrived"] == sent and r["leaked"] == drop_sent, r


def test_appliance_with_the_ids_option_alerts_on_what_it_lets_through(
    bed: Testbed, tmp_path: Path
) -> None:
    """Document 000's appliance with its IDS (seed000's appliance-ids variant): the
    appliance's filter, PAT and logging daemon, and the mirror's sensor beside."""
    from secperf.mechanisms.appliance import Appliance, ApplianceSpec

    dut, sensor = bed.host("dut"), bed.host("ids")
    appl, ids = Appliance(ApplianceSpec(queue=0, nat=True)), Ids(IdsSpec(rules=RULES))
    actx, ictx = (
        MechanismContext(
            plan=traffic_plan(bed.topology, 4),
            files_dir=tmp_path,
            name=f"appliance-ids.{i}",
            table=f"secperf_{bed.prefix}",
            topology=bed.topology,
        )
        for i in range(2)
    )
    ictx.hosts = ("dut", "ids")
    actx.rendered = appl.render(actx)
    ictx.rendered = ids.render(ictx)
    appl.apply(dut, actx)
    ids.apply_group([dut, sensor], ictx)
    mechanisms: list[Any] = [(appl, actx), (ids, ictx)]
    ctx = MeasureContext.on(bed, "198.18.2.2:5201", variant="appliance-ids", mechanisms=mechanisms)
    try:
        r = AttackMixExecutor().measure(ctx, _point())
    finally:
        ids.release_group([dut, sensor], ictx)
        appl.release(dut, actx)
        reset_dut(dut, {"nft", "iptables-nft"})
    assert r["detector"] == "ids", r
    assert r["attacks_sent"] >= 90 and r["detected"] == r["attacks_sent"], r
    assert r["attacks_arrived"] == r["attacks_sent"] and r["clean_delivered_pct"] >= 99.0, r
    # The appliance's daemon logged the flows (one-way UDP: every datagram is NEW).
    assert Appliance.log_path(actx).read_text().count("\n") >= 1


def _tcp_point(order: str) -> WorkloadPoint:
    params: dict[str, object] = {
        "kind": "attack_mix",
        "protocol": "tcp",
        "segments": 2,
        "order": order,
        "rate": 400,
        "attack_share": 0.1,
        "size": 256,
        "duration": 1.0,
        "rules": str(RULES),
    }
    return one_point(params)


def _measure_ips(bed: Testbed, tmp_path: Path, spec: IpsSpec | None, order: str) -> dict[str, Any]:
    mctx = MechanismContext(
        plan=traffic_plan(bed.topology, 4),
        files_dir=tmp_path,
        name="ips.0",
        table=f"secperf_{bed.prefix}",
        topology=bed.topology,
    )
    dut = bed.host("dut")
    mechanisms: list[Any] = []
    ips = Ips(spec) if spec is not None else None
    if ips is not None:
        mctx.rendered = ips.render(mctx)
        ips.apply(dut, mctx)
        mechanisms = [(ips, mctx)]
    ctx = MeasureContext.on(bed, "198.18.2.2:5201", variant="ips-nfq", mechanisms=mechanisms)
    try:
        return AttackMixExecutor().measure(ctx, _tcp_point(order))
    finally:
        if ips is not None:
            ips.release(dut, mctx)
        reset_dut(dut, {"nft", "iptables-nft"})


# Every TCP content rule of the shipped file: the test strings, HTTP (80) and FTP (21).
TCP_SIDS = {9000001, 9000003, *range(9000101, 9000108), 9000201, 9000202, 9000203}


@pytest.mark.parametrize(
    ("case", "order"),
    [
        ("no-ips", "reverse"),
        ("per-packet", "reverse"),
        ("reassembly", "in-order"),
        ("reassembly", "reverse"),
        ("in-order-only", "reverse"),
    ],
)
def test_split_tcp_attacks_caught_with_reassembly_missed_without(
    bed: Testbed, tmp_path: Path, case: str, order: str
) -> None:
    """Each attack in two TCP segments cut inside its string, over a connection of its
    own. Matched packet by packet (or with reassembly that cannot hold the early piece:
    `reassembly_pending = 0`), the reversed pieces pass and every drop-rule attack
    reaches the server; with reassembly (held early segments), every attack is
    detected and no drop-rule attack reaches the application: the piece that fills
    the gap is dropped, so its TCP never delivers the rest."""
    spec = {
        "no-ips": None,
        "per-packet": IpsSpec(engine="nfq", rules=RULES),
        "reassembly": IpsSpec(engine="nfq", rules=RULES, reassembly=True),
        "in-order-only": IpsSpec(engine="nfq", rules=RULES, reassembly=True, reassembly_pending=0),
    }[case]
    r = _measure_ips(bed, tmp_path, spec, order)
    sent, drop_sent = r["attacks_sent"], r["drop_attacks_sent"]
    assert {a["sid"] for a in r["attacks"]} == TCP_SIDS, r
    assert 36 <= sent <= 44 and 0 < drop_sent < sent, r
    assert r["clean_delivered_pct"] == 100.0, r
    assert r["attack_pieces_sent"] == 2 * sent, r
    outcomes = r["attack_outcomes"]
    assert outcomes["no_handshake"] == 0 and outcomes["no_port"] == 0, r
    if case in ("no-ips", "per-packet", "in-order-only"):
        # Every attack reached the application whole: nothing stopped a piece.
        assert r["attacks_arrived"] == sent and outcomes["delivered"] == sent, r
        assert r["leaked"] == drop_sent, r
        if case != "no-ips":
            assert r["detected"] == 0 and r["missed"] == sent, r
            assert r["policy_held"] is False, r
    else:
        assert r["detected"] == sent and r["missed"] == 0 and r["false_alerts"] == 0, r
        assert r["leaked"] == 0 and r["policy_held"], r
        assert r["blocked"] == drop_sent and outcomes["cut"] == drop_sent, r
        assert r["attacks_arrived"] == sent - drop_sent, r
        reasm = r["detector_counts"]["reassembly"]
        if order == "reverse":
            # each attack's second piece came first and was held until the first came
            assert reasm["out_of_order"] >= sent and reasm["joined"] >= sent, reasm
            assert reasm["gaps"] == 0, reasm
