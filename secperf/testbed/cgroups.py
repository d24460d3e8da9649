"""A cgroup per testbed host: CPU per host, pinning hosts to CPUs, a CPU quota.

Every process secperf starts in a host (engine, daemons, servers) joins that
host's group before it execs, so the kernel's own counter of the group is the
host's CPU: the engine reads it at the measured window's edges (spec field
`cpu_groups`). Forwarding and netfilter run in softirq context and are charged
to whatever process the CPU was running; /proc/stat's softirq column counts
that work machine-wide (docs/methodology.md, "CPU").

Two layouts, found from /proc/self/mounts:
  v1 (and the v1/v2 hybrid of many Debian machines): the `cpuacct` hierarchy
     (`cpuacct.usage`, ns), to pin the `cpuset` hierarchy, and for a quota the
     `cpu` hierarchy (`cpu.cfs_quota_us` / `cpu.cfs_period_us`);
  v2 (unified): one group with `cpu.stat` (`usage_usec`, counted even without
     the cpu controller), `cpuset.cpus` where the cpuset controller is on and
     `cpu.max` where the cpu controller is.
A quota caps the host's processes only: softirq work (forwarding, netfilter) runs
in whatever task it interrupts and is charged to that task, not to the host whose
packets it handles (docs/methodology.md, "Regime controls").
$SECPERF_CGROUP=v1|v2 picks one where both exist (tests use it to try both).
Groups are named `<run prefix>-<host>` directly under the hierarchy's root,
written to the ledger before they are made, and removed by it.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from secperf.errors import TestbedError
from secperf.testbed.ledger import Ledger

CgroupVersion = Literal["v1", "v2"]
CGROUP_ENV = "SECPERF_CGROUP"
MOUNTS = Path("/proc/self/mounts")


@dataclass(frozen=True)
class Layout:
    """Where this machine's cgroup hierarchies are, for CPU accounting and pinning."""

    version: CgroupVersion
    cpu_root: Path  # v1: the cpuacct mount; v2: the unified mount
    cpuset_root: Path | None  # None: hosts cannot be pinned here (say why in `why_no_cpuset`)
    why_no_cpuset: str = ""
    # where a CPU quota is set: v1 the cpu mount, v2 the unified one; None: nowhere
    quota_root: Path | None = None
    why_no_quota: str = ""

    @property
    def counter_name(self) -> str:
        return "cpuacct.usage" if self.version == "v1" else "cpu.stat"


def _mounts(text: str) -> tuple[dict[str, Path], Path | None]:
    """(v1 controller -> mount point, cgroup2 mount point) from /proc/self/mounts text."""
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        fstype, where, options = parts[2], Path(parts[1]), parts[3].split(",")
        if fstype == "cgroup2" and v2 is None:
            v2 = where
        elif fstype == "cgroup":
            for opt in options:
                if opt in ("cpuacct", "cpuset", "cpu"):
                    v1.setdefault(opt, where)
    return v1, v2


def detect(mounts_text: str | None = None, prefer: str | None = None) -> Layout:
    """The layout to use on this machine; TestbedError if it has no usable cgroups."""
    if mounts_text is None:
        try:
            mounts_text = MOUNTS.read_text()
        except OSError as exc:
            raise TestbedError(
                f"cannot read {MOUNTS}: {exc}", fix="secperf needs a Linux /proc"
            ) from None
    prefer = prefer if prefer is not None else os.environ.get(CGROUP_ENV, "")
    if prefer not in ("", "v1", "v2"):
        raise TestbedError(
            f"{CGROUP_ENV}={prefer!r} is not a cgroup version",
            fix=f"set {CGROUP_ENV} to v1 or v2, or unset it",
        )
    v1, v2 = _mounts(mounts_text)
    if prefer != "v2" and "cpuacct" in v1:
        cpuset, cpu = v1.get("cpuset"), v1.get("cpu")
        return Layout(
            "v1",
            v1["cpuacct"],
            cpuset,
            "" if cpuset else "no v1 cpuset hierarchy",
            cpu,
            "" if cpu else "no v1 cpu hierarchy (cpu.cfs_quota_us)",
        )
    if v2 is not None and prefer != "v1":
        controllers = _read(v2 / "cgroup.subtree_control").split()
        why = f"the cpuset controller is not enabled in {v2}/cgroup.subtree_control"
        why_quota = f"the cpu controller is not enabled in {v2}/cgroup.subtree_control"
        return Layout(
            "v2",
            v2,
            v2 if "cpuset" in controllers else None,
            "" if "cpuset" in controllers else why,
            v2 if "cpu" in controllers else None,
            "" if "cpu" in controllers else why_quota,
        )
    raise TestbedError(
        "this machine has no cgroup hierarchy to count CPU per host"
        + (f" (asked for {prefer} by ${CGROUP_ENV})" if prefer else ""),
        fix="mount cgroup2 (or the v1 cpuacct controller) under /sys/fs/cgroup",
    )


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def parse_cpus(text: str, available: set[int] | None = None) -> list[int]:
    """A CPU list as cpuset writes it ("0", "0-1", "0,2-3") -> sorted CPU numbers.

    ValueError says what is wrong: a malformed list or a CPU not in `available` (None:
    the list's form alone is checked, for another machine's CPUs).
    """
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f'{text!r} is not a CPU list: write e.g. "0", "1" or "0-1"')
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"{part!r} runs backwards: write the lower CPU first")
        cpus.update(range(a, b + 1))
    missing = sorted(cpus - available) if available is not None else []
    if missing and available is not None:
        have = ",".join(str(c) for c in sorted(available))
        raise ValueError(f"CPU {missing[0]} is not available here (this machine has {have})")
    return sorted(cpus)


def available_cpus() -> set[int]:
    return set(os.sched_getaffinity(0))


@dataclass
class HostCgroup:
    """The groups one host's processes join: CPU accounting, and a cpuset if pinned."""

    host: str
    counter: Path  # the CPU counter file the engine reads
    dirs: list[Path] = field(default_factory=list)  # every group to join, accounting first
    cpus: list[int] | None = None
    quota: float | None = None  # a fraction of one CPU, where the host has a quota
    # The counter, open for the testbed's life: engines inherit it, because inside
    # `ip netns exec` /sys is the namespace's own and /sys/fs/cgroup is not there.
    fd: int | None = None

    def open_counter(self) -> int:
        if self.fd is None:
            self.fd = os.open(self.counter, os.O_RDONLY | os.O_CLOEXEC)
        return self.fd

    def close_counter(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def join(self, pid: int) -> None:
        for procs in self.procs_files():
            Path(procs).write_text(f"{pid}\n")

    def usage_s(self) -> float:
        """CPU seconds the host's processes used so far (for tests and tools)."""
        text = self.counter.read_text()
        if self.counter.name == "cpu.stat":
            for line in text.splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
            raise TestbedError(f"{self.counter} has no usage_usec line", where=str(self.counter))
        return int(text.strip()) / 1e9

    def as_spec(self) -> dict[str, Any]:
        """An engine spec's `cpu_groups` entry; `fd` must be passed to the engine."""
        return {"host": self.host, "path": str(self.counter), "fd": self.open_counter()}


def _mkdir(ledger: Ledger, path: Path) -> None:
    ledger.add("cgroup", path=str(path))
    try:
        path.mkdir()
    except OSError as exc:
        ledger.remove("cgroup", path=str(path))
        raise TestbedError(
            f"cannot create cgroup {path}: {exc}",
            where=str(path),
            fix="secperf needs root and a writable cgroup hierarchy; "
            f"set {CGROUP_ENV}=v1 or v2 to pick the other one",
        ) from None


# The CFS period a quota is a share of (the kernel's default, 100 ms).
QUOTA_PERIOD_US = 100_000


def quota_us(fraction: float, period_us: int = QUOTA_PERIOD_US) -> int:
    """A quota as a fraction of one CPU -> microseconds per period (at least 1 ms,
    the kernel's floor)."""
    return max(1000, round(fraction * period_us))


def create(
    ledger: Ledger,
    layout: Layout,
    prefix: str,
    host: str,
    cpus: list[int] | None = None,
    quota: float | None = None,
) -> HostCgroup:
    """Make a host's group(s), recorded in the ledger first; pin it to `cpus` if given,
    and hold it to `quota` (a fraction of one CPU) if given."""
    name = f"{prefix}-{host}"
    acct = layout.cpu_root / name
    _mkdir(ledger, acct)
    group = HostCgroup(host=host, counter=acct / layout.counter_name, dirs=[acct], cpus=cpus)
    if quota is not None:
        _set_quota(ledger, layout, name, group, quota)
    if cpus is None:
        return group
    if layout.cpuset_root is None:
        raise TestbedError(
            f"cannot pin host {host}: {layout.why_no_cpuset}",
            fix="remove [testbed] pin, or enable the cpuset controller",
        )
    cpu_list = ",".join(str(c) for c in cpus)
    if layout.cpuset_root == layout.cpu_root:  # v2: the same group carries the cpuset
        (acct / "cpuset.cpus").write_text(cpu_list)
        return group
    pinned = layout.cpuset_root / name
    _mkdir(ledger, pinned)
    # v1 cpusets start empty: both cpus and mems must be set before a task may join.
    (pinned / "cpuset.mems").write_text(_read(layout.cpuset_root / "cpuset.mems").strip() or "0")
    (pinned / "cpuset.cpus").write_text(cpu_list)
    group.dirs.append(pinned)
    return group


def _set_quota(ledger: Ledger, layout: Layout, name: str, group: HostCgroup, quota: float) -> None:
    """The host's CPU quota: v1 a group in the cpu hierarchy (cfs_quota_us over
    cfs_period_us), v2 `cpu.max` on the host's own group."""
    if layout.quota_root is None:
        raise TestbedError(
            f"cannot give host {group.host} a CPU quota: {layout.why_no_quota}",
            fix="remove [testbed] cpu_quota, or mount/enable the cpu controller",
        )
    text = f"{quota_us(quota)} {QUOTA_PERIOD_US}"
    if layout.version == "v2":  # the accounting group carries it
        (group.dirs[0] / "cpu.max").write_text(text)
        group.quota = quota
        return
    path = layout.quota_root / name
    if layout.quota_root != layout.cpu_root:  # co-mounted cpu,cpuacct: the same group
        _mkdir(ledger, path)
        group.dirs.append(path)
    (path / "cpu.cfs_period_us").write_text(str(QUOTA_PERIOD_US))
    (path / "cpu.cfs_quota_us").write_text(str(quota_us(quota)))
    group.quota = quota


def remove(path: Path, timeout: float = 2.0) -> None:
    """rmdir a group of ours; its processes have been stopped, wait for them to leave it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                left = _read(path / "cgroup.procs").split()
                raise TestbedError(
                    f"cannot remove cgroup {path}: {exc}"
                    + (f" (processes still in it: {' '.join(left)})" if left else ""),
                    where=str(path),
                    fix="its ledger entry is kept: run `secperf clean` once they have ended",
                ) from None
            time.sleep(0.01)


MEMORY_ROOT_V1 = Path("/sys/fs/cgroup/memory")


@dataclass
class LimitGroup:
    """Groups that confine one daemon (inside its host's accounting): a cpuset and/or
    a v1 memory limit. The daemon joins them after its host's groups."""

    dirs: list[Path] = field(default_factory=list)

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def adopt(self, pgid: int) -> list[int]:
        """Move every process of the group `pgid` (a daemon and what it forked) into
        these groups; the pids moved. Done from here, not by the daemon's own shell:
        inside `ip netns exec` /sys is the namespace's and /sys/fs/cgroup is absent.
        The v1 memory group takes the charges of what it adopts with it."""
        moved: list[int] = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) != pgid:  # fields after the name: state, ppid, pgrp
                continue
            pid = int(stat.parent.name)
            try:
                for procs in self.procs_files():
                    Path(procs).write_text(f"{pid}\n")
            except OSError:
                continue  # it ended meanwhile
            moved.append(pid)
        return moved


def create_limits(
    ledger: Ledger,
    name: str,
    *,
    cpus: list[int] | None = None,
    memory_bytes: int | None = None,
    mounts_text: str | None = None,
) -> LimitGroup:
    """A cpuset of `cpus` and a memory limit of `memory_bytes` named `name` (which must
    start with the run prefix), recorded in the ledger; v1 hierarchies only here."""
    if mounts_text is None:
        mounts_text = MOUNTS.read_text()
    v1: dict[str, Path] = {}
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "cgroup":
            for opt in parts[3].split(","):
                if opt in ("cpuset", "memory"):
                    v1.setdefault(opt, Path(parts[1]))
    group = LimitGroup()
    if cpus is not None:
        if "cpuset" not in v1:
            raise TestbedError(
                "cannot pin a daemon to CPUs: this machine has no v1 cpuset hierarchy",
                fix="remove the cpus key, or mount the v1 cpuset controller",
            )
        root = v1["cpuset"]
        path = root / name
        _mkdir(ledger, path)
        (path / "cpuset.mems").write_text(_read(root / "cpuset.mems").strip() or "0")
        (path / "cpuset.cpus").write_text(",".join(str(c) for c in cpus))
        group.dirs.append(path)
    if memory_bytes is not None:
        if "memory" not in v1:
            raise TestbedError(
                "cannot limit a daemon's memory: this machine has no v1 memory hierarchy",
                fix="remove the memory key, or mount the v1 memory controller",
            )
        path = v1["memory"] / name
        _mkdir(ledger, path)
        # Older kernels can move a process's charges with it; newer ones (6.x)
        # refuse the knob: the daemon's start-up memory then stays with its host.
        with contextlib.suppress(OSError):
            (path / "memory.move_charge_at_immigrate").write_text("3")
        (path / "memory.limit_in_bytes").write_text(str(memory_bytes))
        group.dirs.append(path)
    return group


def remove_limits(ledger: Ledger, group: LimitGroup) -> None:
    """rmdir the groups once their processes are gone, and drop them from the ledger."""
    for path in group.dirs:
        remove(path)
        ledger.remove("cgroup", path=str(path))
    group.dirs.clear()
