"""The machine's own noise over a test, from counters that do not undercount.

`/proc/stat` is tick-sampled on kernels without IRQ_TIME_ACCOUNTING: softirq-heavy
work (a namespace testbed's forwarding) is undercounted there, so a quiet machine
looked disturbed ("accounted 104-140 %"). These counters are exact:

- each CPU's idle residency, `/sys/devices/system/cpu/cpuN/cpuidle/stateK/time`
  (µs): a CPU's busy time is the span minus its idle residency, interrupts and
  softirq included;
- every testbed host's cgroup (the hosts' processes, scheduler time, exact);
- the `ksoftirqd/N` threads of the testbed's CPUs (`/proc/PID/schedstat`, ns): the
  kernel's deferred softirq work, the testbed's packets included, so not "others";
- secperf's own process (CLOCK_PROCESS_CPUTIME_ID), where it shares the testbed's
  CPUs (the "shared" placement);
- the root cgroup's per-CPU task time (`cpuacct.usage_percpu`, ns) where cpuidle
  is absent (then interrupts taken while idle are not seen).

`others` = busy time on the testbed's CPUs − the testbed's hosts − ksoftirqd −
secperf: what other processes (and interrupts in idle context) took from the
testbed's CPUs. A test is disturbed when that is more than a share of one CPU
(`[repeat] disturbed_pct`); the runner measures such a round again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secperf.testbed.cgroups import HostCgroup

CPU_SYS = Path("/sys/devices/system/cpu")
PROC = Path("/proc")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def idle_us(cpu: int, root: Path = CPU_SYS) -> int | None:
    """A CPU's idle residency so far, summed over its cpuidle states (µs); None where
    the CPU has no cpuidle states."""
    states = sorted((root / f"cpu{cpu}" / "cpuidle").glob("state[0-9]*"))
    if not states:
        return None
    total = 0
    for state in states:
        text = _read(state / "time")
        if text is None or not text.strip().isdigit():
            return None
        total += int(text)
    return total


def ksoftirqd_pids(cpus: Sequence[int], proc: Path = PROC) -> dict[int, int]:
    """CPU -> the pid of its ksoftirqd thread (kernel threads never change pid)."""
    wanted = {f"ksoftirqd/{c}": c for c in cpus}
    found: dict[int, int] = {}
    for comm in proc.glob("[0-9]*/comm"):
        name = (_read(comm) or "").strip()
        if name in wanted:
            found[wanted[name]] = int(comm.parent.name)
    return found


def schedstat_ns(pid: int, proc: Path = PROC) -> int | None:
    """Time a task has spent on a CPU (ns), exact: /proc/PID/schedstat's first field."""
    text = _read(proc / str(pid) / "schedstat")
    if not text:
        return None
    first = text.split()[0]
    return int(first) if first.isdigit() else None


def root_task_ns(root: Path | None) -> list[int] | None:
    """The root cgroup's task time per CPU (v1 cpuacct.usage_percpu, ns), or None."""
    if root is None:
        return None
    text = _read(root / "cpuacct.usage_percpu")
    if not text:
        return None
    try:
        return [int(x) for x in text.split()]
    except ValueError:
        return None


def loadavg(proc: Path = PROC) -> float | None:
    """The 1-minute load average now."""
    text = _read(proc / "loadavg")
    try:
        return float(text.split()[0]) if text else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Reading:
    """The counters at one instant."""

    at: float  # time.monotonic()
    idle_us: dict[int, int | None]
    root_ns: list[int] | None
    groups: dict[str, float]  # host -> cgroup CPU seconds
    ksoftirqd_ns: dict[int, int]
    secperf_s: float
    load: float | None


@dataclass
class Meter:
    """Reads the machine's exact counters for one testbed: its hosts' groups, the
    CPUs it runs on (`cpus`), and whether secperf's own process shares them."""

    cpus: list[int]
    groups: Mapping[str, HostCgroup]
    secperf_shares: bool  # secperf's process may run on the testbed's CPUs
    cpuacct_root: Path | None = None
    _ksoftirqd: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._ksoftirqd = ksoftirqd_pids(self.cpus)

    def read(self) -> Reading:
        groups: dict[str, float] = {}
        for host, group in self.groups.items():
            try:
                groups[host] = group.usage_s()
            except OSError:
                continue  # removed meanwhile (teardown): the host is left out
        ksoft = {
            c: ns for c, pid in self._ksoftirqd.items() if (ns := schedstat_ns(pid)) is not None
        }
        return Reading(
            at=time.monotonic(),
            idle_us={c: idle_us(c) for c in self.cpus},
            root_ns=root_task_ns(self.cpuacct_root),
            groups=groups,
            ksoftirqd_ns=ksoft,
            secperf_s=time.process_time(),
            load=loadavg(),
        )


@dataclass(frozen=True)
class Window:
    """What happened on the testbed's CPUs between two readings (seconds)."""

    span_s: float
    cpus: list[int]
    source: str  # "cpuidle" | "cpuacct" (tasks only) | "none"
    busy_s: float | None  # on the testbed's CPUs
    per_cpu_busy_s: dict[int, float]
    testbed_s: float
    hosts: dict[str, float]
    ksoftirqd_s: float
    secperf_s: float  # secperf's own CPU, counted only where it shares the testbed's CPUs
    others_s: float | None
    load_start: float | None
    load_end: float | None

    @property
    def others_pct(self) -> float | None:
        """Other work on the testbed's CPUs, as % of one CPU over the span."""
        if self.others_s is None or self.span_s <= 0:
            return None
        return self.others_s / self.span_s * 100.0

    @property
    def accounted_pct(self) -> float | None:
        """The testbed's share of the busy time on its CPUs (exact on both sides)."""
        if not self.busy_s:
            return None
        return (self.testbed_s + self.ksoftirqd_s) / self.busy_s * 100.0

    def disturbed(self, threshold_pct: float) -> bool:
        pct = self.others_pct
        return pct is not None and pct > threshold_pct

    def record(self, threshold_pct: float) -> dict[str, Any]:
        """The `machine` record (docs/data-format.md)."""
        return {
            "type": "machine",
            "span_s": self.span_s,
            "cpus": list(self.cpus),
            "source": self.source,
            "busy_s": self.busy_s,
            "per_cpu_busy_s": {str(c): v for c, v in self.per_cpu_busy_s.items()},
            "testbed_s": self.testbed_s,
            "hosts": dict(self.hosts),
            "ksoftirqd_s": self.ksoftirqd_s,
            "secperf_s": self.secperf_s,
            "others_s": self.others_s,
            "others_pct": self.others_pct,
            "accounted_pct": self.accounted_pct,
            "load": [self.load_start, self.load_end],
            "disturbed_pct": threshold_pct,
            "disturbed": self.disturbed(threshold_pct),
        }


def window(a: Reading, b: Reading, cpus: Sequence[int], *, secperf_shares: bool = False) -> Window:
    """The testbed's CPUs between readings `a` and `b` (pure: testable on made-up
    readings)."""
    span = max(0.0, b.at - a.at)
    per_cpu: dict[int, float] = {}
    source = "cpuidle"
    for c in cpus:
        ia, ib = a.idle_us.get(c), b.idle_us.get(c)
        if ia is None or ib is None:
            source = ""
            break
        per_cpu[c] = min(span, max(0.0, span - (ib - ia) / 1e6))
    if not source and a.root_ns is not None and b.root_ns is not None:
        source = "cpuacct"
        per_cpu = {
            c: max(0.0, (b.root_ns[c] - a.root_ns[c]) / 1e9)
            for c in cpus
            if c < len(a.root_ns) and c < len(b.root_ns)
        }
    hosts = {h: max(0.0, b.groups[h] - a.groups[h]) for h in a.groups if h in b.groups}
    testbed = sum(hosts.values())
    ksoft = sum(
        max(0.0, (b.ksoftirqd_ns[c] - a.ksoftirqd_ns[c]) / 1e9)
        for c in cpus
        if c in a.ksoftirqd_ns and c in b.ksoftirqd_ns
    )
    own = max(0.0, b.secperf_s - a.secperf_s) if secperf_shares else 0.0
    busy = sum(per_cpu.values()) if source else None
    others = None if busy is None else max(0.0, busy - testbed - ksoft - own)
    return Window(
        span_s=span,
        cpus=list(cpus),
        source=source or "none",
        busy_s=busy,
        per_cpu_busy_s=per_cpu,
        testbed_s=testbed,
        hosts=hosts,
        ksoftirqd_s=ksoft,
        secperf_s=own,
        others_s=others,
        load_start=a.load,
        load_end=b.load,
    )
