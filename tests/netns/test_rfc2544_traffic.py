"""RFC 2544 on a link of known capacity: the DUT's egress to the server is a tbf at
20 Mbit/s, so it forwards at most 20e6 / (508 · 8) = 4,921 frames/s of 512-byte
frames (tbf counts the 508 bytes the kernel sends; the frame's FCS is not sent),
while the line rate is 100 Mbit/s (23,496 frames/s). The throughput search must
find that capacity, and the frame loss steps the loss above it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import secperf.workloads.rfc2544.logic as rfc2544
from secperf.engine import CONTROL_PORT, Record
from secperf.scenario.sweep import one_point
from secperf.testbed.ledger import ledgers
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.rfc2544.executor import Rfc2544Executor
from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns

FRAME = 512
TBF_BPS = 20_000_000
CAPACITY_FPS = TBF_BPS / (rfc2544.sent_bytes(FRAME) * 8)  # 4,921
LINE_BPS = 100_000_000
# The search's resolution (2 %), the tbf's 20 ms queue (it absorbs ~2 % more over a
# 1 s trial) and a shared machine's stalls (a stalled sender catches up in a burst
# the queue may not hold: a trial below capacity can lose frames): within this.
TOLERANCE = 0.08


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    state: Path = tmp_path_factory.mktemp("state")
    with Testbed.build(Topology.standard(), state_dir=state) as tb:
        dev = tb.ifname("dut-server", "dut")
        tb.host("dut").run(
            [
                "tc",
                "qdisc",
                "replace",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                f"{TBF_BPS}bit",
                "burst",
                "2000",
                "latency",
                "20ms",
            ]
        )
        yield tb


def measure(tb: Testbed, **params: object) -> Record:
    ctx = MeasureContext.on(tb, f"198.18.2.2:{CONTROL_PORT}")
    point = one_point(
        {"kind": "rfc2544", "frame": FRAME, "line_rate": LINE_BPS, "settle": 0.3, **params}
    )
    return Rfc2544Executor().measure(ctx, point)


@pytest.mark.serial
def test_throughput_finds_the_links_capacity(bed: Testbed) -> None:
    rec = measure(
        bed,
        tests=["throughput"],
        duration=1.0,
        resolution_pct=2.0,
        max_trials=14,
        search="bisect",
    )
    thr = rec["throughput"]
    steps = thr["search"]["steps"]
    assert rec["line_rate_fps"] == pytest.approx(23_496, abs=1)
    assert thr["outcome"] == "found", steps
    assert abs(thr["fps"] / CAPACITY_FPS - 1) <= TOLERANCE, (thr["fps"], CAPACITY_FPS, steps)
    # the evidence: frames sent and counted at the receiver, per trial
    first = steps[0]
    assert first["asked"] == pytest.approx(23_496, abs=1) and not first["passed"]
    assert first["sent"] > 0 and first["received"] < first["sent"]
    assert all(s["lost"] == 0 for s in steps if s["passed"])
    assert bed.host("server").run(["nft", "list", "tables"]).stdout.strip() == ""


@pytest.mark.serial
def test_mlrsearch_finds_the_links_capacity_with_trials_that_grow(bed: Testbed) -> None:
    rec = measure(bed, tests=["throughput"], duration=1.0, resolution_pct=2.0, pdr_loss_pct=[5.0])
    thr = rec["throughput"]
    search = thr["search"]
    trials = search["trials"]
    assert (thr["method"], thr["outcome"]) == ("mlrsearch", "found"), trials
    assert abs(thr["fps"] / CAPACITY_FPS - 1) <= TOLERANCE, (thr["fps"], CAPACITY_FPS, trials)
    ndr, pdr = search["goals"]
    assert ndr["relevant_lower_bound"] == thr["fps"] < ndr["relevant_upper_bound"]
    assert pdr["relevant_lower_bound"] >= ndr["relevant_lower_bound"]
    assert ndr["conditional_throughput"] == pytest.approx(thr["fps"], rel=0.01)
    # the first trial is short, at the line rate, and lost frames; the last ones full
    first = trials[0]
    assert first["load"] == pytest.approx(23_496, abs=1) and first["duration"] == 0.25
    assert first["lost"] > 0 and first["loss_ratio"] > 0
    assert [t["duration"] for t in trials] == sorted(t["duration"] for t in trials)
    assert trials[-1]["duration"] == 1.0
    # every trial's frames were counted at the receiver
    assert all(t["sent"] > 0 and t["received"] <= t["sent"] for t in trials)


@pytest.mark.serial
def test_loss_rate_above_the_links_capacity(bed: Testbed) -> None:
    dev = bed.ifname("client-dut", "dut")
    rps = f"/sys/class/net/{dev}/queues/rx-0/rps_cpus"
    before = bed.host("dut").run(["cat", rps]).stdout.strip()
    # the DUT's receive processing on CPU 1 (RPS) for the measurement, then as it was
    rec = measure(bed, tests=["loss"], duration=0.5, loss_every_step=True, dut_cpus="1")
    assert rec["steering"] == {"dut_cpus": "1", "rps_mask": "2"}
    assert bed.host("dut").run(["cat", rps]).stdout.strip() == before
    steps = {s["load_pct"]: s for s in rec["loss"]["steps"]}
    assert sorted(steps) == list(range(10, 101, 10))
    for pct in (100, 50, 30):
        offered = 23_496 * pct / 100
        expected = 100 * (1 - CAPACITY_FPS / offered)
        got = steps[pct]["loss_pct"]
        assert got == pytest.approx(expected, abs=4), (pct, got, expected)
    # below the capacity (10 % of line rate = 2,350 frames/s) nothing is lost
    assert steps[10]["lost"] == 0 and steps[10]["sent"] > 1000


SCENARIO = """
name = "rfc2544-tiny"
[testbed]
link_rate = "100mbit"
[repeat]
min = 2
max = 2
[variants.drop]
mechanisms = [{ kind = "custom", file = "drop.nft", format = "nft" }]
[[workloads]]
kind = "rfc2544"
frame = 1518
tests = ["throughput", "back_to_back"]
duration = "0.3s"
settle = "0.2s"
burst_max = "0.2s"
"""

# the test frames (UDP to 5201) never cross this DUT
DROP = """table inet drop2544 {
  chain forward {
    type filter hook forward priority filter; policy accept;
    udp dport 5201 drop
  }
}
"""


@pytest.mark.serial
def test_a_run_reports_bounds_in_words_and_leaves_nothing(tmp_path: Path, state_dir: Path) -> None:
    (tmp_path / "drop.nft").write_text(DROP)
    scenario = tmp_path / "rfc2544-tiny.toml"
    scenario.write_text(SCENARIO)
    proc = subprocess.run(
        [sys.executable, "-m", "secperf", "run", str(scenario), "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    run_dir = only_run(tmp_path / "r")
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = {
        (r["variant"], r["metric"]): r
        for r in summary["rows"]
        if r["metric"] in ("rfc2544_throughput_fps", "rfc2544_back_to_back_frames")
    }
    # plain forwarding passes 100 Mbit/s of 1518-byte frames (8,127/s): a bound,
    # no number; the DUT that drops every test frame: below the lowest rate tried
    base = rows[("baseline", "rfc2544_throughput_fps")]
    assert base["mean"] is None and base["search"]["at_least_n"] == 2
    drop = rows[("drop", "rfc2544_throughput_fps")]
    assert drop["mean"] is None and drop["search"]["below_n"] == 2
    assert rows[("drop", "rfc2544_back_to_back_frames")]["search"]["below_n"] == 2
    # the answer says what the searches found, the bounds in words, not a number
    # a verdict may wrap within its column, beside the limit column's words
    answer = " ".join(proc.stdout.replace("limited by search bound ‼", "").split())
    # a bound against a bound: the variant's "below", the baseline's "at least"
    assert "not found down to" in answer
    assert "which was at least 8,1" in answer
    # and the tables, behind --details, the same
    details = subprocess.run(
        [sys.executable, "-m", "secperf", "report", str(run_dir), "--details"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert details.returncode == 0, details.stderr + details.stdout
    assert "RFC 2544 26.1 Throughput" in details.stdout
    assert "at least 8,1" in details.stdout and "not found down to" in details.stdout
    assert "RFC 2544 26.4 Back-to-back" in details.stdout and "loss already at" in details.stdout
    html = (run_dir / "report.html").read_text()
    assert "RFC 2544 throughput against frame size" in html
    meta = json.loads((run_dir / "run.json").read_text())
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert meta["prefix"] not in out.stdout
    assert ledgers(state_dir) == []
