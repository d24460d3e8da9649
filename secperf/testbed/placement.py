"""Where the testbed's processes run: the CPU placement (`[testbed] cpus`).

On a namespace testbed the generator, the server and the DUT share this machine's
CPUs, and where they run decides the noise (docs/methodology.md, "Placement"):

  one     every process the testbed starts (engines, daemons, servers, a VM's qemu)
          in one cpuset on one CPU, the last one this process may use. A veth hands
          a packet to the next namespace in the sender's softirq, so the kernel's
          forwarding follows the processes onto that CPU. secperf's own process is
          moved to the other CPU(s), with the rest of the machine. A rate is then the
          CPU cost of the whole path per unit of work, not the path's capacity.
  split   the DUT (every forwarding host) on the last CPU, its interfaces' receive
          processing steered there (RPS); the end hosts on the CPU before it; secperf
          on the rest. Needs at least 3 CPUs (one each, and one for the machine).
  shared  no placement: every process may use every CPU (the scheduler decides).
  a map   { HOST = "CPU list" }: each named host's processes on those CPUs
          (the former `[testbed] pin`).

`resolve` turns the scenario's setting into a `Placement` (pure, testable
without root); the Testbed applies it (cpusets per host, RPS, secperf's affinity)
and run.json records `Placement.describe()`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed.cgroups import parse_cpus
from secperf.testbed.topology import Topology

MODES = ("one", "split", "shared")
# "split" gives the DUT a CPU, the end hosts another, and leaves one to the machine.
SPLIT_MIN_CPUS = 3

# What each placement means for the numbers (the report's header; run.json).
MEANINGS = {
    "one": (
        "every process of the testbed and the kernel work it triggers on one CPU: a rate "
        "is the CPU cost of the whole path per unit of work (with and without the "
        "mechanism), not the path's capacity"
    ),
    "split": (
        "the DUT on CPUs of its own (its interfaces' receive processing steered there), "
        "the end hosts on others: a rate is the path's capacity on this machine"
    ),
    "shared": (
        "every process free to use every CPU: rates include cross-CPU wake-ups and "
        "whatever else the machine runs"
    ),
    "map": "each named host's processes on the CPUs the scenario gives",
    "remote": "hosts on other machines: each runs on its own CPUs",
}


def cpu_list(cpus: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the form cpusets take)."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def cpu_mask(cpus: Sequence[int]) -> str:
    """[1] -> "2": the hex mask rps_cpus takes, in 32-bit words separated by commas as
    the kernel prints it (it refuses a word longer than 8 digits): [33] -> "2,00000000"."""
    bits = sum(1 << c for c in set(cpus))
    words = [f"{bits & 0xFFFFFFFF:08x}"]
    while bits >> 32:
        bits >>= 32
        words.append(f"{bits & 0xFFFFFFFF:08x}")
    words.reverse()
    words[0] = words[0].lstrip("0") or "0"
    return ",".join(words)


def write_argv(value: str, path: str) -> list[str]:
    """Write `value` into `path` (an rps_cpus file) with a shell redirect, both passed
    as arguments: a path built from an interface name (which may hold `;`, `$` or
    quotes) is never read as shell text."""
    return ["sh", "-c", 'printf "%s\\n" "$1" > "$2"', "secperf-write", value, path]


def steer_argv(ifname: str, cpus: Sequence[int]) -> list[str]:
    """Steer what `ifname` receives (its first queue, a veth's only one) to `cpus`."""
    return write_argv(cpu_mask(cpus), f"/sys/class/net/{ifname}/queues/rx-0/rps_cpus")


@dataclass(frozen=True)
class Placement:
    """A resolved placement: which CPUs each host's processes may use."""

    mode: str  # one | split | shared | map | remote
    # host -> the CPUs its processes run on; a host absent here runs anywhere
    hosts: dict[str, list[int]] = field(default_factory=dict)
    # the CPUs the testbed's work runs on: the machine's noise is measured there
    testbed_cpus: list[int] = field(default_factory=list)
    # where secperf's own process is moved while the testbed stands (None: left alone)
    secperf_cpus: list[int] | None = None
    # host -> CPUs its interfaces' receive processing is steered to (RPS)
    rps: dict[str, list[int]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def confined(self) -> bool:
        """Every process of the testbed runs on `testbed_cpus` only (one, split, a map
        that names every host): other work seen there is not the testbed's."""
        return self.mode in ("one", "split") or (self.mode == "map" and bool(self.hosts))

    def describe(self) -> dict[str, Any]:
        """What run.json records (`placement`)."""
        return {
            "mode": self.mode,
            "hosts": {h: list(c) for h, c in self.hosts.items()},
            "testbed_cpus": list(self.testbed_cpus),
            "secperf_cpus": None if self.secperf_cpus is None else list(self.secperf_cpus),
            "rps": {h: list(c) for h, c in self.rps.items()},
            "meaning": MEANINGS.get(self.mode, ""),
            "notes": list(self.notes),
        }


Setting = str | Mapping[str, str] | None


def resolve(
    setting: Setting,
    topology: Topology,
    available: set[int],
    *,
    lab: bool = False,
    where: str = "[testbed] cpus",
) -> Placement:
    """The placement `setting` gives on a machine whose usable CPUs are `available`.

    None is "shared" (no placement). A lab of real hosts takes no placement here:
    anything but "shared" is refused there, since its hosts run on their own CPUs."""
    cpus = sorted(available)
    if lab:
        if setting not in (None, "shared"):
            raise TestbedError(
                f"{where} = {setting!r}: the hosts are real machines, each on its own CPUs",
                where=where,
                fix='remove the cpus key (or write "shared") for a lab of real hosts',
            )
        return Placement("remote")
    if setting is None or setting == "shared":
        return Placement("shared", testbed_cpus=cpus)
    ends = [h.name for h in topology.hosts if not h.is_switch]
    if setting == "one":
        cpu = cpus[-1]
        rest = cpus[:-1]
        notes = () if rest else ("this machine has one CPU: secperf shares it with the testbed",)
        return Placement(
            "one",
            hosts={h.name: [cpu] for h in topology.hosts},
            testbed_cpus=[cpu],
            secperf_cpus=rest or None,
            notes=notes,
        )
    if setting == "split":
        if len(cpus) < SPLIT_MIN_CPUS:
            raise TestbedError(
                f'{where} = "split" needs at least {SPLIT_MIN_CPUS} CPUs (one for the DUT, '
                f"one for the end hosts, one for the rest of the machine); this process may "
                f"use {len(cpus)} ({cpu_list(cpus)})",
                where=where,
                fix='use cpus = "one" here (every process on one CPU), or run on a machine '
                "with more CPUs",
            )
        dut_cpu, end_cpu = cpus[-1], cpus[-2]
        forwarders = [h.name for h in topology.hosts if h.forwarding]
        split = {h: [dut_cpu] for h in forwarders}
        split.update({h: [end_cpu] for h in ends if h not in split})
        return Placement(
            "split",
            hosts=split,
            testbed_cpus=[end_cpu, dut_cpu],
            secperf_cpus=cpus[:-2],
            rps={h: [dut_cpu] for h in forwarders},
        )
    if isinstance(setting, Mapping):
        hosts: dict[str, list[int]] = {}
        for role, text in setting.items():
            if role not in topology.roles:
                raise TestbedError(
                    f"{where} names host {role!r}, which this testbed does not have",
                    where=f"{where}.{role}",
                    fix=f"name one of: {', '.join(topology.roles)}",
                )
            try:
                hosts[role] = parse_cpus(str(text), available)
            except ValueError as exc:
                raise TestbedError(
                    f"{where}.{role}: {exc}", where=f"{where}.{role}", fix=str(exc)
                ) from None
        every = all(h in hosts for h in ends)
        used = sorted({c for cs in hosts.values() for c in cs}) if every else cpus
        return Placement("map", hosts=hosts, testbed_cpus=used)
    raise TestbedError(
        f"{where} = {setting!r} is not a placement",
        where=where,
        fix='write "one", "split", "shared" or a map { HOST = "CPU list" }',
    )


def check_quota(topology: Topology, quota: Mapping[str, float], have: int) -> dict[str, float]:
    """Role -> CPU quota (a fraction of one CPU); a role the topology lacks, or a share
    beyond the `have` CPUs this machine has, is an error."""
    for role, share in quota.items():
        if role not in topology.roles:
            raise TestbedError(
                f"[testbed] cpu_quota names host {role!r}, which this testbed does not have",
                where=f"[testbed] cpu_quota.{role}",
                fix=f"name one of: {', '.join(topology.roles)}",
            )
        if not 0.01 <= share <= have:
            raise TestbedError(
                f"[testbed] cpu_quota.{role} = {share}: a share of one CPU between 0.01 and "
                f"{have} (this machine's CPUs)",
                where=f"[testbed] cpu_quota.{role}",
                fix="give e.g. 0.5 for half of one CPU",
            )
    return dict(quota)
