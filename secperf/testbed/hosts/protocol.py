"""The host interface: a place where secperf runs commands and daemons, reads
counters, CPU and memory, and removes what it started.

Everything above the testbed (mechanisms, workloads, the runner) talks to hosts
through `Host` only, so a host may be a network namespace on this machine
(hosts/netns.py), a remote machine reached over SSH (hosts/ssh.py), a namespace
that can become a VM (hosts/vm.py) or a device secperf runs nothing on
(hosts/external.py); nothing above knows which. The Testbed builds and removes
hosts through `Backend`, made by one factory per backend (`HostFactory`).

Optional capabilities are declared here, never probed with getattr/hasattr. Every
backend has every member; one that lacks an ability says so with the member's value:
  runs_commands  bool: False for a device secperf cannot run anything on
  ledger         the run's local ledger, or None (no local cgroups can be made there)
  power          a `Power` (off/on), or None where the host cannot be stopped and started
  switch         a `Switch` (which backend the host is now), or None for a single backend
  proc_stat()    the host's own /proc/stat cpu line, or None where it is not read
  cpu_seconds()  CPU of what secperf started there, or None where it is not counted
A caller tests the value (`if host.power is not None`), nothing else.

Shared types live here too: `ManagedProcess` (a process a backend started and
recorded), `InterfaceCounters`, `Redirect`, and the `BuildContext` a factory gets.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from secperf.testbed.cgroups import HostCgroup, Layout
from secperf.testbed.ledger import Ledger, proc_starttime
from secperf.testbed.topology import Topology

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


def parse_ip_stats(out: str) -> dict[str, InterfaceCounters]:
    """`ip -s -j link show` output -> interface name -> its counters."""
    counters: dict[str, InterfaceCounters] = {}
    for link in json.loads(out or "[]"):
        stats = link.get("stats64") or link.get("stats") or {}
        rx, tx = stats.get("rx", {}), stats.get("tx", {})
        counters[str(link["ifname"])] = InterfaceCounters(
            rx_bytes=int(rx.get("bytes", 0)),
            rx_packets=int(rx.get("packets", 0)),
            rx_dropped=int(rx.get("dropped", 0)),
            tx_bytes=int(tx.get("bytes", 0)),
            tx_packets=int(tx.get("packets", 0)),
            tx_dropped=int(tx.get("dropped", 0)),
        )
    return counters


# -- processes -----------------------------------------------------------------


def signal_group(pgid: int | None, pid: int, sig: int) -> None:
    """Signal a process's group if it leads one, else the process; gone is fine."""
    try:
        if pgid is not None and pgid == pid:
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


class ManagedProcess:
    """A process started in a host, recorded in the ledger until it is stopped.

    It leads its own process group, so `stop` also reaches the children it forks
    (daemons' workers). Backends whose processes run elsewhere subclass it (an SSH
    host's RemoteProcess).
    """

    def __init__(
        self, popen: subprocess.Popen[Any], *, ledger: Ledger, label: str, host: str
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.label = label
        self.host = host
        self.argv = list(popen.args) if isinstance(popen.args, list | tuple) else [str(popen.args)]
        # Read before anyone can reap it: a zombie still has its stat.
        self.starttime = proc_starttime(self.pid) or 0
        self._ledger = ledger
        self._stopped = False
        # Run once the process has stopped (a VM backend fetches what it wrote).
        self.after_stop: list[Callable[[], None]] = []

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    @property
    def stdout(self) -> IO[Any] | None:
        return self.popen.stdout

    @property
    def stderr(self) -> IO[Any] | None:
        return self.popen.stderr

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout)

    def _exited(self) -> bool:
        """True once the leader has exited, without reaping it (its pid stays ours)."""
        if self.popen.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM the group, wait up to `timeout`, then SIGKILL; idempotent.

        Returns the exit status (negative signal number if killed).
        """
        if not self._stopped:
            if not self._exited():
                self._signal(signal.SIGTERM)
                deadline = time.monotonic() + timeout
                while not self._exited() and time.monotonic() < deadline:
                    time.sleep(0.005)
                if not self._exited():
                    self._signal(signal.SIGKILL)
            # The leader is a zombie at worst, so its group id can't be reused yet:
            # kill any children it left behind, then reap it.
            if self.popen.returncode is None:
                self._signal(signal.SIGKILL)
            try:
                self.popen.wait(timeout=5.0)
            finally:
                self._stopped = True
                self._ledger.remove("process", pid=self.pid, starttime=self.starttime)
            hooks, self.after_stop = self.after_stop, []
            for hook in hooks:
                hook()
        return self.popen.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the process itself (not its group), e.g. SIGINT to end a flood early."""
        if self.popen.poll() is None:
            os.kill(self.pid, sig)

    def _signal(self, sig: int) -> None:
        if self.popen.returncode is None:
            signal_group(self.pid, self.pid, sig)

    def __repr__(self) -> str:
        return f"ManagedProcess(pid={self.pid}, label={self.label!r}, host={self.host!r})"


# -- optional capabilities -------------------------------------------------------------


class Power(Protocol):
    """A host that can be stopped and started again (a VM: qemu ends, then boots)."""

    def off(self) -> None:
        """Stop the host: whatever it ran is gone, nothing passes through it."""
        ...

    def on(self) -> None:
        """Start it again, configured as the testbed built it (no mechanism loaded)."""
        ...


class Switch(Protocol):
    """A host that is one of several backends at a time (the DUT's namespace, or its
    VM): the Testbed selects one per variant."""

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends it can be ("namespace", "vm")."""
        ...

    @property
    def selected(self) -> str:
        """The backend it is now."""
        ...

    def select(self, backend: str) -> bool:
        """Become `backend`; True if that changed anything (the neighbours must then
        forget the old MAC addresses)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the other backend ran as, for run.json (a VM: accel, CPUs, image)."""
        ...


# -- the host ------------------------------------------------------------------------


@runtime_checkable
class Host(Protocol):
    """Somewhere commands run: a namespace here, an SSH host in a lab."""

    @property
    def name(self) -> str:
        """Where it runs, for messages and process records: a namespace's name, an
        SSH host's graph name, a VM's `<namespace>-vm`."""
        ...

    @property
    def role(self) -> str:
        """Its name in the testbed graph ("dut", "client", "gw-a")."""
        ...

    @property
    def cpu_groups(self) -> list[dict[str, Any]]:
        """The CPU counter of every host of the testbed (`host`, `path`, `fd`), for an
        engine spec's `cpu_groups` (spawn it with those fds); empty where CPU per
        host is not counted."""
        ...

    @property
    def runs_commands(self) -> bool:
        """False for a device secperf runs nothing on (its state is its own)."""
        ...

    @property
    def shares_files(self) -> bool:
        """True where a file on this machine is a file the host's commands see (a
        namespace): a large input may then be handed over as a path."""
        ...

    @property
    def ledger(self) -> Ledger | None:
        """The run's ledger on this machine, where a daemon's own cgroups (a proxy's
        cpuset and memory limit) are recorded before they are made; None where
        nothing local can be made for the host (a remote or external one)."""
        ...

    @property
    def power(self) -> Power | None:
        """Its power switch, or None where it cannot be stopped and started."""
        ...

    @property
    def switch(self) -> Switch | None:
        """Its backend switch, or None where it has one backend only."""
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

    def proc_stat(self) -> dict[str, int] | None:
        """The host's own /proc/stat cpu line in USER_HZ ticks (a VM's guest), or None
        where it is not read (a namespace shares this machine's)."""
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

    def track_setting(self, path: str, value: str) -> None:
        """Record a kernel setting (a /proc/sys/net or rps_cpus file) about to be
        changed, with `value`, what it holds now, so that teardown (and an SSH host's
        watchdog) writes it back even after a crash. A host whose settings die with it
        (a namespace, the run's VM) records nothing."""
        ...


class Backend(Host, Protocol):
    """A host as the Testbed builds, wires and removes it. Everything above the
    testbed sees only `Host`."""

    @property
    def location(self) -> str:
        """Where it lives, as run.json records it (testbed.hosts.NAME.netns): its
        namespace's name, `ssh://user@host:port`, or "external"."""
        ...

    @property
    def local_links(self) -> bool:
        """True if its links are veths the Testbed makes on this machine (a namespace);
        False for real cables (a lab machine, an external device), which are not
        built, addressed or shaped by secperf. A testbed is all one or all the other."""
        ...

    def ifname(self, peer: str) -> str:
        """Its interface on the link toward `peer`."""
        ...

    def open(self) -> None:
        """Make or reach the host, before the testbed wires its links (create the
        namespace, log in over SSH)."""
        ...

    def start(self) -> None:
        """Finish it once the links are up (boot a VM on them)."""
        ...

    def close(self) -> list[str]:
        """Stop what it started and undo what the run's local ledger does not cover
        (an SSH host's remote ledger); what was removed. The ledger's own teardown
        follows."""
        ...


@dataclass
class BuildContext:
    """What every factory gets from the Testbed: the run's shared state."""

    topology: Topology
    prefix: str
    ledger: Ledger
    pin: dict[str, list[int]] = field(default_factory=dict)  # host -> its CPUs
    quota: dict[str, float] = field(default_factory=dict)  # host -> its CPU quota (CPUs)
    # directories whose files are copied to a remote host when a command names one
    stage_dirs: tuple[Path, ...] = ()
    # every local process the hosts started: teardown stops (and reaps) them all
    processes: list[ManagedProcess] = field(default_factory=list)
    # host -> its cgroup, filled as namespaces are made (every host's counter is
    # handed to every engine run)
    cgroups: dict[str, HostCgroup] = field(default_factory=dict)
    cgroup_layout: Layout | None = None

    @property
    def state_dir(self) -> Path:
        """Where the ledger lives: logs of the run's own (a VM's console) go beside it."""
        return self.ledger.path.parent


# A backend's factory: (host name, the run's context, the backend's own settings from
# the inventory or scenario: an SshSpec, a VmSettings, interface names, or None).
HostFactory = Callable[[str, BuildContext, Any], Backend]


@dataclass(frozen=True)
class BackendKind:
    """What the rest of secperf needs to know about one host backend, stated once in its
    module (`KIND`); secperf.testbed.hosts.registry lists them. Nothing outside
    testbed/hosts names a backend: it asks the registry for one of these."""

    name: str
    build: HostFactory
    # Where a scenario may name it: a host's `backend` in [testbed.hosts.NAME] (the
    # inventory), a variant's `backend` (what the DUT is in that variant), or both.
    inventory: bool = False
    variant: bool = False
    # A machine or device of a lab, not made here: its test addresses and interfaces
    # come from the inventory, its links are real wires (never shaped).
    lab: bool = False
    # secperf logs in to it (it needs a destination, and `secperf check` reaches it).
    logs_in: bool = False
    # secperf runs nothing on it (its interfaces are the inventory's).
    runs_nothing: bool = False
    # A variant that selects it boots a VM (the preflight asks for qemu).
    virtual: bool = False
    # About how long its host takes to start, once a run (a VM's boot; `secperf check`'s
    # estimate adds it), in seconds.
    start_s: float = 0.0
    # Other words a scenario may use for it (documented in docs/scenario-format.md).
    aliases: tuple[str, ...] = ()
