"""The running testbed: a Topology built into hosts, and taken down again.

One map, host name -> its `Backend` (secperf.testbed.hosts), each made by its
backend's factory (hosts/registry.py; FACTORIES here): a namespace here (the default),
a namespace that can also be a VM (`vm_hosts`), a machine reached over SSH (`remotes`), or a device
secperf runs nothing on (`external`, and the switches of a lab). Everything about
a host (its interface names, where it lives, what it can do) is asked of the host.

Build order (each item written to the ledger before it is made): every host
opens (namespaces with their sysctls and a cgroup each, secperf.testbed.cgroups:
CPU per host, the placement's cpusets (secperf.testbed.placement), a CPU quota;
SSH hosts log in, in parallel); in a namespace testbed the links follow: veth
pairs born inside their namespaces, then per namespace one `ip -batch` with
loopback, addresses, links up and the routes the graph gives (a switch gets a
bridge with its ports instead), then the shaper on each shaped link (tbf; with a
strict-priority queue for `priority_ports`, the engine's control connection,
when the build asks: secperf.testbed.links) and each link's offloads, and the
receive steering (RPS) the placement asks for; then every host starts (a VM
boots on its links). A lab of real machines has its own links, addresses and
routes. While the testbed stands, secperf's own process runs on the CPUs the
placement leaves to the machine (put back at teardown).

Teardown stops the processes the hosts started, closes every host (an SSH host
empties its remote ledger), then removes exactly what the ledger holds
(secperf.testbed.teardown, which `clean()` also runs for the ledgers of runs
that died).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed import cgroups, links
from secperf.testbed.cgroups import HostCgroup, Layout
from secperf.testbed.commands import run_command, run_ip_batch
from secperf.testbed.hosts.external import KIND as EXTERNAL
from secperf.testbed.hosts.netns import KIND as NAMESPACE
from secperf.testbed.hosts.protocol import (
    Backend,
    BuildContext,
    Host,
    HostFactory,
    ManagedProcess,
    Switch,
)
from secperf.testbed.hosts.registry import BACKENDS
from secperf.testbed.hosts.ssh import KIND as SSH
from secperf.testbed.hosts.ssh_transport import SshSpec
from secperf.testbed.hosts.vm import KIND as VM
from secperf.testbed.hosts.vm import SELECTABLE
from secperf.testbed.hosts.vmconfig import VmSettings
from secperf.testbed.ledger import Ledger
from secperf.testbed.placement import Placement, Setting, check_quota, resolve, steer_argv
from secperf.testbed.signals import install_teardown_handlers
from secperf.testbed.teardown import clean, teardown_entries
from secperf.testbed.topology import Topology

# Re-exported (callers import them from here): Host, ManagedProcess, clean, teardown_entries.
__all__ = [
    "FACTORIES",
    "Host",
    "ManagedProcess",
    "Testbed",
    "check_prefix",
    "clean",
    "install_teardown_handlers",
    "new_prefix",
    "teardown_entries",
]

REQUIRED_TOOLS = ("ip", "tc", "sysctl")
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{1,11}$")

# Each backend's factory, from the registry (hosts/registry.py; a test may add its own).
FACTORIES: dict[str, HostFactory] = {kind.name: kind.build for kind in BACKENDS}


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


def _preflight() -> None:
    if os.geteuid() != 0:
        raise TestbedError(
            "building a namespace testbed needs root",
            fix="run secperf as root (sudo), or with CAP_NET_ADMIN and CAP_SYS_ADMIN",
        )
    for tool in REQUIRED_TOOLS:
        if shutil.which(tool) is None:
            raise TestbedError(
                f"{tool} is not installed",
                fix="install iproute2 and procps (apt-get install iproute2 procps)",
            )


# A host's backend and that backend's own settings (None, VmSettings, SshSpec, interfaces).
HostPlan = tuple[str, Any]


def plan_backends(
    topology: Topology,
    *,
    backends: Mapping[str, HostPlan] | None = None,
    remotes: Mapping[str, SshSpec] | None = None,
    external: Mapping[str, Mapping[str, str]] | None = None,
    vm: VmSettings | None = None,
    vm_hosts: Sequence[str] = (),
) -> dict[str, HostPlan]:
    """Host name -> (backend, its settings), in the topology's order: `backends` as
    given (any name in FACTORIES), the inventory's SSH and external hosts, the
    switches of a lab (real ones: external), the hosts that get a VM, and a namespace
    for every other."""
    backends, remotes, external = dict(backends or {}), dict(remotes or {}), dict(external or {})
    for name, (backend, _settings) in backends.items():
        if name not in topology.names or backend not in FACTORIES:
            raise TestbedError(
                f"host {name!r} as a {backend!r} host: "
                + ("no such host" if name not in topology.names else "no such backend"),
                fix=f"hosts: {', '.join(topology.names)}; backends: {', '.join(FACTORIES)}",
            )
    _check_remotes(topology, {**remotes, **dict.fromkeys(external)})
    lab = bool(remotes or external)
    plans: dict[str, HostPlan] = {}
    for spec in topology.hosts:
        name = spec.name
        if name in backends:
            plans[name] = backends[name]
        elif name in remotes:
            plans[name] = (SSH.name, remotes[name])
        elif name in external:
            plans[name] = (EXTERNAL.name, dict(external[name]))
        elif lab and spec.is_switch:
            plans[name] = (EXTERNAL.name, {})
        elif name in vm_hosts:
            plans[name] = (VM.name, vm or VmSettings())
        else:
            plans[name] = (NAMESPACE.name, None)
    for name in vm_hosts:
        if plans.get(name, ("",))[0] != VM.name:
            raise TestbedError(
                f"host {name!r} cannot have a VM here: "
                + (
                    "the testbed has no such host" if name not in plans else "it is not a namespace"
                ),
                fix=f"give a VM to a namespace host of the testbed: {', '.join(topology.names)}",
            )
    return plans


class Testbed:
    """A built topology: one host per node of the graph, behind its backend; in a
    namespace testbed, veths, addresses, routes and shaping between them."""

    __test__ = False  # not a pytest test class

    def __init__(self, bed: BuildContext, plans: Mapping[str, HostPlan]) -> None:
        self.topology = bed.topology
        self.prefix = bed.prefix
        self.ledger = bed.ledger
        self._bed = bed
        self._hosts: dict[str, Backend] = {
            name: FACTORIES[backend](name, bed, settings)
            for name, (backend, settings) in plans.items()
        }
        # A lab of real machines: nothing is built between them (their links are
        # cables), and they open and close in parallel.
        self.lab = not all(host.local_links for host in self._hosts.values())
        if self.lab and any(host.local_links for host in self._hosts.values()):
            local = [n for n, h in self._hosts.items() if h.local_links]
            raise TestbedError(
                f"hosts {', '.join(local)} are namespaces on this machine while the others "
                "are real machines: a namespace cannot be wired to a real host",
                where="[testbed.hosts]",
                fix="put every host of the graph on real machines (or none of them)",
            )
        self._torn_down = False
        self._lock = threading.RLock()
        self.placement = Placement("shared")
        self._affinity: set[int] | None = None  # secperf's own, to put back
        # TCP ports first on shaped links (Testbed.build); reshape() keeps them first.
        self.priority_ports: tuple[int, ...] = ()

    # -- building ------------------------------------------------------------

    @classmethod
    def build(
        cls,
        topology: Topology,
        *,
        prefix: str | None = None,
        state_dir: Path | None = None,
        pin: Mapping[str, str] | None = None,
        cpus: Setting = None,
        cpu_quota: Mapping[str, float] | None = None,
        vm: VmSettings | None = None,
        vm_hosts: tuple[str, ...] = (),
        remotes: Mapping[str, SshSpec] | None = None,
        stage_dirs: Sequence[Path] = (),
        external: Mapping[str, Mapping[str, str]] | None = None,
        backends: Mapping[str, HostPlan] | None = None,
        priority_ports: Sequence[int] = (),
    ) -> Testbed:
        """Build `topology`; if any step fails, take down what was made and raise TestbedError.

        `cpus` is the placement ("one", "split", "shared" or a map host -> CPU list;
        None: shared), secperf.testbed.placement; `pin` is the map form's older name.
        `cpu_quota` maps host roles to a CPU quota, a fraction of one CPU.
        Each host in `vm_hosts` also gets a VM (`vm` settings), booted now and attached
        with `select_backend(host, "vm")`.
        `remotes` maps host names to SSH destinations (the inventory): those hosts are
        real machines, reached over SSH, not namespaces; `stage_dirs` are directories
        whose files are copied to them when a command names one (the run's files).
        `external` maps host names to their interfaces by peer: devices secperf runs
        nothing on. `backends` maps host names to (backend, its settings) for any
        backend in FACTORIES, before all of the above. `priority_ports`: TCP ports whose
        packets go first on every shaped link (a run's engine control port), so a load
        that fills a link cannot starve them (secperf.testbed.links).
        """
        _preflight()
        prefix = check_prefix(prefix) if prefix is not None else new_prefix()
        if pin and cpus is not None:
            raise TestbedError(
                "both pin and cpus place the hosts",
                where="[testbed] pin",
                fix="keep cpus (pin is its older name for the map form)",
            )
        setting: Setting = dict(pin) if pin else cpus
        quota = check_quota(topology, cpu_quota or {}, len(cgroups.available_cpus()))
        plans = plan_backends(
            topology,
            backends=backends,
            remotes=remotes,
            external=external,
            vm=vm,
            vm_hosts=vm_hosts,
        )
        lab = any(b in BACKENDS and BACKENDS.get(b).lab for b, _ in plans.values())
        placement = resolve(
            setting,
            topology,
            cgroups.available_cpus(),
            lab=lab,
            where="[testbed] pin" if pin else "[testbed] cpus",
        )
        if quota and lab:
            raise TestbedError(
                "[testbed] cpu_quota holds namespace hosts only; these hosts are real machines",
                where="[testbed] cpu_quota",
                fix="remove cpu_quota, or limit the daemon on the real host yourself",
            )
        ledger = Ledger.open(prefix, state_dir)
        try:
            bed = BuildContext(
                topology=topology,
                prefix=prefix,
                ledger=ledger,
                pin=dict(placement.hosts),
                quota=quota,
                stage_dirs=tuple(stage_dirs),
            )
            tb = cls(bed, plans)
            tb.placement = placement
            tb.priority_ports = tuple(priority_ports)
        except BaseException:
            teardown_entries(ledger)
            raise
        try:
            tb._build()
        except BaseException as exc:
            try:
                tb.teardown()
            except TestbedError as cleanup_exc:
                exc.add_note(f"teardown after the failed build also failed: {cleanup_exc}")
            if isinstance(exc, TestbedError | KeyboardInterrupt | SystemExit):
                raise
            raise TestbedError(
                f"building the testbed failed: {exc!r}",
                where=str(ledger.path),
                fix="what was built is torn down; `secperf doctor` checks the tools",
            ) from exc
        return tb

    def _each_host(self, action: Callable[[Backend], object]) -> None:
        """`action` on every host: at once in a lab (remote hosts are independent),
        one after the other in a namespace testbed."""
        hosts = list(self._hosts.values())
        if self.lab:
            _each(hosts, action)
        else:
            for host in hosts:
                action(host)

    def _build(self) -> None:
        self._move_secperf()
        self._each_host(lambda h: h.open())
        if not self.lab:
            self._wire()
            self._steer()
        self._each_host(lambda h: h.start())

    def _move_secperf(self) -> None:
        """secperf's own process onto the CPUs the placement leaves to the machine (its
        threads and the commands it runs follow; the hosts' processes join their
        cpusets). Put back at teardown."""
        cpus = self.placement.secperf_cpus
        if cpus is None:
            return
        self._affinity = set(os.sched_getaffinity(0))
        os.sched_setaffinity(0, set(cpus))

    def _steer(self) -> None:
        """Receive packet steering (RPS): each steered host's interfaces hand what
        they receive to its CPUs, so its forwarding runs there and not in the
        sender's softirq (the placement's `rps`; a namespace is removed with its
        interfaces, so nothing is put back)."""
        for role, cpus in self.placement.rps.items():
            for link in self.topology.links_of(role):
                self.host(role).run(steer_argv(self.ifname(link.name, role), cpus))

    def _wire(self) -> None:
        """The links between namespaces: veths, addresses and routes, shaping, offloads."""
        topo = self.topology
        for link in topo.links:
            links.create_veth(
                self.ledger,
                self.ifname(link.name, link.a),
                self.netns(link.a),
                self.ifname(link.name, link.b),
                self.netns(link.b),
            )
        for spec in topo.hosts:
            role = spec.name
            names = {lk.name: self.ifname(lk.name, role) for lk in topo.links_of(role)}
            if spec.is_switch:
                bridge = f"{self.prefix}-{links.BRIDGE}"
                run_ip_batch(self.netns(role), links.bridge_lines(bridge, list(names.values())))
            else:
                run_ip_batch(self.netns(role), links.host_ip_lines(topo, role, names))
        for link in topo.links:
            if link.rate_bps is not None:
                for role in link.ends():
                    links.shape(
                        self.netns(role),
                        self.ifname(link.name, role),
                        link.rate_bps,
                        link.queue_s,
                        self.priority_ports,
                    )
        for link in topo.links:
            links.apply_offloads(
                link.offloads or topo.offloads,
                [(self.netns(r), self.ifname(link.name, r)) for r in link.ends()],
            )

    # -- backends that switch (a namespace or its VM) ----------------------------------

    @property
    def switchable(self) -> dict[str, Switch]:
        """The hosts that can change backend between variants, by name (a view of the
        one map: empty unless a host was built with a VM)."""
        return {name: host.switch for name, host in self._hosts.items() if host.switch is not None}

    def select_backend(self, role: str, backend: str) -> bool:
        """Make `role` a namespace or its VM (`backend` "namespace" or "vm"); True if
        that changed anything. The other hosts forget the old neighbour addresses."""
        if backend not in SELECTABLE:
            raise TestbedError(f"unknown host backend {backend!r}", fix=f"use one of {SELECTABLE}")
        switch = self.host(role).switch
        if switch is None:
            if backend == VM.name:
                raise TestbedError(
                    f"host {role} has no VM in this testbed",
                    fix="build the testbed with the host in vm_hosts",
                )
            return False
        if not switch.select(backend):
            return False
        for other in self.topology.roles:
            if other != role:
                run_command(["ip", "-n", self.netns(other), "neigh", "flush", "all"], check=False)
        return True

    def backend(self, role: str) -> str:
        switch = self.host(role).switch
        return NAMESPACE.name if switch is None else switch.selected

    # -- access ----------------------------------------------------------------

    def host(self, role: str) -> Host:
        return self._backend(role)

    @property
    def hosts(self) -> Mapping[str, Host]:
        """Every host, by name (read only)."""
        return dict(self._hosts)

    def _backend(self, role: str) -> Backend:
        try:
            return self._hosts[role]
        except KeyError:
            raise KeyError(
                f"no host {role!r} in this testbed (have {self.topology.roles})"
            ) from None

    def netns(self, role: str) -> str:
        """Where `role` lives: its namespace's name, e.g. 'sp1a2b3-dut' (a remote host:
        ssh://its destination; an external device: "external")."""
        return self._backend(role).location

    def ifname(self, link: str, role: str) -> str:
        """`role`'s interface on `link`, e.g. ifname('client-dut', 'client') == 'sp1a2b3-cd'."""
        return self._backend(role).ifname(self.topology.link(link).peer(role))

    def spawn_here(
        self,
        argv: Sequence[str],
        *,
        stdout: Any = subprocess.DEVNULL,
        stderr: Any = subprocess.DEVNULL,
        label: str = "",
    ) -> ManagedProcess:
        """Start a process of the run's own in this machine's root namespace (a tracer:
        it observes the kernel, it is no host's), on secperf's CPUs, recorded in the
        ledger and stopped at teardown like the hosts' processes."""
        try:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                text=True,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise TestbedError(f"program not found: {argv[0]}", fix="install it") from None
        proc = ManagedProcess(popen, ledger=self.ledger, label=label or argv[0], host="root")
        self.ledger.add(
            "process",
            pid=proc.pid,
            starttime=proc.starttime,
            pgid=proc.pid,
            label=proc.label,
            host="root",
            argv=list(argv),
        )
        self._bed.processes.append(proc)
        return proc

    @property
    def processes(self) -> list[ManagedProcess]:
        return list(self._bed.processes)

    @property
    def pin(self) -> dict[str, list[int]]:
        """Host -> the CPUs its processes may run on."""
        return self._bed.pin

    @property
    def cgroups(self) -> dict[str, HostCgroup]:
        """Host -> its cgroup (namespace hosts)."""
        return self._bed.cgroups

    @property
    def cgroup_layout(self) -> Layout | None:
        return self._bed.cgroup_layout

    # -- teardown ----------------------------------------------------------------

    def teardown(self) -> list[str]:
        """Remove everything the ledger holds (idempotent); returns what was removed.

        The ledger file goes last, and only if everything in it is gone, so that
        `secperf clean` can finish a teardown that failed.
        """
        with self._lock:
            if self._torn_down:
                return []
            removed: list[str] = []
            for proc in reversed(self._bed.processes):
                if proc.returncode is None:
                    removed.append(f"process {proc.pid} ({proc.label})")
                proc.stop(timeout=2.0)
            for group in self.cgroups.values():
                group.close_counter()
            if self._affinity is not None:
                os.sched_setaffinity(0, self._affinity)
                self._affinity = None
            errors: list[str] = []

            def close(host: Backend) -> None:
                try:
                    removed.extend(host.close())
                except TestbedError as exc:
                    errors.append(str(exc))  # its ledger entry stays: `secperf clean` retries

            self._each_host(close)
            removed += teardown_entries(self.ledger)
            self._torn_down = True
            if errors:
                raise TestbedError(
                    "teardown left things on remote hosts:\n  " + "\n  ".join(errors),
                    fix="fix the cause above (the host unreachable?), then run `secperf clean`",
                )
            return removed

    def __enter__(self) -> Testbed:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.teardown()

    def __repr__(self) -> str:
        return f"Testbed(prefix={self.prefix!r}, roles={self.topology.roles})"


def _each(items: Sequence[Any], action: Callable[[Any], object]) -> None:
    """`action` on every item at once, one thread each (remote hosts are independent:
    a lab of N hosts connects and cleans up in the time of one); the first error is
    raised once all have finished."""
    if len(items) <= 1:
        for item in items:
            action(item)
        return
    failures: list[BaseException] = []

    def work(item: Any) -> None:
        try:
            action(item)
        except BaseException as exc:  # handed to the caller below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(item,), daemon=True) for item in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]


def _check_remotes(topology: Topology, remotes: Mapping[str, SshSpec | None]) -> None:
    """A lab is all real hosts or all namespaces: a namespace here has no wire to a
    machine there (and no testbed host links into the root namespace)."""
    if not remotes:
        return
    for name in remotes:
        if name not in topology.names:
            raise TestbedError(
                f"the inventory names host {name!r}, which the testbed does not have",
                where=f"[testbed.hosts.{name}]",
                fix=f"name one of: {', '.join(topology.names)}",
            )
    local = [h.name for h in topology.hosts if h.name not in remotes and not h.is_switch]
    if local:
        raise TestbedError(
            f"hosts {', '.join(local)} are namespaces on this machine while "
            f"{', '.join(remotes)} are remote: a namespace cannot be wired to a real host",
            where="[testbed.hosts]",
            fix='give every host of the graph backend = "ssh" (or none of them)',
        )
    for link in topology.links:
        if link.rate_bps is not None:
            raise TestbedError(
                f"link {link.name} has a rate, and its ends are real hosts: secperf shapes "
                "namespace links only",
                where="[testbed] link_rate / [topology] links",
                fix="drop the rate; shape the real link yourself and say so in the scenario's "
                "description",
            )
