"""Latency probes through a real dut: plausible one-way delays both ways, and an ACL
that denies the probes (or one excluded host) lets nothing of them through."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.engine import CONTROL_PORT, EngineServer, EngineTest, run_test
from secperf.mechanisms.acl import Acl, AclSpec
from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from tests.netns.beds import engine_bed

pytestmark = pytest.mark.netns

SERVER = "198.18.2.2"
CONTROL = CONTROL_PORT


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, EngineServer]]:
    with engine_bed(tmp_path_factory, Topology.standard(emulated_hosts=4)) as pair:
        yield pair


def spec(tb: Testbed, **extra: Any) -> dict[str, Any]:
    topo = tb.topology
    return {
        "kind": "latency",
        "server": f"{SERVER}:{CONTROL}",
        "rate_pps": 2000,
        "duration": 1.0,
        "warmup": 0.3,
        "interval": 0,
        "sources": list(topo.emulated_addresses("client"))[:3],
        "destinations": list(topo.emulated_addresses("server"))[:3],
        **extra,
    }


def load_acl(tb: Testbed, acl: Acl, tmp_path: Path) -> None:
    plan = traffic_plan(tb.topology, 4)
    ctx = MechanismContext(plan=plan, files_dir=tmp_path, name="v.0", table=f"secperf_{tb.prefix}")
    ctx.rendered = acl.render(ctx)
    acl.apply(tb.host("dut"), ctx)


@pytest.mark.serial
def test_delay_through_the_dut_both_ways(bed: tuple[Testbed, EngineServer]) -> None:
    tb, _ = bed
    r = run_test(tb.host("client"), spec(tb)).result
    for d in ("c2s", "s2c"):
        x = r[d]
        assert x["sent"] > 1000, d
        assert x["lost"] == 0 and x["received"] == x["sent"], d
        # Software stamps through a forwarding namespace: tens of µs, never 0 or seconds.
        assert 1.0 < x["delay_us"]["mean"] < 5000.0, (d, x["delay_us"])
        assert x["delay_us"]["count"] >= x["received"] - 2, d
    assert r["latency_us"]["count"] == r["combined"]["delay_us"]["count"]


def test_an_acl_that_denies_the_probes_lets_none_through(
    bed: tuple[Testbed, EngineServer], tmp_path: Path
) -> None:
    tb, _ = bed
    acl = Acl(AclSpec(rules=1, entries="standard", exclude_one=True))
    plan = traffic_plan(tb.topology, 4)
    denied = plan.excluded_host
    assert denied is not None
    try:
        load_acl(tb, acl, tmp_path)
        r = run_test(tb.host("client"), spec(tb, sources=[denied])).result
        assert r["c2s"]["sent"] > 1000
        assert r["c2s"]["received"] == 0
        # The server never heard the client, so it had nobody to send to.
        assert r["s2c"]["sent"] == 0
    finally:
        reset_dut(tb.host("dut"), acl.backends())


def test_rejected_stream_beside_a_passed_one(
    bed: tuple[Testbed, EngineServer], tmp_path: Path
) -> None:
    tb, _ = bed
    acl = Acl(AclSpec(rules=1, entries="standard", exclude_one=True))
    denied = traffic_plan(tb.topology, 4).excluded_host
    try:
        load_acl(tb, acl, tmp_path)
        rejected = EngineTest(tb.host("client"), spec(tb, sources=[denied]))
        passed = run_test(tb.host("client"), spec(tb)).result
        rej = rejected.collect().result
        assert rej["c2s"]["sent"] > 1000 and rej["c2s"]["received"] == 0
        assert passed["c2s"]["lost"] == 0 and passed["s2c"]["lost"] == 0
        assert passed["combined"]["delay_us"]["count"] > 2000
    finally:
        reset_dut(tb.host("dut"), acl.backends())
