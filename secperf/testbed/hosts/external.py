"""An external device: a DUT that secperf cannot log in to (an appliance, a router
with its own OS). It is a host of the graph with the inventory's addresses, but it
runs nothing secperf sends: `kind = "external"` mechanisms switch it between
variants with the user's own commands, or by asking the user (secperf.mechanisms.external).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed.host import InterfaceCounters, Redirect
from secperf.testbed.netns import ManagedProcess


class ExternalHost:
    """A host of the graph that secperf does not control (the host interface's
    commands fail; counters, CPU and memory are not read)."""

    runs_commands = False  # its connections are its own: nothing to flush from here

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def cpu_groups(self) -> list[dict[str, Any]]:
        return []

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

    def __repr__(self) -> str:
        return f"ExternalHost({self._name!r})"
