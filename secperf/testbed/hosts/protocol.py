"""The host interface: a place where secperf runs commands and daemons, reads
counters, CPU and memory, and removes what it started.

Everything above the testbed (mechanisms, workloads, the runner) talks to hosts
through this Protocol only, so a host may be a network namespace on this machine
(secperf.testbed.netns.NetnsHost, the namespace backend) or a remote machine
reached over SSH (a backend of the same shape); nothing above knows which.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from secperf.testbed.netns import ManagedProcess

Redirect = int | IO[Any] | None


@dataclass(frozen=True)
class InterfaceCounters:
    """One interface's kernel counters at one instant."""

    rx_bytes: int
    rx_packets: int
    rx_dropped: int
    tx_bytes: int
    tx_packets: int
    tx_dropped: int


@runtime_checkable
class Host(Protocol):
    """Somewhere commands run: a namespace here, an SSH host in a lab."""

    @property
    def name(self) -> str: ...

    @property
    def cpu_groups(self) -> list[dict[str, Any]]:
        """The CPU counter of every host of the testbed (`host`, `path`, `fd`), for an
        engine spec's `cpu_groups` (spawn it with those fds); empty where CPU per
        host is not counted."""
        ...

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float = 30.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run to completion; with check, a non-zero exit raises a SecperfError."""
        ...

    def spawn(
        self,
        argv: Sequence[str],
        *,
        stdout: Redirect = subprocess.DEVNULL,
        stderr: Redirect = subprocess.DEVNULL,
        label: str = "",
        pass_fds: Sequence[int] = (),
    ) -> ManagedProcess:
        """Start a long-running process (a daemon, in the foreground), recorded until
        it is stopped; it inherits `pass_fds` (this process's fds, same numbers)."""
        ...

    def interface_counters(self) -> dict[str, InterfaceCounters]:
        """Every interface's byte and packet counters now."""
        ...

    def cpu_seconds(self) -> float | None:
        """CPU time of what secperf started in this host (None where not counted)."""
        ...

    def memory_bytes(self) -> int:
        """Resident memory of what secperf started in this host and still runs."""
        ...

    def stop_started(self) -> list[str]:
        """Stop everything secperf started in this host; what was stopped."""
        ...

    def track_file(self, path: str) -> None:
        """Record a file that something secperf started makes outside the run
        directory (a daemon's control socket), so teardown removes it even after a
        crash."""
        ...
