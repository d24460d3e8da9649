"""The `vm` host backend: a namespace host that can also be a qemu virtual machine.

`NetnsOrVmHost.build` is the factory: the host is its namespace (hosts/netns.py)
until the Testbed selects "vm" for a variant (its `switch`), then the VM
(hosts/vmguest.py, `VmHost`), and back; every Host member goes to the one selected.
The namespace stays where the links end in either case (its interface names and
location are the host's). The VM boots once the links are up (`start`), and stays
up while the namespace is selected.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed.hosts.netns import NetnsHost
from secperf.testbed.hosts.protocol import (
    BackendKind,
    BuildContext,
    InterfaceCounters,
    ManagedProcess,
    Power,
    Redirect,
    Switch,
)
from secperf.testbed.hosts.vmconfig import VmSettings
from secperf.testbed.hosts.vmguest import VmHost
from secperf.testbed.ledger import Ledger

SELECTABLE = ("namespace", "vm")


class NetnsOrVmHost:
    """A host that is its namespace or its VM, one at a time (the `Backend` protocol,
    with a `Switch`): the Testbed's one entry for a host built with a VM. The
    namespace is opened like any other; the VM boots once the links are up, and
    the namespace is the host until `select("vm")`."""

    def __init__(self, role: str, bed: BuildContext, settings: VmSettings) -> None:
        self.role = role
        self.namespace = NetnsHost(role, bed)
        self.settings = settings
        self._bed = bed
        self._vm: VmHost | None = None
        self._on_vm = False

    @classmethod
    def build(cls, name: str, bed: BuildContext, settings: VmSettings | None) -> NetnsOrVmHost:
        """The factory: settings are the scenario's [testbed.vm]."""
        return cls(name, bed, settings or VmSettings())

    # -- life cycle (the Backend protocol) ---------------------------------------------

    def open(self) -> None:
        self.namespace.open()

    def start(self) -> None:
        """Build the VM on the namespace's links: image, taps and bridges, boot."""
        bed, ns = self._bed, self.namespace
        veths = {lk.name: ns.ifname(lk.peer(self.role)) for lk in bed.topology.links_of(self.role)}
        self._vm = VmHost.create(
            self.role,
            ns,
            bed.topology,
            bed.prefix,
            bed.ledger,
            self.settings,
            bed.state_dir,
            veths,
        )

    def close(self) -> list[str]:
        return self.namespace.close()  # qemu and the relays are the namespace's processes

    @property
    def location(self) -> str:
        return self.namespace.location

    @property
    def local_links(self) -> bool:
        return True

    def ifname(self, peer: str) -> str:
        return self.namespace.ifname(peer)

    # -- the switch ------------------------------------------------------------------------

    @property
    def vm(self) -> VmHost:
        if self._vm is None:
            raise TestbedError(
                f"the VM of host {self.role} is not built yet", fix="this is a bug: report it"
            )
        return self._vm

    @property
    def backends(self) -> tuple[str, ...]:
        return SELECTABLE

    @property
    def selected(self) -> str:
        return "vm" if self._on_vm else "namespace"

    def select(self, backend: str) -> bool:
        """The namespace or the VM on the host's links (a stopped VM boots again)."""
        if backend not in SELECTABLE:
            raise TestbedError(f"unknown host backend {backend!r}", fix=f"use one of {SELECTABLE}")
        vm = self.vm
        want = backend == "vm"
        if self._on_vm == want:
            if want and not vm.running:
                vm.boot()
            return False
        if want:
            vm.attach()
        else:
            vm.detach()
        self._on_vm = want
        return True

    def describe(self) -> dict[str, Any]:
        return self.vm.describe()

    @property
    def current(self) -> NetnsHost | VmHost:
        """The backend selected now: what every Host member goes to."""
        return self.vm if self._on_vm else self.namespace

    # -- the Host protocol, on the selected backend ---------------------------------------

    @property
    def name(self) -> str:
        return self.current.name

    @property
    def cpu_groups(self) -> list[dict[str, Any]]:
        return self.current.cpu_groups

    @property
    def runs_commands(self) -> bool:
        return self.current.runs_commands

    @property
    def shares_files(self) -> bool:
        return self.current.shares_files

    @property
    def ledger(self) -> Ledger | None:
        return self.current.ledger

    @property
    def power(self) -> Power | None:
        return self.current.power

    @property
    def switch(self) -> Switch | None:
        return self

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float = 30.0,
    ) -> subprocess.CompletedProcess[str]:
        return self.current.run(argv, check=check, input=input, timeout=timeout)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        stdout: Redirect = subprocess.DEVNULL,
        stderr: Redirect = subprocess.DEVNULL,
        label: str = "",
        pass_fds: Sequence[int] = (),
    ) -> ManagedProcess:
        return self.current.spawn(
            argv, stdout=stdout, stderr=stderr, label=label, pass_fds=pass_fds
        )

    def interface_counters(self) -> dict[str, InterfaceCounters]:
        return self.current.interface_counters()

    def cpu_seconds(self) -> float | None:
        return self.current.cpu_seconds()

    def proc_stat(self) -> dict[str, int] | None:
        return self.current.proc_stat()

    def memory_bytes(self) -> int:
        return self.current.memory_bytes()

    def stop_started(self) -> list[str]:
        return self.current.stop_started()

    def track_file(self, path: str) -> None:
        self.current.track_file(path)

    def track_setting(self, path: str, value: str) -> None:
        self.current.track_setting(path, value)

    def __repr__(self) -> str:
        return f"NetnsOrVmHost({self.role!r}, selected={self.selected!r})"


# A variant's `backend = "vm"`: the DUT's namespace becomes a qemu VM on the same links.
# start_s: the kept seed000-virtual-appliance-quick run took about 55 s beyond its tests
KIND = BackendKind(name="vm", build=NetnsOrVmHost.build, variant=True, virtual=True, start_s=50.0)
