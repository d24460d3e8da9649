"""Hosts behind one map (no root needed: a Testbed's hosts are made, not opened):
one factory per backend, every host asked for its names and abilities, capabilities
declared on the protocol and never probed, and the testbed's modules free of import
cycles and of imports hidden in functions."""

from __future__ import annotations

import inspect
import re
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import secperf.testbed.hosts.ssh as ssh_backend
from secperf.errors import TestbedError
from secperf.testbed import Ledger, Topology
from secperf.testbed.hosts import BuildContext, Host, ManagedProcess
from secperf.testbed.hosts.external import ExternalHost
from secperf.testbed.hosts.netns import NetnsHost
from secperf.testbed.hosts.protocol import Backend, InterfaceCounters, Redirect
from secperf.testbed.hosts.ssh import SshHost
from secperf.testbed.hosts.ssh_transport import SshSpec
from secperf.testbed.hosts.vm import NetnsOrVmHost
from secperf.testbed.testbed import FACTORIES, Testbed, plan_backends

REPO = Path(__file__).resolve().parents[2]
PREFIX = "sptest"


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    led = Ledger.open(PREFIX, tmp_path)
    yield led
    led.delete()


def made(topology: Topology, ledger: Ledger, **plan: Any) -> Testbed:
    """A Testbed whose hosts are made by their factories but not opened."""
    bed = BuildContext(topology=topology, prefix=PREFIX, ledger=ledger)
    return Testbed(bed, plan_backends(topology, **plan))


def test_a_namespace_testbed_is_one_map_of_hosts_that_name_themselves(ledger: Ledger) -> None:
    topo = Topology.standard()
    tb = made(topo, ledger, vm_hosts=("dut",))
    assert list(tb.hosts) == list(topo.names)
    assert isinstance(tb.host("client"), NetnsHost) and isinstance(tb.host("server"), NetnsHost)
    dut = tb.host("dut")
    assert isinstance(dut, NetnsOrVmHost) and dut.selected == "namespace"
    assert not tb.lab
    # names come from the host, whatever its backend
    assert tb.netns("client") == f"{PREFIX}-client" and tb.netns("dut") == f"{PREFIX}-dut"
    assert tb.ifname("client-dut", "client") == f"{PREFIX}-cd"
    assert tb.ifname("client-dut", "dut") == f"{PREFIX}-dc"
    # the one host that can switch is a view of the same map
    assert tb.switchable == {"dut": dut.switch} and tb.backend("dut") == "namespace"
    assert tb.backend("client") == "namespace"
    with pytest.raises(TestbedError, match="no VM"):
        tb.select_backend("client", "vm")
    assert tb.select_backend("client", "namespace") is False
    with pytest.raises(KeyError, match="no host 'nope'"):
        tb.host("nope")


def test_capabilities_are_declared_by_every_backend(ledger: Ledger) -> None:
    tb = made(Topology.standard(), ledger)
    client = tb.host("client")
    assert isinstance(client, Host)
    assert client.runs_commands and client.ledger is ledger and client.role == "client"
    assert client.power is None and client.switch is None and client.proc_stat() is None
    device = ExternalHost("dut", {"client": "eth1"})
    assert isinstance(device, Host)
    assert not device.runs_commands and device.ledger is None and device.power is None
    assert device.switch is None and device.proc_stat() is None and device.cpu_seconds() is None
    with pytest.raises(TestbedError, match="external device"):
        device.run(["true"])


def test_a_lab_is_ssh_and_external_hosts_and_real_switches(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ssh_backend, "engine_path", lambda: "/nonexistent/secperf-engine")
    monkeypatch.setattr(ssh_backend, "remote_engine_file", lambda: "/nonexistent/static")
    topo = Topology.zoned({"inside": (2, 0), "outside": (0, 1)})
    ends = [n for n in topo.names if not topo.host(n).is_switch and n != "dut"]
    switches = [n for n in topo.names if topo.host(n).is_switch]
    assert ends and switches
    first, second = ends[0], ends[1]
    toward = topo.links_of(first)[0].peer(first)
    remotes = {
        n: SshSpec(
            name=n,
            host=f"198.18.250.{i + 1}",
            interfaces={toward: "eth1"} if n == first else {},
        )
        for i, n in enumerate(ends)
    }
    peer = topo.links_of("dut")[0].peer("dut")
    tb = made(topo, ledger, remotes=remotes, external={"dut": {peer: "ge-0/0/1"}})
    assert tb.lab
    for n in ends:
        host = tb.host(n)
        assert isinstance(host, SshHost) and host.ledger is None and host.power is None
        assert tb.netns(n) == f"ssh://root@{remotes[n].host}:22"
    for n in switches:
        assert isinstance(tb.host(n), ExternalHost)
    dut = tb.host("dut")
    assert isinstance(dut, ExternalHost) and tb.netns("dut") == "external"
    link = topo.links_of("dut")[0]
    assert tb.ifname(link.name, "dut") == "ge-0/0/1"
    assert tb.ifname(topo.links_of(first)[0].name, first) == "eth1"
    # an SSH host without an interface toward a peer says which line to add
    with pytest.raises(TestbedError, match="no interface toward"):
        tb.ifname(topo.links_of(second)[0].name, second)


def test_a_vm_goes_only_to_a_namespace_host_of_the_testbed() -> None:
    with pytest.raises(TestbedError, match="no such host"):
        plan_backends(Topology.standard(), vm_hosts=("nope",))
    with pytest.raises(TestbedError, match="no such backend"):
        plan_backends(Topology.standard(), backends={"dut": ("zeppelin", None)})


class Bench:
    """A made-up backend: a host that records its life cycle (what the Testbed calls)."""

    calls: list[str] = []  # noqa: RUF012 - shared by every host of the test

    def __init__(self, name: str) -> None:
        self.name = self.role = name

    @classmethod
    def build(cls, name: str, bed: BuildContext, settings: object) -> Bench:
        return cls(name)

    def open(self) -> None:
        self.calls.append(f"open {self.name}")

    def start(self) -> None:
        self.calls.append(f"start {self.name}")

    def close(self) -> list[str]:
        self.calls.append(f"close {self.name}")
        return [f"bench {self.name}"]

    location = "bench"
    local_links = False
    cpu_groups: list[dict[str, Any]] = []  # noqa: RUF012
    runs_commands = True
    shares_files = True
    ledger = None
    power = None
    switch = None

    def ifname(self, peer: str) -> str:
        return f"to-{peer}"

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float = 30,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(list(argv), 0, "ran", "")

    def spawn(
        self,
        argv: Sequence[str],
        *,
        stdout: Redirect = None,
        stderr: Redirect = None,
        label: str = "",
        pass_fds: Sequence[int] = (),
    ) -> ManagedProcess:
        raise NotImplementedError

    def interface_counters(self) -> dict[str, InterfaceCounters]:
        return {}

    def cpu_seconds(self) -> float | None:
        return None

    def proc_stat(self) -> dict[str, int] | None:
        return None

    def memory_bytes(self) -> int:
        return 0

    def stop_started(self) -> list[str]:
        return []

    def track_file(self, path: str) -> None:
        pass

    def track_setting(self, path: str, value: str) -> None:
        pass


def test_a_new_backend_is_one_factory_entry(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(FACTORIES, "bench", Bench.build)
    topo = Topology.standard()
    Bench.calls = []
    bed = BuildContext(topology=topo, prefix=PREFIX, ledger=ledger)
    tb = Testbed(bed, plan_backends(topo, backends={n: ("bench", None) for n in topo.names}))
    assert isinstance(Bench("x"), Host)
    tb._build()
    assert tb.host("dut").run(["anything"]).stdout == "ran"
    assert tb.ifname("client-dut", "client") == "to-dut" and tb.netns("server") == "bench"
    removed = tb.teardown()
    assert sorted(c for c in Bench.calls if c.startswith("open")) == [
        f"open {n}" for n in sorted(topo.names)
    ]
    opens = [i for i, c in enumerate(Bench.calls) if c.startswith("open")]
    starts = [i for i, c in enumerate(Bench.calls) if c.startswith("start")]
    assert len(starts) == len(opens) and max(opens) < min(starts)  # every host opens first
    assert sorted(removed) == sorted(f"bench {n}" for n in topo.names)
    assert not ledger.path.exists()  # nothing left in it: teardown removed the ledger


def test_a_namespace_is_never_wired_to_a_real_host(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(FACTORIES, "bench", Bench.build)
    topo = Topology.standard()
    bed = BuildContext(topology=topo, prefix=PREFIX, ledger=ledger)
    with pytest.raises(TestbedError, match="cannot be wired to a real host"):
        Testbed(bed, plan_backends(topo, backends={"dut": ("bench", None)}))


# -- the shape of the code ------------------------------------------------------------------

# What a host may or may not be able to do, and the names the Testbed asks it for.
CAPABILITIES = {
    "power",
    "switch",
    "ledger",
    "runs_commands",
    "proc_stat",
    "cpu_seconds",
    "role",
    "location",
    "local_links",
}


def test_host_capabilities_are_declared_never_probed() -> None:
    members = {
        name
        for cls in (Host, Backend)
        for name, _ in inspect.getmembers(cls)
        if not name.startswith("_")
    }
    assert members >= CAPABILITIES
    probe = re.compile(r"""\b(?:getattr|hasattr)\([^,()]+,\s*["'](\w+)["']""")
    found = [
        f"{path.relative_to(REPO)}: {m.group(0)}"
        for path in (REPO / "secperf").rglob("*.py")
        for m in probe.finditer(path.read_text())
        if m.group(1) in CAPABILITIES
    ]
    assert found == []
