"""Namespaces, the hosts that live in them, and the processes they run.

Everything here drives iproute2 (`ip netns ...`, `ip netns exec ...`) through
subprocess, on purpose: the testbed is made of exactly the commands a network
engineer would type to rebuild or inspect it, every failure comes with the
command and its stderr, and no netlink helper process or library sits between
secperf and the kernel. `ip netns exec` execs the target in place, so the pid
Popen returns is the pid of the real program, and that is what the ledger
records.

This module is the namespace backend of the host interface
(secperf.testbed.host.Host): `NetnsHost` is a host that is a namespace on this
machine. A remote machine reached over SSH implements the same members.

Every process `spawn` starts joins the host's cgroup before it execs (a
`sh -c 'echo $$ > …/cgroup.procs; exec "$@"'` in front of `ip netns exec`,
which keeps the pid), so its CPU and its children's count for that host.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from secperf.errors import TestbedError
from secperf.testbed.cgroups import HostCgroup
from secperf.testbed.host import Host, InterfaceCounters, Redirect
from secperf.testbed.ledger import Ledger, proc_starttime, proc_state, process_matches

PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{1,11}$")
NETNS_DIR = Path("/run/netns")

__all__ = ["Host", "ManagedProcess", "NetnsHost", "Redirect"]


def new_prefix() -> str:
    """A fresh run prefix: 'sp' + 5 random hex digits, e.g. 'sp1a2b3'."""
    return "sp" + secrets.token_hex(3)[:5]


def check_prefix(prefix: str) -> str:
    """A prefix must be short and plain: it goes into interface names (≤ 15 chars)."""
    if not PREFIX_RE.match(prefix):
        raise TestbedError(
            f"bad run prefix {prefix!r}",
            fix="use 2-12 lowercase letters and digits, starting with a letter",
        )
    return prefix


def netns_name(prefix: str, role: str) -> str:
    return f"{prefix}-{role}"


# -- running commands --------------------------------------------------------


def run_command(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float = 30.0,
    fix: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command; with check, a failure is a TestbedError naming it and its stderr."""
    cmd = shlex.join(argv)
    try:
        proc = subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise TestbedError(
            f"program not found: {argv[0]}",
            where=cmd,
            fix=f"install {argv[0]} (iproute2 for ip and tc)",
        ) from None
    except subprocess.TimeoutExpired:
        raise TestbedError(
            f"command timed out after {timeout} s: {cmd}",
            where=cmd,
            fix="the machine may be overloaded; `secperf clean` removes what this run left",
        ) from None
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise TestbedError(
            f"command failed (exit {proc.returncode}): {cmd}\n  {detail}",
            where=cmd,
            fix=fix or "read the command's error above; `secperf clean` removes leftovers",
        )
    return proc


def run_ip_batch(netns: str, lines: Sequence[str]) -> None:
    """Run `ip` commands in a namespace in one process (`ip -n NS -batch -`).

    One process instead of hundreds keeps a testbed with 200 emulated hosts
    fast to build; a failure still names the exact line that failed.
    """
    if not lines:
        return
    argv = ["ip", "-n", netns, "-batch", "-"]
    proc = run_command(argv, check=False, input="\n".join(lines) + "\n")
    if proc.returncode != 0:
        match = re.search(r"Command failed -:(\d+)", proc.stderr)
        failed = lines[int(match.group(1)) - 1] if match else "(unknown line)"
        cmd = f"ip -n {netns} {failed}"
        raise TestbedError(
            f"command failed: {cmd}\n  {proc.stderr.strip()}",
            where=cmd,
            fix="read the command's error above; `secperf clean` removes leftovers",
        )


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


def _signal_group(pgid: int | None, pid: int, sig: int) -> None:
    try:
        if pgid is not None and pgid == pid:
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def kill_recorded_process(
    pid: int, starttime: int, pgid: int | None = None, timeout: float = 5.0
) -> bool:
    """Stop a process that is not our child (e.g. a dead run's), only if pid+starttime match.

    SIGTERM to its group, wait with a deadline, then SIGKILL. Returns True if a
    matching process was found and signalled.
    """
    if not process_matches(pid, starttime):
        return False
    _signal_group(pgid, pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process_matches(pid, starttime):
        time.sleep(0.01)
    if process_matches(pid, starttime):
        _signal_group(pgid, pid, signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and process_matches(pid, starttime):
            time.sleep(0.01)
    return True


class ManagedProcess:
    """A process started in a host, recorded in the ledger until it is stopped.

    It leads its own process group, so `stop` also reaches the children it forks
    (daemons' workers).
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
            _signal_group(self.pid, self.pid, sig)

    def __repr__(self) -> str:
        return f"ManagedProcess(pid={self.pid}, label={self.label!r}, host={self.host!r})"


# -- hosts --------------------------------------------------------------------


class NetnsHost:
    """A host that is a network namespace on this machine."""

    def __init__(
        self,
        role: str,
        netns: str,
        ledger: Ledger,
        processes: list[ManagedProcess] | None = None,
        groups: dict[str, HostCgroup] | None = None,
    ) -> None:
        self.role = role
        self.netns = netns
        self._ledger = ledger
        # Shared with the Testbed so teardown can stop (and reap) what we spawned.
        self._processes = processes if processes is not None else []
        # Shared with the Testbed, which fills it as it builds: role -> the host's cgroup.
        self._groups = groups if groups is not None else {}

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

    def __repr__(self) -> str:
        return f"NetnsHost({self.role!r}, netns={self.netns!r})"


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
