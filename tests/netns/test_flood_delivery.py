"""What a flood delivered, counted where it landed, and whether it covered the measured
window: a shaped DUT->server link lets through a fraction of what the sender sent and
the record says so; an ACL drops a denied flood whole; a flood that ends before the
measured window does fails the point instead of giving a lower figure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.engine import CONTROL_PORT, EngineServer
from secperf.errors import EngineError
from secperf.mechanisms.acl import Acl, AclSpec
from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.results.metrics import extract, metric
from secperf.scenario.sweep import WorkloadPoint, one_point
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.parts import flood as flood_mod
from secperf.workloads.registry import WORKLOADS
from tests.netns.beds import engine_bed

pytestmark = pytest.mark.netns

TARGET = f"198.18.2.2:{CONTROL_PORT}"


def context(tb: Testbed, kept: list[dict[str, Any]]) -> MeasureContext:
    return MeasureContext.on(tb, TARGET, keep=kept.append)


def flood_alone(tb: Testbed, kept: list[dict[str, Any]], **params: object) -> dict[str, Any]:
    p: dict[str, object] = {"flood": "udp", "rate": 10_000, "duration": 1.0, **params}
    point = one_point({"kind": "flood", **p})
    return dict(WORKLOADS.get("flood").executor.measure(context(tb, kept), point))


@pytest.fixture(scope="module")
def shaped() -> Iterator[Testbed]:
    """1 Mbit/s links: a 10 kpps flood of small UDP packets (~4.6 Mbit/s of IP) cannot
    all cross the DUT->server link; the sender sends it all the same."""
    topo = Topology.standard(attacker=True, link_rate_bps=1_000_000)
    with Testbed.build(topo) as tb:
        yield tb


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, EngineServer]]:
    with engine_bed(tmp_path_factory, Topology.standard(attacker=True)) as pair:
        yield pair


@pytest.mark.serial
def test_flood_record_says_what_reached_the_target_not_only_what_was_sent(
    shaped: Testbed,
) -> None:
    kept: list[dict[str, Any]] = []
    rec = flood_alone(shaped, kept)
    d = rec["delivered"]
    sent = int(rec["packets"])
    assert d["sent"] == sent > 9_000, rec
    # the sender's own figure is ~the asked rate ...
    assert float(rec["rate_pps"]) > 9_000
    # ... but the 1 Mbit/s link let through only a fraction, and the record says so
    assert 0 < d["reached"] < 0.5 * sent, d
    assert float(d["received_pps"]) < 0.5 * float(d["sent_pps"]), d
    assert d["dut_dropped"] == sent - d["reached"]
    assert float(d["dut_drop_pct"]) > 50.0, d
    # the attacker link is unshaped at the DUT's input: the loss is inside the DUT
    # (its shaped output queue), and the parts add up
    assert d["not_taken_in"] + d["dropped_inside"] == d["dut_dropped"], d
    assert d["dropped_inside"] > 0.4 * sent, d
    # the kept result (what the summary reads) carries it, and the primary metric is
    # the delivered rate
    kept_result = next(k for k in kept if k.get("type") == "result")
    assert kept_result["delivered"] == d
    values = extract(kept_result)
    assert metric("flood_received_pps").primary and not metric("flood_pps").primary
    assert values["flood_received_pps"] == pytest.approx(d["received_pps"])
    assert values["flood_pps"] > 2 * values["flood_received_pps"]
    assert values["flood_dut_drop_pct"] > 50.0


def test_denied_flood_is_sent_whole_and_reaches_nothing(
    bed: tuple[Testbed, EngineServer], tmp_path: Path
) -> None:
    tb, _ = bed
    plan = traffic_plan(tb.topology, 4)
    acl = Acl(AclSpec(rules=4))
    mctx = MechanismContext(plan=plan, files_dir=tmp_path, name="v.0", table=f"secperf_{tb.prefix}")
    mctx.rendered = acl.render(mctx)
    acl.apply(tb.host("dut"), mctx)
    try:
        allowed = flood_alone(tb, [], rate=5_000, flood_target="allowed")["delivered"]
        denied = flood_alone(tb, [], rate=5_000, flood_target="denied")["delivered"]
    finally:
        reset_dut(tb.host("dut"), {"nft"})
    assert allowed["reached"] >= 0.98 * allowed["sent"] > 4_500, allowed
    assert denied["sent"] > 4_500 and denied["reached"] == 0, denied
    assert denied["dut_drop_pct"] == 100.0
    # the DUT took every denied packet in and dropped it by rule
    assert denied["dropped_inside"] >= 0.98 * denied["sent"], denied


def stream_point(**extra: object) -> WorkloadPoint:
    params: dict[str, object] = {
        "kind": "stream",
        "name": "s",
        "protocol": "tcp",
        "message": 16384,
        "duration": 1.0,
        "warmup": 0.3,
        "flood": "udp",
        "flood_rate": 5_000,
        "flood_target": "allowed",
        **extra,
    }
    return one_point(params)


@pytest.mark.serial
def test_flood_beside_a_stream_covers_its_window_and_says_what_reached(
    bed: tuple[Testbed, EngineServer],
) -> None:
    tb, _ = bed
    reset_dut(tb.host("dut"), {"nft"})
    kept: list[dict[str, Any]] = []
    rec = WORKLOADS.get("stream").executor.measure(context(tb, kept), stream_point())
    results = [k for k in kept if k.get("type") == "result"]
    assert len(results) == 1 and results[0]["kind"] == "stream"
    summary = results[0]["flood"]
    assert summary == rec["flood"]
    assert summary["asked_pps"] == 5_000 and summary["reached"] > 0.95 * summary["packets"]
    assert summary["received_pps"] > 0.95 * 5_000
    side = [k["record"] for k in kept if k.get("role") == "flood"]
    fres = next(r for r in side if r.get("type") == "result")
    cov = fres["coverage"]
    assert cov["covered"] is True and cov["lead_s"] >= 0 and cov["tail_s"] >= 0, cov
    # stopped once the stream was done (SIGINT), not left to run its full margin
    assert fres["stopped_by"] == "signal" and cov["tail_s"] < 5.0, fres
    assert extract(results[0])["flood_beside_received_pps"] == summary["received_pps"]


def test_a_flood_that_ends_inside_the_measured_window_fails_the_point(
    bed: tuple[Testbed, EngineServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flood lasts warm-up + duration + margin; with the margin at -1 s it stops
    ~1 s before the stream's window ends. Old code returned a (higher, unflooded in
    part) figure; now the point fails and no result is kept for the summary."""
    tb, _ = bed
    reset_dut(tb.host("dut"), {"nft"})
    monkeypatch.setattr(flood_mod, "FLOOD_MARGIN_S", -1.0)
    kept: list[dict[str, Any]] = []
    with pytest.raises(EngineError, match="did not cover"):
        WORKLOADS.get("stream").executor.measure(context(tb, kept), stream_point(duration=1.5))
    assert not [k for k in kept if k.get("type") == "result"], "no figure for the summary"
    uncovered = [k for k in kept if k.get("role") == "uncovered"]
    assert len(uncovered) == 1 and uncovered[0]["record"]["kind"] == "stream"
    fres = next(
        k["record"] for k in kept if k.get("role") == "flood" and k["record"]["type"] == "result"
    )
    assert fres["coverage"]["covered"] is False and fres["coverage"]["tail_s"] < -0.5
