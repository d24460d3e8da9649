"""The running testbed: a Topology built into namespaces, and taken down again.

Build order (each item written to the ledger before it is made): namespaces
with a cgroup each (secperf.testbed.cgroups: CPU per host, pinning) and their
sysctls (forwarding on in forwarding hosts only, IPv6 DAD off), veth pairs born
inside their namespaces, then per namespace one `ip -batch` with loopback,
addresses, links up and the routes the graph gives (a switch gets a bridge with
its ports instead), then tbf on each shaped link and each link's offloads.

Teardown removes exactly what the ledger holds, newest first within each
kind: processes (only while pid + starttime still match), whatever else still
runs inside our namespaces, interfaces and nft tables not inside one of our
namespaces, the namespaces (which takes their veths and tables with them),
the hosts' cgroups (empty by then), then files. `clean()` does the same for
the ledgers of runs that died.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed import cgroups, links
from secperf.testbed.cgroups import HostCgroup
from secperf.testbed.external import ExternalHost
from secperf.testbed.ledger import EntryType, Ledger, ledgers, resolve_state_dir
from secperf.testbed.netns import (
    Host,
    ManagedProcess,
    NetnsHost,
    check_prefix,
    create_netns,
    delete_netns,
    kill_netns_processes,
    kill_recorded_process,
    netns_exists,
    netns_name,
    new_prefix,
    run_command,
    run_ip_batch,
    set_sysctls,
)
from secperf.testbed.ssh import SshHost, SshSpec, clean_remote
from secperf.testbed.topology import Topology
from secperf.testbed.vm import BACKENDS, VmHost, VmSettings
from secperf.tools import engine_path, remote_engine_file

# Host, ManagedProcess and NetnsHost are re-exported: callers import them from here.
__all__ = [
    "Host",
    "ManagedProcess",
    "NetnsHost",
    "Testbed",
    "clean",
    "install_teardown_handlers",
    "teardown_entries",
]

REQUIRED_TOOLS = ("ip", "tc", "sysctl")
# Ledger entries that live inside a namespace and vanish with it.
IN_NETNS: tuple[EntryType, ...] = ("nft_table", "link", "veth")


# Every host that opens TCP connections keeps a TIME_WAIT per connection it closes
# first (crr's orderly close, RFC 3511's connections): 64k source ports, and
# tcp_tw_reuse = 1 lets connect() take a port whose TIME_WAIT is over 1 s old (the
# timestamps guard the old segments), so a 10k conn/s crr runs for minutes without
# running out of ports. Per-namespace sysctls, recorded in run.json (testbed.hosts).
CONNECTION_SYSCTLS: dict[str, str | int] = {
    "net.ipv4.ip_local_port_range": "1024 65000",
    "net.ipv4.tcp_tw_reuse": 1,
}


def _sysctls(forwarding: bool) -> dict[str, str | int]:
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


# The same sysctls inside a VM host's guest (secperf.testbed.vm).
guest_sysctls = _sysctls


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


class Testbed:
    """A built topology: one namespace per host, veths, addresses, routes, shaping."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        topology: Topology,
        prefix: str,
        ledger: Ledger,
        pin: Mapping[str, list[int]] | None = None,
        remotes: Mapping[str, SshSpec] | None = None,
        stage_dirs: Sequence[Path] = (),
        external: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.topology = topology
        self.prefix = prefix
        self.ledger = ledger
        self.pin = dict(pin or {})  # role -> the CPUs its processes may run on
        # role -> its cgroup; shared with every host, filled by _build
        self.cgroups: dict[str, HostCgroup] = {}
        self.cgroup_layout: cgroups.Layout | None = None
        self._processes: list[ManagedProcess] = []
        self.remotes = dict(remotes or {})
        # External devices (name -> its interfaces by peer): hosts secperf runs nothing on.
        self.external = {name: dict(ifs) for name, ifs in (external or {}).items()}
        _check_remotes(topology, {**self.remotes, **dict.fromkeys(self.external)})
        # Hosts on other machines (the SSH backend); every other host is a namespace here.
        self._remote: dict[str, SshHost] = {}
        if self.remotes:
            engine, upload = engine_path(), remote_engine_file()
            self._remote = {
                name: SshHost(
                    spec, prefix, ledger, engine=engine, upload=upload, stage_dirs=stage_dirs
                )
                for name, spec in self.remotes.items()
            }
        self._hosts = {
            role: NetnsHost(role, netns_name(prefix, role), ledger, self._processes, self.cgroups)
            for role in topology.roles
            if role not in self.remotes and role not in self.external and not self._is_wire(role)
        }
        # External devices, and the switches of a lab of real machines (real switches:
        # nothing for secperf to run there either).
        self._external = {
            name: ExternalHost(name)
            for name in [*self.external, *(n for n in topology.names if self._is_wire(n))]
        }
        self._torn_down = False
        self._lock = threading.RLock()
        # Hosts that can also be a VM (the `vm` backend): role -> its VM; a VM that is
        # `active` is the host the rest of secperf sees (host(role) returns it).
        self.vms: dict[str, VmHost] = {}

    # -- building ------------------------------------------------------------

    @classmethod
    def build(
        cls,
        topology: Topology,
        *,
        prefix: str | None = None,
        state_dir: Path | None = None,
        pin: Mapping[str, str] | None = None,
        vm: VmSettings | None = None,
        vm_hosts: tuple[str, ...] = (),
        remotes: Mapping[str, SshSpec] | None = None,
        stage_dirs: Sequence[Path] = (),
        external: Mapping[str, Mapping[str, str]] | None = None,
    ) -> Testbed:
        """Build `topology`; if any step fails, take down what was made and raise TestbedError.

        `pin` maps host roles to CPU lists ("0", "1", "0-1"): their processes run there.
        Each host in `vm_hosts` also gets a VM (`vm` settings), booted now and attached
        with `select_backend(host, "vm")`.
        `remotes` maps host names to SSH destinations (the inventory): those hosts are
        real machines, reached over SSH, not namespaces; `stage_dirs` are directories
        whose files are copied to them when a command names one (the run's files).
        """
        _preflight()
        prefix = check_prefix(prefix) if prefix is not None else new_prefix()
        pinned = _check_pin(topology, pin or {})
        ledger = Ledger.open(prefix, state_dir)
        try:
            tb = cls(topology, prefix, ledger, pinned, remotes, stage_dirs, external)
        except BaseException:
            teardown_entries(ledger)
            raise
        try:
            tb._build()
            for role in vm_hosts:
                tb._build_vm(role, vm or VmSettings())
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

    def _is_wire(self, name: str) -> bool:
        """A switch of a lab of real hosts: a real switch, nothing for secperf to build."""
        return bool(self.remotes or self.external) and self.topology.host(name).is_switch

    def _build(self) -> None:
        topo = self.topology
        _each(list(self._remote.values()), lambda r: r.open())
        if self.remotes or self.external:
            return  # a lab of real machines: their links, addresses and routes are theirs
        self.cgroup_layout = cgroups.detect()
        for spec in topo.hosts:
            ns = self.netns(spec.name)
            create_netns(self.ledger, ns)
            set_sysctls(ns, _sysctls(spec.forwarding))
            self.cgroups[spec.name] = cgroups.create(
                self.ledger,
                self.cgroup_layout,
                self.prefix,
                spec.name,
                self.pin.get(spec.name),
            )
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
                        self.netns(role), self.ifname(link.name, role), link.rate_bps, link.queue_s
                    )
        for link in topo.links:
            links.apply_offloads(
                link.offloads or topo.offloads,
                [(self.netns(r), self.ifname(link.name, r)) for r in link.ends()],
            )

    def _build_vm(self, role: str, settings: VmSettings) -> None:
        ns_host = self._host(role)
        veths = {lk.name: self.ifname(lk.name, role) for lk in self.topology.links_of(role)}
        self.vms[role] = VmHost.create(
            role,
            ns_host,
            self.topology,
            self.prefix,
            self.ledger,
            settings,
            self.ledger.path.parent,
            veths,
        )

    def select_backend(self, role: str, backend: str) -> bool:
        """Make `role` a namespace or its VM (`backend` "namespace" or "vm"); True if
        that changed anything. The other hosts forget the old neighbour addresses."""
        if backend not in BACKENDS:
            raise TestbedError(f"unknown host backend {backend!r}", fix=f"use one of {BACKENDS}")
        vm = self.vms.get(role)
        if vm is None:
            if backend == "vm":
                raise TestbedError(
                    f"host {role} has no VM in this testbed",
                    fix="build the testbed with the host in vm_hosts",
                )
            return False
        if vm.active == (backend == "vm"):
            if vm.active and not vm.running:
                vm.boot()
            return False
        if backend == "vm":
            vm.attach()
        else:
            vm.detach()
        for other in self.topology.roles:
            if other != role:
                run_command(["ip", "-n", self.netns(other), "neigh", "flush", "all"], check=False)
        return True

    def backend(self, role: str) -> str:
        vm = self.vms.get(role)
        return "vm" if vm is not None and vm.active else "namespace"

    # -- access ----------------------------------------------------------------

    def host(self, role: str) -> Host:
        vm = self.vms.get(role)
        if vm is not None and vm.active:
            return vm
        remote = self._remote.get(role)
        if remote is not None:
            return remote
        if role in self._external:
            return self._external[role]
        return self._host(role)

    @property
    def remote_hosts(self) -> dict[str, SshHost]:
        """The hosts reached over SSH, by name (empty for a namespace testbed)."""
        return dict(self._remote)

    def _host(self, role: str) -> NetnsHost:
        try:
            return self._hosts[role]
        except KeyError:
            raise KeyError(
                f"no host {role!r} in this testbed (have {self.topology.roles})"
            ) from None

    def netns(self, role: str) -> str:
        """The namespace name of `role`, e.g. 'sp1a2b3-dut' (a remote host: its SSH
        destination)."""
        if role in self._remote:
            return f"ssh://{self._remote[role].spec.destination}"
        if role in self._external:
            return "external"
        if role not in self._hosts:
            raise KeyError(f"no host {role!r} in this testbed (have {self.topology.roles})")
        return netns_name(self.prefix, role)

    def ifname(self, link: str, role: str) -> str:
        """`role`'s interface on `link`, e.g. ifname('client-dut', 'client') == 'sp1a2b3-cd'."""
        spec = self.topology.link(link)
        topo = self.topology
        if role in self._remote:
            return self._remote[role].ifname(spec.peer(role))
        if role in self._external:
            return self.external.get(role, {}).get(spec.peer(role), "")
        return links.ifname(self.prefix, topo.tag(role), topo.tag(spec.peer(role)))

    @property
    def processes(self) -> list[ManagedProcess]:
        return list(self._processes)

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
            for proc in reversed(self._processes):
                if proc.returncode is None:
                    removed.append(f"process {proc.pid} ({proc.label})")
                proc.stop(timeout=2.0)
            for group in self.cgroups.values():
                group.close_counter()
            errors: list[str] = []

            def close(remote: SshHost) -> None:
                try:
                    removed.extend(remote.close())
                except TestbedError as exc:
                    errors.append(str(exc))  # its ledger entry stays: `secperf clean` retries

            _each(list(self._remote.values()), close)
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


def teardown_entries(ledger: Ledger) -> list[str]:
    """Remove the live entries of a ledger in the safe order; delete the ledger when empty.

    Raises TestbedError listing what could not be removed (after trying all of it).
    """
    live = ledger.live_entries()
    our_netns = {e["name"] for e in live if e["type"] == "netns"}
    removed: list[str] = []
    errors: list[str] = []

    def attempt(what: str, action: Callable[[], object]) -> None:
        try:
            action()
            removed.append(what)
        except (TestbedError, OSError) as exc:
            errors.append(f"{what}: {exc}")

    by_type: dict[str, list[dict[str, Any]]] = {}
    for entry in reversed(live):
        by_type.setdefault(entry["type"], []).append(entry)

    for e in by_type.get("process", []):

        def stop(e: dict[str, Any] = e) -> None:
            kill_recorded_process(int(e["pid"]), int(e["starttime"]), e.get("pgid"))
            ledger.remove("process", pid=e["pid"], starttime=e["starttime"])

        attempt(f"process {e['pid']} ({e.get('label', '')})", stop)

    # Anything else running in our namespaces (a daemon that left its group) is ours too.
    for ns in sorted(our_netns):
        for pid in kill_netns_processes(ns):
            removed.append(f"process {pid} (left in {ns})")

    for kind in IN_NETNS:
        for e in by_type.get(kind, []):
            ns = e.get("netns")
            if ns in our_netns:
                # Goes with its namespace; recorded as removed when that is deleted.
                continue
            attempt(f"{kind} {e.get('name')} in {ns or 'root'}", _remover(ledger, kind, e))

    for e in by_type.get("netns", []):
        name = e["name"]

        def drop(name: str = name) -> None:
            delete_netns(name)
            for kind in IN_NETNS:
                for inner in by_type.get(kind, []):
                    if inner.get("netns") == name:
                        ledger.remove(kind, **_key(kind, inner))
            ledger.remove("netns", name=name)

        attempt(f"netns {name}", drop)

    prefix = ledger.prefix
    for e in by_type.get("cgroup", []):

        def rmdir(path: str = e["path"]) -> None:
            _check_cgroup_path(path, prefix)
            cgroups.remove(Path(path))
            ledger.remove("cgroup", path=path)

        attempt(f"cgroup {e['path']}", rmdir)

    for e in by_type.get("file", []):
        attempt(f"file {e['path']}", _remover(ledger, "file", e))

    for e in by_type.get("ssh", []):

        def remote(e: dict[str, Any] = e) -> None:
            removed.extend(clean_remote(e))
            ledger.remove("ssh", name=e["name"], prefix=e["prefix"])

        attempt(f"remote host {e['name']} ({e.get('user')}@{e.get('host')})", remote)

    if errors:
        raise TestbedError(
            "teardown left things behind:\n  " + "\n  ".join(errors),
            where=str(ledger.path),
            fix="fix the cause above, then run `secperf clean`",
        )
    if not ledger.live_entries():
        ledger.delete()
    return removed


def _check_cgroup_path(path: str, prefix: str | None) -> None:
    """Only a group this run named: `<prefix>-<host>` right under a cgroup mount."""
    p = Path(path)
    if (
        not prefix
        or not p.is_absolute()
        or ".." in p.parts
        or not str(p).startswith("/sys/fs/cgroup/")
        or not p.name.startswith(f"{prefix}-")
    ):
        raise TestbedError(
            f"the ledger names cgroup {path}, which is not one of run {prefix}'s",
            fix="the ledger was edited or corrupted: remove that line by hand",
        )


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


def _check_pin(topology: Topology, pin: Mapping[str, str]) -> dict[str, list[int]]:
    """Role -> CPU numbers; a role the topology lacks or a bad CPU list is an error."""
    out: dict[str, list[int]] = {}
    have = cgroups.available_cpus()
    for role, cpus in pin.items():
        if role not in topology.roles:
            raise TestbedError(
                f"[testbed] pin names host {role!r}, which this testbed does not have",
                where=f"[testbed] pin.{role}",
                fix=f"pin one of: {', '.join(topology.roles)}",
            )
        try:
            out[role] = cgroups.parse_cpus(str(cpus), have)
        except ValueError as exc:
            raise TestbedError(
                f"[testbed] pin.{role}: {exc}", where=f"[testbed] pin.{role}", fix=str(exc)
            ) from None
    return out


def _key(kind: str, e: dict[str, Any]) -> dict[str, Any]:
    keys = {"nft_table": ("netns", "family", "name"), "link": ("netns", "name")}
    return {k: e.get(k) for k in keys.get(kind, ("netns", "name"))}


def _remover(ledger: Ledger, kind: EntryType, e: dict[str, Any]) -> Callable[[], None]:
    def remove() -> None:
        ns = e.get("netns")
        if kind == "file":
            path = Path(e["path"])
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
            ledger.remove("file", path=e["path"])
            return
        if ns is not None and not netns_exists(ns):
            ledger.remove(kind, **_key(kind, e))
            return  # its namespace is gone, so is it
        prefix = ["ip", "netns", "exec", ns] if ns else []
        if kind == "nft_table":
            argv = [*prefix, "nft", "delete", "table", e["family"], e["name"]]
        else:
            argv = ["ip", *(["-n", ns] if ns else []), "link", "del", e["name"]]
        proc = run_command(argv, check=False)
        if (
            proc.returncode != 0
            and "No such" not in proc.stderr
            and "does not exist" not in (proc.stderr)
        ):
            raise TestbedError(
                f"{' '.join(argv)}: {proc.stderr.strip()}",
                fix="the ledger keeps the entry: run `secperf clean` to retry",
            )
        ledger.remove(kind, **_key(kind, e))

    return remove


# -- signals ---------------------------------------------------------------------


@contextmanager
def install_teardown_handlers(testbed: Testbed) -> Iterator[Testbed]:
    """While active, SIGINT/SIGTERM tear the testbed down first.

    SIGINT then raises KeyboardInterrupt, SIGTERM exits with status 143. The
    previous handlers come back on exit. Signals can only be handled in the
    main thread: elsewhere this does nothing (the caller's own cleanup runs).
    """
    if threading.current_thread() is not threading.main_thread():
        yield testbed
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: FrameType | None) -> None:
        # A second Ctrl-C must not interrupt the teardown it asked for.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        try:
            testbed.teardown()
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signal.SIGTERM)

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield testbed
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# -- clean -------------------------------------------------------------------------


def clean(state_dir: Path | None = None) -> list[str]:
    """Tear down what dead runs left behind, by their ledgers only; returns what was removed.

    A ledger whose owner still runs is left alone. Nothing outside a ledger is touched.
    """
    removed: list[str] = []
    errors: list[str] = []
    for ledger in ledgers(resolve_state_dir(state_dir)):
        if ledger.owner_alive():
            continue
        try:
            removed.extend(teardown_entries(ledger))
        except TestbedError as exc:
            errors.append(str(exc))  # keep its ledger, go on with the others
            continue
        ledger.delete()
        removed.append(f"ledger {ledger.path}")
    if errors:
        raise TestbedError(
            "clean could not remove everything:\n" + "\n".join(errors),
            fix="fix the cause above and run `secperf clean` again",
        )
    return removed
