"""The namespace backend: a host that is a network namespace on this machine.

Everything here drives iproute2 (`ip netns ...`, `ip netns exec ...`) through
subprocess (secperf.testbed.commands): `ip netns exec` execs the target in place,
so the pid Popen returns is the pid of the real program, and that is what the
ledger records.

`NetnsHost.build` is the factory the Testbed calls; `open` makes the namespace
with its sysctls and its cgroup (secperf.testbed.cgroups). Every process `spawn`
starts joins the host's cgroup before it execs (a `sh -c 'echo $$ > …/cgroup.procs;
exec "$@"'` in front of `ip netns exec`, which keeps the pid), so its CPU and its
children's count for that host. The links between namespaces are the Testbed's.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed import cgroups, links
from secperf.testbed.cgroups import HostCgroup
from secperf.testbed.commands import run_command
from secperf.testbed.hosts.protocol import (
    BackendKind,
    BuildContext,
    InterfaceCounters,
    ManagedProcess,
    Power,
    Redirect,
    Switch,
    parse_ip_stats,
    signal_group,
)
from secperf.testbed.ledger import Ledger, proc_state, process_matches

NETNS_DIR = Path("/run/netns")


def netns_name(prefix: str, role: str) -> str:
    return f"{prefix}-{role}"


# Every host that opens TCP connections keeps a TIME_WAIT per connection it closes
# first (crr's orderly close, RFC 3511's connections): 64k source ports, and
# tcp_tw_reuse = 1 lets connect() take a port whose TIME_WAIT is over 1 s old (the
# timestamps guard the old segments), so a 10k conn/s crr runs for minutes without
# running out of ports. Per-namespace sysctls, recorded in run.json (testbed.hosts).
CONNECTION_SYSCTLS: dict[str, str | int] = {
    "net.ipv4.ip_local_port_range": "1024 65000",
    "net.ipv4.tcp_tw_reuse": 1,
}


def host_sysctls(forwarding: bool) -> dict[str, str | int]:
    """The sysctls of a testbed host (a namespace, or a VM guest in its place)."""
    on = int(forwarding)
    return {
        **CONNECTION_SYSCTLS,
        # Explicit either way: a new namespace may inherit ip_forward from the root one.
        "net.ipv4.ip_forward": on,
        "net.ipv6.conf.all.forwarding": on,
        # Set before the veths exist so they inherit it: addresses usable at once.
        "net.ipv6.conf.all.accept_dad": 0,
        "net.ipv6.conf.default.accept_dad": 0,
    }


# -- namespaces --------------------------------------------------------------


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def create_netns(ledger: Ledger, name: str) -> None:
    """Create a namespace, recorded first (its loopback comes up with the host's batch)."""
    ledger.add("netns", name=name)
    try:
        run_command(["ip", "netns", "add", name])
    except TestbedError:
        # Not made by us (it may exist already and belong to someone else).
        ledger.remove("netns", name=name)
        raise


def delete_netns(name: str) -> bool:
    """Delete a namespace (and the interfaces in it); False if it was already gone."""
    if not netns_exists(name):
        return False
    proc = run_command(["ip", "netns", "del", name], check=False)
    if proc.returncode != 0 and netns_exists(name):
        raise TestbedError(
            f"could not delete namespace {name}: {proc.stderr.strip()}",
            where=name,
            fix="its ledger is kept: run `secperf clean` again once what holds it has ended",
        )
    return True


def set_sysctls(netns: str, values: dict[str, str | int]) -> None:
    """Write net.* sysctls inside a namespace (they are per namespace)."""
    if values:
        argv = ["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in values.items())]
        run_command(["ip", "netns", "exec", netns, *argv])


# -- processes -----------------------------------------------------------------


def kill_recorded_process(
    pid: int, starttime: int, pgid: int | None = None, timeout: float = 5.0
) -> bool:
    """Stop a process that is not our child (e.g. a dead run's), only if pid+starttime match.

    SIGTERM to its group, wait with a deadline, then SIGKILL. Returns True if a
    matching process was found and signalled.
    """
    if not process_matches(pid, starttime):
        return False
    signal_group(pgid, pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process_matches(pid, starttime):
        time.sleep(0.01)
    if process_matches(pid, starttime):
        signal_group(pgid, pid, signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and process_matches(pid, starttime):
            time.sleep(0.01)
    return True


# -- hosts --------------------------------------------------------------------


class NetnsHost:
    """A host that is a network namespace on this machine (the `Backend` protocol)."""

    def __init__(self, role: str, bed: BuildContext) -> None:
        self.role = role
        self.netns = netns_name(bed.prefix, role)
        self._bed = bed
        self._ledger = bed.ledger
        # Shared with the Testbed so teardown can stop (and reap) what we spawned.
        self._processes = bed.processes
        # Shared with every host, filled as they open: host -> its cgroup.
        self._groups = bed.cgroups

    @classmethod
    def build(cls, name: str, bed: BuildContext, settings: object = None) -> NetnsHost:
        """The factory: a namespace host (no settings of its own)."""
        return cls(name, bed)

    # -- life cycle (the Backend protocol) -------------------------------------------

    def open(self) -> None:
        """The namespace (recorded first), its sysctls, its cgroup (pinned and held to a
        CPU quota if asked)."""
        bed = self._bed
        create_netns(self._ledger, self.netns)
        set_sysctls(self.netns, host_sysctls(bed.topology.host(self.role).forwarding))
        if bed.cgroup_layout is None:
            bed.cgroup_layout = cgroups.detect()
        self._groups[self.role] = cgroups.create(
            self._ledger,
            bed.cgroup_layout,
            bed.prefix,
            self.role,
            bed.pin.get(self.role),
            bed.quota.get(self.role),
        )

    def start(self) -> None:
        """Nothing: a namespace is ready once its links are."""

    def close(self) -> list[str]:
        """Nothing of its own: its processes, cgroup and namespace go by the ledger."""
        return []

    @property
    def location(self) -> str:
        return self.netns

    @property
    def local_links(self) -> bool:
        return True

    def ifname(self, peer: str) -> str:
        """The topology's name for this end (a rule set's `lan0`), else the generated one."""
        topo = self._bed.topology
        named = topo.ifnames.get((self.role, peer))
        if named is not None:
            return named
        return links.ifname(self._bed.prefix, topo.tag(self.role), topo.tag(peer))

    # -- capabilities ---------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.netns

    @property
    def cgroup(self) -> HostCgroup | None:
        return self._groups.get(self.role)

    @property
    def ledger(self) -> Ledger:
        """The run's ledger: a daemon's own cgroups (a proxy's cpuset and memory
        limit) are recorded in it before they are made."""
        return self._ledger

    @property
    def cpu_groups(self) -> list[dict[str, Any]]:
        return [g.as_spec() for g in self._groups.values()]

    @property
    def runs_commands(self) -> bool:
        return True

    @property
    def shares_files(self) -> bool:
        return True  # a namespace shares this machine's file system

    @property
    def power(self) -> Power | None:
        return None

    @property
    def switch(self) -> Switch | None:
        return None

    def proc_stat(self) -> dict[str, int] | None:
        return None  # a namespace shares this machine's /proc/stat

    # -- commands and processes -------------------------------------------------------

    def command(self, argv: Sequence[str]) -> list[str]:
        """The argv that runs `argv` in this namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float = 30.0,
    ) -> subprocess.CompletedProcess[str]:
        return run_command(self.command(argv), check=check, input=input, timeout=timeout)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        stdout: Redirect = subprocess.DEVNULL,
        stderr: Redirect = subprocess.DEVNULL,
        label: str = "",
        stdin: Redirect = subprocess.DEVNULL,
        env: dict[str, str] | None = None,
        pass_fds: Sequence[int] = (),
    ) -> ManagedProcess:
        full = self.command(argv)
        group = self.cgroup
        if group is not None:
            # Join before exec: the pid stays the program's, and nothing it forks escapes.
            joins = "".join(f"echo $$ > {shlex.quote(p)} && " for p in group.procs_files())
            full = ["sh", "-c", joins + 'exec "$@"', "sh", *full]
        try:
            popen = subprocess.Popen(
                full,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                env=env,
                text=True,
                pass_fds=tuple(pass_fds),
                start_new_session=True,  # its own group: stop() reaches its children
            )
        except FileNotFoundError:
            raise TestbedError("program not found: ip", fix="install iproute2") from None
        proc = ManagedProcess(popen, ledger=self._ledger, label=label or argv[0], host=self.netns)
        # Recorded right after the fork: the pid is not known before it. A crash in
        # this gap is still covered: teardown kills whatever runs in its namespaces.
        self._ledger.add(
            "process",
            pid=proc.pid,
            starttime=proc.starttime,
            pgid=proc.pid,
            label=proc.label,
            host=self.netns,
            argv=list(argv),
        )
        self._processes.append(proc)
        return proc

    # -- counters, CPU and memory (the host interface) -------------------------------

    def interface_counters(self) -> dict[str, InterfaceCounters]:
        """Every interface's byte and packet counters, as the kernel has them now."""
        return parse_ip_stats(self.run(["ip", "-s", "-j", "link", "show"]).stdout)

    def cpu_seconds(self) -> float | None:
        """CPU time of everything secperf started in this host (its cgroup), or None
        where this machine gives hosts no cgroup."""
        group = self.cgroup
        return None if group is None else group.usage_s()

    def memory_bytes(self) -> int:
        """Resident memory (VmRSS) of the processes secperf started here that still run,
        with their children: what the host's daemons hold now."""
        total = 0
        for proc in self._processes:
            if proc.host != self.netns or proc.returncode is not None:
                continue
            for pid in [proc.pid, *_descendants(proc.pid)]:
                total += _rss_bytes(pid)
        return total

    def stop_started(self) -> list[str]:
        """Stop every process secperf started in this host (newest first)."""
        stopped: list[str] = []
        for proc in reversed(self._processes):
            if proc.host == self.netns and proc.returncode is None:
                proc.stop(timeout=2.0)
                stopped.append(f"process {proc.pid} ({proc.label})")
        return stopped

    def track_file(self, path: str) -> None:
        if not any(e.get("path") == path for e in self._ledger.live_entries()):
            self._ledger.add("file", path=path)

    def track_setting(self, path: str, value: str) -> None:
        pass  # the namespace's sysctls and interfaces go with it

    def __repr__(self) -> str:
        return f"NetnsHost({self.role!r}, netns={self.netns!r})"


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0  # gone between the listing and the read: it holds nothing now
    return 0


def _descendants(pid: int) -> list[int]:
    """Pids of every live descendant of `pid` (from /proc/PID/task/*/children)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        here = todo.pop()
        try:
            tasks = list(Path(f"/proc/{here}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return out


def netns_pids(name: str) -> list[int]:
    """Pids of every process whose network namespace is `name`."""
    if not netns_exists(name):
        return []
    proc = run_command(["ip", "netns", "pids", name], check=False)
    return [int(tok) for tok in proc.stdout.split() if tok.isdigit()]


def kill_netns_processes(name: str, timeout: float = 2.0) -> list[int]:
    """SIGKILL whatever still runs in a namespace of ours, wait until it is gone."""
    pids = [p for p in netns_pids(name) if p != os.getpid()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(proc_state(p) not in (None, "Z", "X") for p in pids):
        time.sleep(0.005)
    return pids


# The default backend: a namespace on this machine ("local" in an inventory, its older word).
KIND = BackendKind(
    name="namespace", build=NetnsHost.build, inventory=True, variant=True, aliases=("local",)
)
