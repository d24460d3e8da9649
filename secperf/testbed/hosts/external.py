"""An external device: a DUT that secperf cannot log in to (an appliance, a router
with its own OS). It is a host of the graph with the inventory's addresses, but it
runs nothing secperf sends: `kind = "external"` mechanisms switch it between
variants with the user's own commands, or by asking the user (secperf.mechanisms.external).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed.hosts.protocol import (
    BackendKind,
    BuildContext,
    InterfaceCounters,
    ManagedProcess,
    Power,
    Redirect,
    Switch,
)
from secperf.testbed.ledger import Ledger


class ExternalHost:
    """A host of the graph that secperf does not control (the host interface's
    commands fail; counters, CPU and memory are not read). Also the switches of a
    lab of real machines: real switches, nothing for secperf to run there either."""

    def __init__(self, name: str, interfaces: Mapping[str, str] | None = None) -> None:
        self._name = name
        self._interfaces = dict(interfaces or {})  # peer host -> interface name

    @classmethod
    def build(
        cls, name: str, bed: BuildContext, interfaces: Mapping[str, str] | None = None
    ) -> ExternalHost:
        """The factory: settings are its interfaces by peer, from the inventory."""
        return cls(name, interfaces)

    # -- life cycle (the Backend protocol): nothing to make, nothing to remove -----------

    def open(self) -> None:
        pass

    def start(self) -> None:
        pass

    def close(self) -> list[str]:
        return []

    @property
    def location(self) -> str:
        return "external"

    @property
    def local_links(self) -> bool:
        return False  # cabled in the lab

    def ifname(self, peer: str) -> str:
        """Its interface toward `peer` as the inventory names it ("" if it does not)."""
        return self._interfaces.get(peer, "")

    # -- capabilities: none -----------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def role(self) -> str:
        return self._name

    @property
    def cpu_groups(self) -> list[dict[str, Any]]:
        return []

    @property
    def runs_commands(self) -> bool:
        return False  # its connections are its own: nothing to flush from here

    @property
    def shares_files(self) -> bool:
        return False

    @property
    def ledger(self) -> Ledger | None:
        return None

    @property
    def power(self) -> Power | None:
        return None

    @property
    def switch(self) -> Switch | None:
        return None

    def proc_stat(self) -> dict[str, int] | None:
        return None

    def _refuse(self, argv: Sequence[str]) -> TestbedError:
        return TestbedError(
            f"{self._name} is an external device: secperf runs nothing on it "
            f"(asked to run {' '.join(argv)})",
            where=f"[testbed.hosts.{self._name}]",
            fix='put only kind = "external" mechanisms on it (their apply / remove '
            'commands configure it), or reach it over SSH (backend = "ssh")',
        )

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float = 30.0,
    ) -> subprocess.CompletedProcess[str]:
        if check:
            raise self._refuse(argv)
        return subprocess.CompletedProcess(list(argv), 127, "", "external device")

    def spawn(
        self,
        argv: Sequence[str],
        *,
        stdout: Redirect = subprocess.DEVNULL,
        stderr: Redirect = subprocess.DEVNULL,
        label: str = "",
        pass_fds: Sequence[int] = (),
    ) -> ManagedProcess:
        raise self._refuse(argv)

    def interface_counters(self) -> dict[str, InterfaceCounters]:
        return {}

    def cpu_seconds(self) -> float | None:
        return None

    def memory_bytes(self) -> int:
        return 0

    def stop_started(self) -> list[str]:
        return []

    def track_file(self, path: str) -> None:
        raise self._refuse(["(a file)", path])

    def track_setting(self, path: str, value: str) -> None:
        raise self._refuse(["(a setting)", path])

    def __repr__(self) -> str:
        return f"ExternalHost({self._name!r})"


# A device of a lab secperf runs nothing on (kind = "external" mechanisms change it).
KIND = BackendKind(
    name="external", build=ExternalHost.build, inventory=True, lab=True, runs_nothing=True
)
