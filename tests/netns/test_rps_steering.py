"""Receive packet steering (`rps`) with real namespaces and real packets: the target's
received packets are processed on the CPU named, not on the CPU that sent them, and
release writes the queues' masks back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from secperf.errors import MechanismError
from secperf.mechanisms.base import MechanismContext, traffic_plan
from secperf.mechanisms.rps import Rps, RpsSpec
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology

pytestmark = [
    pytest.mark.netns,
    pytest.mark.serial,  # counts NET_RX softirqs per CPU, machine-wide (/proc/softirqs)
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs"),
]

SERVER = "198.18.2.2"
PINGS = 2000


def net_rx(cpu: int) -> int:
    """NET_RX softirqs run on `cpu` since boot (/proc/softirqs)."""
    for line in Path("/proc/softirqs").read_text().splitlines():
        if line.strip().startswith("NET_RX:"):
            return int(line.split()[1 + cpu])
    raise AssertionError("no NET_RX line in /proc/softirqs")


def masks(tb: Testbed) -> set[int]:
    """The server's receive queues' RPS masks (its interfaces but loopback)."""
    out = tb.host("server").run(
        [
            "sh",
            "-c",
            "for d in /sys/class/net/*; do [ ${d##*/} = lo ] || cat $d/queues/rx-*/rps_cpus; done",
        ],
        check=True,
    )
    return {int(m.replace(",", ""), 16) for m in out.stdout.split()}


def pings_net_rx_on(tb: Testbed, there: int, sender: int) -> int:
    """NET_RX softirqs on CPU `there` while the client, pinned to `sender`, pings the
    server (a flood ping bounded by count: one echo in flight at a time)."""
    before = net_rx(there)
    tb.host("client").run(
        ["taskset", "-c", str(sender), "ping", "-q", "-f", "-c", str(PINGS), SERVER],
        check=True,
        timeout=60,
    )
    return net_rx(there) - before


def test_rps_moves_the_targets_receive_to_the_named_cpu(tmp_path: Path) -> None:
    there, sender = sorted(os.sched_getaffinity(0))[:2]
    with Testbed.build(Topology.standard(), state_dir=tmp_path / "state") as tb:
        assert masks(tb) == {0}  # a new namespace steers nothing
        unsteered = pings_net_rx_on(tb, there, sender)
        rps = Rps(RpsSpec(on="server", cpus=str(there)))
        ctx = MechanismContext(
            plan=traffic_plan(tb.topology, 4), files_dir=tmp_path, name="v.0", table="t"
        )
        rps.apply(tb.host("server"), ctx)
        assert masks(tb) == {1 << there}
        steered = pings_net_rx_on(tb, there, sender)
        rps.release(tb.host("server"), ctx)
        assert masks(tb) == {0}
    # Steered, every echo request reaches the server through CPU `there`'s backlog (a
    # NET_RX there each, the reply's too); unsteered, the pinned sender's CPU ran them.
    assert steered >= PINGS // 2, (steered, unsteered)
    assert unsteered < steered // 4, (steered, unsteered)


def test_rps_refuses_a_cpu_the_machine_does_not_have(tmp_path: Path) -> None:
    with Testbed.build(Topology.standard(), state_dir=tmp_path / "state") as tb:
        rps = Rps(RpsSpec(on="server", cpus="4095"))
        ctx = MechanismContext(
            plan=traffic_plan(tb.topology, 4), files_dir=tmp_path, name="v.0", table="t"
        )
        with pytest.raises(MechanismError, match="does not have online"):
            rps.apply(tb.host("server"), ctx)
        assert masks(tb) == {0}
