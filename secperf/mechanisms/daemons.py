"""Mechanisms that run daemons on the DUT: what a fail-closed check may kill and restart.

A mechanism made of rules alone has nothing here; one with a user-space part
(the appliance's NFQUEUE daemon, later a VPN or a proxy) implements this so
that `failclosed` can kill its daemons and see whether the path closes.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from secperf.mechanisms.base import MechanismContext
from secperf.testbed.testbed import Host, ManagedProcess


@runtime_checkable
class DaemonMechanism(Protocol):
    def daemons(self) -> list[ManagedProcess]:
        """The daemons apply() started that still run."""
        ...

    def kill_daemons(self) -> list[str]:
        """SIGKILL every daemon (a crash, not a shutdown); wait until each is gone.

        Returns a label per daemon killed."""
        ...

    def restart_daemons(self, dut: Host, ctx: MechanismContext) -> None:
        """Start the daemons again after kill_daemons(), ready when this returns."""
        ...
