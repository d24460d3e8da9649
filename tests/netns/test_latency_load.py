"""Latency under load (sender = "packet"): the packet sender offers the asked frame rate
both ways over 100 emulated hosts a side with timestamped probes inside it, and an IDS
on a mirror (nft dup to the ids host) leaves the forwarded path's delay within noise,
while an inline IPS on the same path does not (the comparison can fail)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from secperf.engine import CONTROL_PORT, EngineServer, run_test
from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.mechanisms.ids import Ids, IdsSpec
from secperf.mechanisms.ips import Ips, IpsSpec
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from tests.netns.beds import engine_bed

pytestmark = pytest.mark.netns

RULES = Path(__file__).resolve().parents[2] / "rules" / "secperf-attacks.rules"
SERVER = "198.18.2.2"
CONTROL = CONTROL_PORT
# A modest rate a shared two-core machine can offer (bench/latency_load_vs_trafgen.py
# and seed004 ask for the paper's 148,810). At load average ~20, 20,000 once came out
# 5.8 % short (slots forfeited while the sender was descheduled): 10,000, and a
# second attempt if the first one was starved.
RATE = 10_000.0
ATTEMPTS = 2
# The mirror test's rate: low enough that the inline IPS (the control) still
# passes nearly everything, so its delays exist.
MIRROR_RATE = 5_000.0
# Tolerance on the shift of the median delay: the paper's own promiscuous-mode
# difference (26 -> 28 us) plus twice the spread seen between repeats of one setup.
TOLERANCE_FLOOR_US = 2.0


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, EngineServer]]:
    topo = Topology.standard(emulated_hosts=100, offloads="off", ids=True)
    with engine_bed(tmp_path_factory, topo) as pair:
        yield pair


def spec(tb: Testbed, rate: float, **extra: Any) -> dict[str, Any]:
    topo = tb.topology
    return {
        "kind": "latency",
        "server": f"{SERVER}:{CONTROL}",
        "rate_pps": rate,
        "duration": 1.5,
        "warmup": 0.3,
        "interval": 0,
        "sources": list(topo.emulated_addresses("client")),
        "destinations": list(topo.emulated_addresses("server")),
        "probe_every": 50,
        **extra,
    }


@pytest.mark.serial
def test_the_load_is_offered_at_the_asked_rate_both_ways(
    bed: tuple[Testbed, EngineServer],
) -> None:
    tb, _ = bed
    tries = []
    for _ in range(ATTEMPTS):
        r = run_test(tb.host("client"), spec(tb, RATE)).result
        tries.append([r[d]["load"]["achieved_pps"] for d in ("c2s", "s2c")])
        if all(abs(a - RATE) / RATE < 0.02 for a in tries[-1]):
            break
        # Short only by slots forfeited while starved, never hidden.
        assert r["combined"]["load"]["forfeited"] > 0, (tries, r["combined"]["load"])
    for d in ("c2s", "s2c"):
        load = r[d]["load"]
        assert load["sender"] == "packet" and "AF_PACKET" in load["note"], load
        # Within 2 % of the asked rate, and nothing lost on a DUT without rules.
        assert abs(load["achieved_pps"] - RATE) / RATE < 0.02, (d, tries, load)
        assert load["sent"] > 0.98 * RATE * 1.5, (d, load)
        # Counted where they arrive by the kernel's socket filter, every one of them.
        assert load["counted_by"] == "kernel (socket filter)", load
        assert load["lost"] == 0 and load["received"] == load["sent"], (d, load)
        # The sender's own ceiling, measured before the load, is far above the ask.
        assert load["ceiling_pps"] > 2 * RATE, load
        assert "unpaced" in load["ceiling_note"], load
        # One frame in 50 is a probe; every probe sent was stamped and measured.
        assert load["probes_sent"] == pytest.approx(load["sent"] / 50, rel=0.02), load
        assert load["tx_stamps_missing"] == 0, load
        assert r[d]["delay_us"]["count"] >= r[d]["received"] - 2, r[d]
        assert 0.1 < r[d]["delay_us"]["p50"] < 5000.0, r[d]["delay_us"]
    combined = r["combined"]["load"]
    assert combined["achieved_pps"] == pytest.approx(2 * RATE, rel=0.02)
    assert combined["ceiling_pps"] == pytest.approx(
        r["c2s"]["load"]["ceiling_pps"] + r["s2c"]["load"]["ceiling_pps"]
    )


def _median_delay(tb: Testbed) -> float:
    r = run_test(tb.host("client"), spec(tb, MIRROR_RATE)).result
    c = r["combined"]
    assert c["load"]["received"] > 0.9 * c["load"]["sent"], c["load"]
    return float(c["delay_us"]["p50"])


def _ctx(tb: Testbed, tmp_path: Path, name: str, hosts: tuple[str, ...]) -> MechanismContext:
    ctx = MechanismContext(
        plan=traffic_plan(tb.topology, 4),
        files_dir=tmp_path,
        name=name,
        table=f"secperf_{tb.prefix}",
        topology=tb.topology,
    )
    ctx.hosts = hosts
    return ctx


def _with_mirror(tb: Testbed, tmp_path: Path, i: int) -> float:
    dut, sensor = tb.host("dut"), tb.host("ids")
    ids = Ids(IdsSpec(rules=RULES))
    ctx = _ctx(tb, tmp_path, f"ids.{i}", ("dut", "ids"))
    ctx.rendered = ids.render(ctx)
    ids.apply_group([dut, sensor], ctx)
    try:
        return _median_delay(tb)
    finally:
        ids.release_group([dut, sensor], ctx)
        reset_dut(dut, ids.backends())


def _with_inline_ips(tb: Testbed, tmp_path: Path) -> float:
    dut = tb.host("dut")
    ips = Ips(IpsSpec(engine="nfq", rules=RULES))
    ctx = _ctx(tb, tmp_path, "nfq.0", ("dut",))
    ctx.rendered = ips.render(ctx)
    ips.apply(dut, ctx)
    try:
        return _median_delay(tb)
    finally:
        ips.release(dut, ctx)
        reset_dut(dut, ips.backends())


@pytest.mark.serial
def test_an_ids_on_a_mirror_leaves_the_forwarded_delay_within_noise(
    bed: tuple[Testbed, EngineServer], tmp_path: Path
) -> None:
    tb, _ = bed
    # Interleaved A B A B, so drift on the shared machine falls on both.
    base, mirror = [], []
    for i in range(2):
        base.append(_median_delay(tb))
        mirror.append(_with_mirror(tb, tmp_path, i))
    noise = max(abs(base[0] - base[1]), abs(mirror[0] - mirror[1]))
    tolerance = TOLERANCE_FLOOR_US + 2 * noise
    shift = median(mirror) - median(base)
    assert abs(shift) <= tolerance, (base, mirror, tolerance)
    # The same comparison sees an inline IPS: user space on the forwarding path.
    inline = _with_inline_ips(tb, tmp_path)
    assert inline - median(base) > tolerance, (base, inline, tolerance)
