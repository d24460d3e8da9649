"""CPU per host for real: every host has its cgroup, what secperf starts runs in it,
the engine reads each host's CPU over exactly the measured window, pinning holds,
and teardown removes the groups."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.engine import CONTROL_PORT, DATA_PORTS, EngineServer, run_test, start_server
from secperf.errors import TestbedError
from secperf.testbed import Testbed, Topology
from secperf.testbed.cgroups import CGROUP_ENV, detect

pytestmark = pytest.mark.netns

TARGET = f"198.18.2.2:{CONTROL_PORT}"


@pytest.fixture(params=["v1", "v2"])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both cgroup layouts where this machine has both (a hybrid); else the one it has."""
    try:
        detect(prefer=request.param)
    except TestbedError as exc:
        pytest.skip(f"no cgroup {request.param} here: {exc}")
    monkeypatch.setenv(CGROUP_ENV, request.param)
    return str(request.param)


@pytest.fixture
def bed(layout: str) -> Iterator[tuple[Testbed, EngineServer]]:
    with Testbed.build(Topology.standard()) as tb:
        server = start_server(tb.host("server"), f"0.0.0.0:{CONTROL_PORT}", data_ports=DATA_PORTS)
        try:
            yield tb, server
        finally:
            server.stop()


def _wait_exec(pid: int, comm: str) -> None:
    """Until the spawned pid runs `comm` (the join wrapper has exec'd it)."""
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}/comm").read_text().strip() != comm:
        assert time.monotonic() < deadline, f"{pid} never became {comm}"
        time.sleep(0.005)


def _cgroup_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cgroup").read_text()


def test_each_host_has_a_group_and_spawned_processes_join_it(
    bed: tuple[Testbed, EngineServer], layout: str
) -> None:
    tb, server = bed
    for role in tb.topology.roles:
        group = tb.cgroups[role]
        assert group.counter.is_file()
        assert group.dirs[0].name == f"{tb.prefix}-{role}"
    # the engine server was spawned in the server host: its pid is in the server's group
    procs = (tb.cgroups["server"].dirs[0] / "cgroup.procs").read_text().split()
    assert str(server.process.pid) in procs
    assert f"{tb.prefix}-server" in _cgroup_of(server.process.pid)
    # and the pid is the program's own (the join wrapper exec'd it)
    assert Path(f"/proc/{server.process.pid}/comm").read_text().strip() == "secperf-engine"


@pytest.mark.serial
def test_engine_reads_every_host_over_the_measured_window(
    bed: tuple[Testbed, EngineServer],
) -> None:
    tb, _ = bed
    spec = {"kind": "rr", "server": TARGET, "duration": 1.0, "warmup": 0.3, "interval": 0}
    rec = run_test(tb.host("client"), spec).result
    hosts = rec["host_cpu"]
    assert set(hosts) == set(tb.topology.roles)
    # both engine processes worked; the client's group holds only the engine client,
    # so its cgroup figure matches the process's own CPU over the window
    assert hosts["client"] > 0.05 and hosts["server"] > 0.05
    own = rec["cpu"]["client"]["user_s"] + rec["cpu"]["client"]["system_s"]
    assert abs(hosts["client"] - own) <= max(0.05, 0.25 * own), (hosts, own)
    # the CPU readings are the measured window's own edges (before, the machine was
    # read after Finish, the drain and a quiet wait)
    machine = rec["machine_cpu"]
    assert abs(machine["window_s"] - rec["duration_s"]) < 0.02, machine
    # and the machine's ticks cover about that window (less only where vCPUs lose time)
    assert machine["total_s"] / machine["cpus"] < rec["duration_s"] + 0.05, machine
    assert machine["softirq_s"] >= 0 and machine["irq_s"] >= 0


@pytest.mark.serial
def test_stream_counts_bytes_inside_the_cpu_window(bed: tuple[Testbed, EngineServer]) -> None:
    tb, _ = bed
    spec = {"kind": "stream", "server": TARGET, "duration": 1.0, "warmup": 0.3, "interval": 0}
    rec = run_test(tb.host("client"), spec).result
    assert 0 < rec["window_bytes"] <= rec["bytes"]
    assert rec["window_bytes"] > 0.9 * rec["bytes"]


def test_pinned_hosts_run_on_their_cpus(layout: str) -> None:
    pin = {"client": "0", "server": "0", "dut": "1"}
    try:
        tb = Testbed.build(Topology.standard(), pin=pin)
    except TestbedError as exc:
        if "cannot pin" in str(exc):
            pytest.skip(str(exc))
        raise
    with tb:
        proc = tb.host("client").spawn(["sleep", "30"], label="sleeper")
        _wait_exec(proc.pid, "sleep")
        status = Path(f"/proc/{proc.pid}/status").read_text()
        allowed = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list"))
        assert allowed.split()[-1] == "0"
        proc.stop()


def test_a_bad_pin_is_refused_before_anything_is_built(state_dir: Path) -> None:
    with pytest.raises(TestbedError, match="pin"):
        Testbed.build(Topology.standard(), pin={"router": "0"})
    with pytest.raises(TestbedError, match="not available"):
        Testbed.build(Topology.standard(), pin={"client": "99"})
    assert not list(state_dir.glob("*.jsonl"))


def test_teardown_removes_the_groups(layout: str) -> None:
    with Testbed.build(Topology.standard()) as tb:
        dirs = [d for g in tb.cgroups.values() for d in g.dirs]
        proc = tb.host("dut").spawn(["sleep", "30"], label="sleeper")
        assert all(d.is_dir() for d in dirs)
    assert proc.returncode is not None
    assert not any(d.exists() for d in dirs)


def test_clean_removes_the_groups_of_a_killed_run(state_dir: Path) -> None:
    """A run killed with SIGKILL leaves its groups; `clean` removes them by its ledger."""
    script = (
        "import sys, time\n"
        "from secperf.testbed import Testbed, Topology\n"
        "tb = Testbed.build(Topology.standard())\n"
        "print(' '.join(str(d) for g in tb.cgroups.values() for d in g.dirs), flush=True)\n"
        "time.sleep(60)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [str(repo / ".venv/bin/python"), "-c", script],
        cwd=repo,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    dirs = [Path(p) for p in child.stdout.readline().split()]
    child.kill()
    child.wait()
    assert dirs and all(d.is_dir() for d in dirs)
    from secperf.testbed import clean

    clean(state_dir)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(d.exists() for d in dirs):
        time.sleep(0.02)
    assert not any(d.exists() for d in dirs)
