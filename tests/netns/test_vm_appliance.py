"""The DUT as a real VM (secperf.testbed.hosts.vm): traffic through the guest, its nftables
policy enforced, nothing passing while it is stopped, nothing left behind.

One testbed with one VM (TCG: this machine's KVM cannot boot a stock kernel) for the
module; the image comes from the cache after its first build."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.errors import TestbedError
from secperf.mechanisms.appliance import Appliance, ApplianceSpec
from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.testbed.hosts.netns import NetnsHost
from secperf.testbed.hosts.vm import NetnsOrVmHost
from secperf.testbed.hosts.vmconfig import VmSettings
from secperf.testbed.hosts.vmguest import VmHost
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.parts.probe import EchoServer, probe, start_echo

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        shutil.which("qemu-system-x86_64") is None,
        reason="needs qemu-system-x86 (scripts/setup.sh installs it)",
    ),
]

CLIENT = "198.18.1.2"
SERVER = "198.18.2.2"
DUT_OUTSIDE = "198.18.2.1"
PORT = 5399

Bed = tuple[Testbed, EchoServer, EchoServer]


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    state = tmp_path_factory.mktemp("state")
    tb = Testbed.build(
        Topology.standard(),
        state_dir=state,
        vm=VmSettings(accel="tcg"),
        vm_hosts=("dut",),
    )
    try:
        tb.select_backend("dut", "vm")
        server_echo = start_echo(tb.host("server"), "0.0.0.0", [PORT])
        client_echo = start_echo(tb.host("client"), "0.0.0.0", [PORT])
        yield tb, server_echo, client_echo
    finally:
        tb.teardown()


def _dut(tb: Testbed) -> NetnsOrVmHost:
    host = tb.host("dut")
    assert isinstance(host, NetnsOrVmHost)
    return host


def _vm(tb: Testbed) -> VmHost:
    """The DUT's VM, which is the DUT now."""
    dut = _dut(tb)
    assert dut.selected == "vm" and dut.current is dut.vm
    return dut.vm


def _namespace(tb: Testbed) -> NetnsHost:
    """The DUT's namespace, which holds the links' ends, the taps and qemu."""
    return _dut(tb).namespace


def _guest_rx(vm: VmHost) -> int:
    counters = vm.interface_counters()
    return sum(counters[nic].rx_packets for nic in vm.state.nics.values())


def test_traffic_crosses_the_guest(bed: Bed) -> None:
    tb = bed[0]
    vm = _vm(tb)
    assert vm.describe()["accel"] == "tcg"
    before = _guest_rx(vm)
    for proto in ("tcp", "udp"):
        # no NAT in the plain guest: the server sees the client itself
        assert probe(tb.host("client"), SERVER, PORT, proto) == CLIENT
    # the packets went through the guest's NICs, not the namespace's forwarding
    assert _guest_rx(vm) >= before + 4
    # the namespace has no address on its links now: it cannot be the one forwarding
    addrs = _namespace(tb).run(["ip", "-4", "-o", "addr", "show"]).stdout
    assert "198.18.1.1" not in addrs and "198.18.2.1" not in addrs


@pytest.fixture
def appliance(bed: Bed, tmp_path: Path) -> Iterator[tuple[Appliance, MechanismContext]]:
    tb = bed[0]
    appl = Appliance(ApplianceSpec())
    ctx = MechanismContext(
        plan=traffic_plan(tb.topology, 4),
        files_dir=tmp_path,
        name="vm-appl.0",
        table=f"secperf_{tb.prefix}",
    )
    ctx.rendered = appl.render(ctx)
    appl.apply(tb.host("dut"), ctx)
    try:
        yield appl, ctx
    finally:
        appl.release(tb.host("dut"), ctx)
        reset_dut(tb.host("dut"), appl.backends())


def test_the_guests_nftables_policy_is_enforced(
    bed: Bed, appliance: tuple[Appliance, MechanismContext]
) -> None:
    tb, _, client_echo = bed
    _, ctx = appliance
    # the rules are the guest's: the namespace has none
    assert _namespace(tb).run(["nft", "list", "ruleset"]).stdout.strip() == ""
    assert "masquerade" in tb.host("dut").run(["nft", "list", "ruleset"]).stdout
    # inside out passes, translated by the guest's PAT
    assert probe(tb.host("client"), SERVER, PORT, "tcp") == DUT_OUTSIDE
    # a denied flow stays denied, every time, and nothing arrives at the client
    before = len(client_echo.seen())
    for _ in range(3):
        for proto in ("tcp", "udp"):
            assert probe(tb.host("server"), CLIENT, PORT, proto, timeout=0.5) is None
    assert len(client_echo.seen()) == before
    # the daemon in the guest logged the allowed connection; its log came back
    appliance[0].release(tb.host("dut"), ctx)
    lines = [json.loads(x) for x in Appliance.log_path(ctx).read_text().splitlines()]
    assert [(x["src"], x["dst"], x["dport"]) for x in lines] == [(CLIENT, SERVER, PORT)]


def test_stopping_the_vm_stops_the_traffic(bed: Bed) -> None:
    tb, server_echo, _ = bed
    vm = _vm(tb)
    assert probe(tb.host("client"), SERVER, PORT, "tcp") == CLIENT
    # the DUT declares its power switch while it is the VM (failclosed's vm-stopped)
    power = tb.host("dut").power
    assert power is not None
    power.off()
    try:
        assert not vm.running
        before = len(server_echo.seen())
        for proto in ("tcp", "udp"):
            assert probe(tb.host("client"), SERVER, PORT, proto, timeout=0.5) is None
        assert len(server_echo.seen()) == before
    finally:
        power.on()
    assert vm.state.boots == 2
    assert probe(tb.host("client"), SERVER, PORT, "tcp") == CLIENT


def test_the_dut_is_one_host_whose_capabilities_follow_its_backend(bed: Bed) -> None:
    """One entry in the testbed's map: the namespace or the VM, as selected; what the
    host can do (power, its guest's /proc/stat) is the selected backend's."""
    tb = bed[0]
    dut = tb.host("dut")
    assert tb.switchable == {"dut": dut.switch} and dut.switch is not None
    assert tb.backend("dut") == "vm" and dut.name == f"{tb.prefix}-dut-vm"
    stat = dut.proc_stat()
    assert stat is not None and stat["idle"] > 0
    assert tb.netns("dut") == f"{tb.prefix}-dut"  # the links end in the namespace either way
    assert tb.select_backend("dut", "namespace") is True
    try:
        assert tb.backend("dut") == "namespace" and dut.name == f"{tb.prefix}-dut"
        assert dut.power is None and dut.proc_stat() is None
        # the namespace forwards again, with its own addresses
        assert probe(tb.host("client"), SERVER, PORT, "tcp") == CLIENT
        assert "198.18.1.1" in dut.run(["ip", "-4", "-o", "addr", "show"]).stdout
    finally:
        assert tb.select_backend("dut", "vm") is True
    assert tb.select_backend("dut", "vm") is False  # already the VM: nothing changes
    assert dut.power is not None
    assert probe(tb.host("client"), SERVER, PORT, "tcp") == CLIENT


def _qemu_pids(prefix: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if f"secperf-{prefix}-".encode() in cmdline and b"qemu" in cmdline:
            pids.append(int(proc.name))
    return pids


def _leftovers(prefix: str, state: Path) -> dict[str, Any]:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {
        "qemu": _qemu_pids(prefix),
        "netns": [n for n in netns.split() if n.startswith(prefix)],
        "links": [line for line in links.splitlines() if prefix in line],
        "files": sorted(p.name for p in state.iterdir()),
    }


def test_teardown_leaves_nothing(bed: Bed) -> None:
    tb = bed[0]
    state = tb.ledger.path.parent
    assert _qemu_pids(tb.prefix)  # it was there
    tb.teardown()
    assert _leftovers(tb.prefix, state) == {"qemu": [], "netns": [], "links": [], "files": []}


def test_a_boot_that_times_out_names_the_step_and_leaves_nothing(tmp_path: Path) -> None:
    state = tmp_path / "st"
    with pytest.raises(TestbedError, match=r"VM (boot|agent) \(tcg\) timed out"):
        Testbed.build(
            Topology.standard(),
            state_dir=state,
            prefix="spvmfail",
            vm=VmSettings(accel="tcg", boot_timeout=1.0),
            vm_hosts=("dut",),
        )
    assert _leftovers("spvmfail", state) == {"qemu": [], "netns": [], "links": [], "files": []}
