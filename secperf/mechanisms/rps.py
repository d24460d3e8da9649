"""Receive packet steering (`rps`): a host's received packets processed on the CPUs
named, by the kernel's RPS (Documentation/networking/scaling.rst), not in the task
that delivered them.

Why a testbed of namespaces needs it: a veth delivers a packet to the next
namespace in the softirq of the CPU that sent it, and that softirq runs in the
sending task's time. When the sender is a user-space filter (secperf-nfq's verdict
on an NFQUEUE), the next host's whole receive (IP, its own netfilter, TCP, and the
answer it sends back through the filter's host) runs on the filter's CPU, inside
the filter's CPU quota. A real target's receive runs on the target's CPU. With
`rps` on the target, its interfaces hand every received packet to the named CPUs'
backlog, so its work leaves the filter's time (document 002: what a SYN's answer
costs the firewall; docs/studies/002.md.

Only the testbed's own hosts (namespaces, a VM): on a lab machine the interfaces
are real NICs whose steering is the machine's own configuration, not the run's.
The queues' masks are read before they are written and written back on release.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import field_validator

from secperf.errors import MechanismError
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
    interfaces,
)
from secperf.testbed.cgroups import parse_cpus
from secperf.testbed.hosts import Host
from secperf.testbed.placement import cpu_mask, write_argv

ONLINE = Path("/sys/devices/system/cpu/online")
# One shell script for every queue of one interface: print each queue's mask, then
# write the new one (`-` leaves it as it is). Runs inside the host's namespace, whose
# /sys shows its own interfaces (`ip netns exec` mounts it).
STEER = (
    'for q in /sys/class/net/"$1"/queues/rx-*/rps_cpus; do '
    'echo "$q $(cat "$q")"; [ "$2" = - ] || echo "$2" > "$q"; done'
)


class RpsSpec(MechanismSpec):
    """Steer the received packets of the host(s) `on` names to `cpus`."""

    kind: Literal["rps"] = "rps"
    cpus: str
    """The CPUs that process them: `"0"`, `"0,2"`, `"1-3"`."""

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, value: str) -> str:
        try:
            parse_cpus(value)
        except ValueError as exc:
            raise ValueError(f"cpus = {value!r}: {exc}") from None
        return value


class Rps(Mechanism):
    spec: RpsSpec

    def __init__(self, spec: RpsSpec) -> None:
        super().__init__(spec)
        # host -> [(queue's rps_cpus path, its mask before apply)]
        self._before: dict[str, list[tuple[str, str]]] = {}

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        return []  # nothing to write: apply sets the kernel's masks directly

    def _steer(self, host: Host, dev: str, mask: str) -> list[tuple[str, str]]:
        proc = host.run(["sh", "-c", STEER, "sh", dev, mask], check=False, timeout=10)
        if proc.returncode != 0:
            raise MechanismError(
                f"cannot set receive packet steering on {host.name}'s {dev}: "
                f"{(proc.stderr or proc.stdout).strip()}",
                where="mechanism rps",
                fix="this kernel needs CONFIG_RPS (Debian's have it)",
            )
        pairs = [line.rsplit(" ", 1) for line in proc.stdout.splitlines() if " " in line]
        return [(q, m) for q, m in pairs]

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        if host.ledger is None or not host.runs_commands:
            raise MechanismError(
                f"{host.name} is not a host of this machine's testbed: its interfaces' "
                "steering is its own machine's configuration",
                where="mechanism rps, key on",
                fix="set RPS on a lab machine by hand, or leave the rps entry out",
            )
        cpus = parse_cpus(self.spec.cpus)
        # the host's own view (a namespace: this machine's; a VM: the guest's)
        shown = host.run(["cat", str(ONLINE)], check=False, timeout=10).stdout.strip()
        online = parse_cpus(shown) if shown else cpus
        if not set(cpus) <= set(online):
            raise MechanismError(
                f"cpus = {self.spec.cpus!r} names CPUs {host.name} does not have online "
                f"(it has {', '.join(map(str, online))})",
                where="mechanism rps, key cpus",
                fix="name CPUs that are online there",
            )
        mask = cpu_mask(cpus)
        # kept as it grows, so that a failure halfway is written back too
        before = self._before.setdefault(host.name, [])
        for dev in interfaces(host):
            before += self._steer(host, dev, mask)
        if not before:
            raise MechanismError(
                f"{host.name} has no receive queue to steer",
                where="mechanism rps, key on",
                fix="put it on a host with interfaces",
            )
        # read back: the kernel took the mask (it refuses CPUs that are offline)
        now = {q: m for dev in interfaces(host) for q, m in self._steer(host, dev, "-")}
        want = int(mask.replace(",", ""), 16)
        wrong = [q for q, _ in before if int(now.get(q, "0").replace(",", ""), 16) != want]
        if wrong:
            raise MechanismError(
                f"the kernel kept another mask than {mask} on {', '.join(wrong)}",
                where="mechanism rps, key cpus",
                fix="name CPUs that are online",
            )

    def release(self, host: Host, ctx: MechanismContext) -> None:
        """Write each queue's mask back as it was."""
        for queue, mask in self._before.pop(host.name, []):
            host.run(write_argv(mask, queue), check=False, timeout=10)


KIND = MechanismKind(
    name="rps",
    model=RpsSpec,
    runtime=Rps,
)
