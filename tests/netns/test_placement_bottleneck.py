"""Placement, a CPU quota and the bottleneck of each row, with real namespaces and
real traffic: every process on one CPU; a daemon held to its share; a comparison
that a shaped link, or a generator held to a CPU quota, limits on both sides is
flagged as unable to show the mechanism's cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from tests.netns.rundirs import only_run

# CPU quotas, pinning and bottlenecks judged from measured rates
pytestmark = [pytest.mark.netns, pytest.mark.serial]


def _allowed(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list")).split()[-1]


def _exec_of(pid: int, name: str, timeout: float = 5.0) -> None:
    """Wait (polling, with a deadline) until `pid` runs `name` (past its cgroup join)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                return
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never ran {name}")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_one_cpu_for_every_process_of_the_testbed_and_the_others_for_secperf() -> None:
    mine = set(os.sched_getaffinity(0))
    last = max(mine)
    with Testbed.build(Topology.standard(), cpus="one") as tb:
        assert tb.placement.mode == "one" and tb.placement.testbed_cpus == [last]
        for host in ("client", "dut", "server"):
            proc = tb.host(host).spawn(["sleep", "30"], label="sleeper")
            _exec_of(proc.pid, "sleep")
            assert _allowed(proc.pid) == str(last), host
        # secperf (this process) and the commands it runs are on the other CPU(s)
        assert os.sched_getaffinity(0) == mine - {last}
        out = tb.host("dut").run(["sh", "-c", "grep Cpus_allowed_list /proc/self/status"])
        assert str(last) not in out.stdout.split()[-1].split(",")
    assert os.sched_getaffinity(0) == mine  # given back at teardown


def test_a_cpu_quota_holds_a_daemon_to_its_share() -> None:
    with Testbed.build(Topology.standard(), cpu_quota={"dut": 0.2}) as tb:
        group = tb.cgroups["dut"]
        assert group.quota == 0.2
        quota_dir = next(d for d in group.dirs if (d / "cpu.cfs_quota_us").exists())
        assert (quota_dir / "cpu.cfs_quota_us").read_text().strip() == "20000"
        # a daemon that would take a whole CPU: a busy loop in the DUT
        proc = tb.host("dut").spawn(["sh", "-c", "while :; do :; done"], label="spinner")
        start, t0 = group.usage_s(), time.monotonic()
        time.sleep(2.0)  # the measured interval itself, not a wait for a service
        used = (group.usage_s() - start) / (time.monotonic() - t0)
        proc.stop()
        # held to 20 % of a CPU (the CFS period is 100 ms: a few % of slack)
        assert 0.1 < used <= 0.25, used


def _run(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    env = {**os.environ, "SECPERF_RESULTS": str(tmp_path / "results")}
    proc = subprocess.run(
        [sys.executable, "-m", "secperf", "run", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = only_run(tmp_path / "results")
    return {
        "summary": json.loads((run / "summary.json").read_text()),
        "meta": json.loads((run / "run.json").read_text()),
        "report": proc.stdout,
    }


COMPARISON = """
name = "{name}"
[testbed]
{testbed}
[repeat]
min = 2
max = 2
trace_softirq = false
attribution = false
[timing]
duration = "1.5s"
warmup = "0.5s"
[variants.acl]
mechanisms = [{{ kind = "acl", rules = 10, layout = "set" }}]
[[workloads]]
kind = "stream"
protocol = "tcp"
"""


def _primary(summary: dict[str, Any], variant: str) -> dict[str, Any]:
    return next(r for r in summary["rows"] if r["primary"] and r["variant"] == variant)


def test_a_link_bound_comparison_is_flagged(tmp_path: Path) -> None:
    out = _run(tmp_path, COMPARISON.format(name="linkbound", testbed='link_rate = "20mbit"'))
    base, acl = _primary(out["summary"], "baseline"), _primary(out["summary"], "acl")
    for row in (base, acl):
        assert row["bottleneck"]["kind"] == "link", row["bottleneck"]
        assert "20 Mbit/s" in row["bottleneck"]["text"]
    assert "unshape the link" in acl["comparison"]
    # the shaper's counters say why: a direction at its rate, read around each test
    assert "‼" in out["report"] and "limited by" in out["report"]


def test_a_generator_bound_comparison_is_flagged(tmp_path: Path) -> None:
    # the client held to a quarter of a CPU: it, not the DUT, sets the rate
    testbed = 'cpus = "shared"\ncpu_quota = { client = 0.25 }'
    out = _run(tmp_path, COMPARISON.format(name="genbound", testbed=testbed))
    assert out["meta"]["testbed"]["cgroups"]["quota"] == {"client": 0.25}
    base, acl = _primary(out["summary"], "baseline"), _primary(out["summary"], "acl")
    for row in (base, acl):
        assert row["bottleneck"]["kind"] == "generator", row["bottleneck"]
        assert "its quota 25 %" in row["bottleneck"]["text"]
    assert "add generators" in acl["comparison"]


OPEN_LOOP = """
name = "openloop"
[repeat]
min = 2
max = 2
trace_softirq = {trace}
attribution = false
[timing]
duration = "1s"
warmup = "0.3s"
[variants.acl-linear]
mechanisms = [{{ kind = "acl", rules = 1000, layout = "linear", match = "last" }}]
[[workloads]]
kind = "rr"
load = 0.5
"""


def test_open_loop_rr_runs_at_half_the_baselines_measured_maximum(tmp_path: Path) -> None:
    out = _run(tmp_path, OPEN_LOOP.format(trace="false"))
    offered = out["meta"]["offered"]["tcp-rr#0"]
    # the closed-loop maximum measured first, on the baseline; half of it offered
    assert len(offered["closed_loop"]) == 2 and offered["load"] == 0.5
    assert offered["rate"] == pytest.approx(offered["closed_loop_mean"] / 2)
    base, acl = _primary(out["summary"], "baseline"), _primary(out["summary"], "acl-linear")
    assert base["point"]["rate"] == pytest.approx(offered["rate"])
    assert base["point"]["inflight"] == 64  # open loop: up to 64 outstanding
    # the baseline keeps the schedule: limited by the offered rate, nothing saturated
    assert base["mean"] == pytest.approx(offered["rate"], rel=0.05)
    assert base["bottleneck"]["kind"] == "offered"
    assert acl["mean"] > 0


@pytest.mark.skipif(
    subprocess.run(["which", "bpftrace"], capture_output=True).returncode != 0,
    reason="needs bpftrace",
)
def test_the_traced_round_times_the_rules_softirq_cost(tmp_path: Path) -> None:
    text = OPEN_LOOP.format(trace="true").replace("load = 0.5\n", "")
    out = _run(tmp_path, text)
    assert out["meta"]["softirq"] == {"traced": True, "source": "bpftrace"}
    rows = {r["variant"]: r for r in out["summary"]["softirq"]}
    base, acl = rows["baseline"], rows["acl-linear"]
    # 1000 linear rules walked in NET_RX for every forwarded packet: far more kernel
    # time per transaction than plain forwarding, and the variant's own cost says so
    assert base["per_unit_us"]["net_rx"] > 0
    assert acl["per_unit_us"]["net_rx"] > 2 * base["per_unit_us"]["net_rx"]
    assert acl["own_us"] > 0
    # the traced round's rates are in no figure: each measured row has 2 rounds
    assert all(r["n"] == 2 for r in out["summary"]["rows"] if r["primary"])
