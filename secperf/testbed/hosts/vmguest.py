"""A qemu guest in place of a namespace host (`VmHost`, the Host protocol), held by
the `vm` backend (hosts/vm.py), which selects it or its namespace per variant.

The guest (secperf.testbed.hosts.vmimage: a Debian cloud kernel, busybox, nftables,
iptables, conntrack, iproute2, secperf-nfq) sits where a namespace host would:
its virtio NICs attach to the testbed's links through tap devices that live in
the host's own namespace (the one that holds the links' ends; never the root
namespace). For each of the host's links the namespace has a tap and a bridge
(`<prefix>-V<n>`, `<prefix>-B<n>`); while the VM is the active backend the link's
veth end is a port of that bridge with no address, so frames go straight to and
from the guest, which carries the addresses and routes the topology gives the host
(the same `ip -batch` lines as the namespace). Switching back takes the veth out of
the bridge and gives the namespace its addresses again; both sides' neighbours
forget the old MAC addresses. A third tap, unbridged, is the management link: the
guest's agent on IPv6 link-local fe80::2 (secperf.testbed.hosts.vmagent).

qemu runs in the host's namespace and joins its cgroup (it is started with that
namespace host's `spawn`, so it is in the ledger too): its threads are the host's
CPU as the engine counts it. From inside, the guest's own /proc/stat is read
before and after each test (`proc_stat`).

Acceleration: "kvm", "tcg", or "auto" (KVM when /dev/kvm opens and the guest's
agent answers within `kvm_timeout`, else TCG, with the reason recorded). Every
step is bounded and a time-out names it: image build, boot, agent, network up.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed.commands import run_command
from secperf.testbed.hosts import vmagent
from secperf.testbed.hosts.netns import NetnsHost, host_sysctls
from secperf.testbed.hosts.protocol import (
    InterfaceCounters,
    ManagedProcess,
    Power,
    Redirect,
    Switch,
    parse_ip_stats,
)
from secperf.testbed.hosts.vmconfig import (
    VmSettings,
    bridge_name,
    carried_files,
    data_mac,
    guest_argv,
    kvm_usable,
    parse_proc_stat,
    qemu_argv,
    tap_name,
)
from secperf.testbed.hosts.vmimage import (
    AGENT_PORT,
    GUEST_MGMT_ADDR,
    HOST_MGMT_ADDR,
    MGMT_MAC,
    READY_LINE,
    Image,
    ensure_image,
)
from secperf.testbed.ledger import Ledger
from secperf.testbed.links import host_ip_lines
from secperf.testbed.topology import Topology
from secperf.tools import nfq_path


@dataclass
class GuestState:
    """What is known about the running guest (recorded in run.json)."""

    accel: str = ""
    accel_note: str = ""
    boot_s: float | None = None
    boots: int = 0
    image: dict[str, Any] = field(default_factory=dict)
    nics: dict[str, str] = field(default_factory=dict)  # link name -> guest interface


class VmHost:
    """A testbed host that is a VM (the `Host` protocol); made by `VmHost.create`, and
    selected by its `NetnsOrVmHost`."""

    def __init__(
        self,
        role: str,
        ns_host: NetnsHost,
        topology: Topology,
        prefix: str,
        ledger: Ledger,
        settings: VmSettings,
        state_dir: Path,
        veths: dict[str, str],
    ) -> None:
        self.role = role
        self.ns = ns_host  # the namespace that holds the links, the taps and qemu
        self.topology = topology
        self.prefix = prefix
        self._ledger = ledger
        self.settings = settings
        self.state = GuestState()
        self.serial_log = state_dir / f"{prefix}-{role}.serial.log"
        self.veths = veths  # link name -> the namespace's veth end on it
        self.links = [lk.name for lk in topology.links_of(role)]
        self.mgmt_tap = tap_name(prefix, "m")
        self._qemu: ManagedProcess | None = None
        self._image: Image | None = None
        self._relays: list[ManagedProcess] = []
        self._from_guest: set[str] = set()
        self._forced_tcg = ""

    # -- building ------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        role: str,
        ns_host: NetnsHost,
        topology: Topology,
        prefix: str,
        ledger: Ledger,
        settings: VmSettings,
        state_dir: Path,
        veths: dict[str, str],
    ) -> VmHost:
        """Image (cached or built), taps and bridges, boot, agent, guest network."""
        vm = cls(role, ns_host, topology, prefix, ledger, settings, state_dir, veths)
        t0 = time.monotonic()
        vm._image = ensure_image(Path(nfq_path()), timeout=settings.build_timeout)
        vm.state.image = {
            "digest": vm._image.digest,
            "path": str(vm._image.path),
            "kernel": vm._image.manifest.get("kernel"),
            "ready_s": round(time.monotonic() - t0, 2),
        }
        vm._make_taps()
        vm.boot()
        return vm

    def _ns_batch(self, lines: list[str]) -> None:
        run_command(["ip", "-n", self.ns.netns, "-batch", "-"], input="\n".join(lines) + "\n")

    def _make_taps(self) -> None:
        ns = self.ns.netns
        names = [self.mgmt_tap] + [tap_name(self.prefix, i) for i in range(len(self.links))]
        names += [bridge_name(self.prefix, i) for i in range(len(self.links))]
        for name in names:
            self._ledger.add("link", name=name, netns=ns)
        lines = [f"tuntap add dev {self.mgmt_tap} mode tap"]
        for i in range(len(self.links)):
            tap, br = tap_name(self.prefix, i), bridge_name(self.prefix, i)
            lines += [
                f"tuntap add dev {tap} mode tap",
                f"link add {br} type bridge stp_state 0 forward_delay 0",
                f"link set {tap} master {br}",
                f"link set {tap} up",
                f"link set {br} up",
            ]
        self.ns.run(
            ["sysctl", "-q", "-w", f"net.ipv6.conf.{self.mgmt_tap}.accept_dad=0"], check=False
        )
        lines += [
            f"link set {self.mgmt_tap} up",
            f"addr add {HOST_MGMT_ADDR}/64 dev {self.mgmt_tap} nodad",
        ]
        try:
            self._ns_batch(lines)
        except TestbedError as exc:
            raise TestbedError(
                f"VM network setup (taps and bridges in {ns}) failed: {exc.message}",
                where=ns,
                fix="the kernel needs TUN/TAP and bridges; `secperf clean` removes leftovers",
            ) from None

    def _taps(self) -> list[tuple[str, str]]:
        return [(self.mgmt_tap, MGMT_MAC)] + [
            (tap_name(self.prefix, i), data_mac(i)) for i in range(len(self.links))
        ]

    # -- boot and power ----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._qemu is not None and self._qemu.poll() is None

    def boot(self) -> None:
        """Start qemu and wait for the agent; then configure the guest's network."""
        wanted = self.settings.accel
        if wanted == "tcg" or self._forced_tcg:
            self._boot_with("tcg", self.settings.boot_timeout)
            self.state.accel_note = self._forced_tcg or "tcg asked for"
        elif wanted == "kvm":
            why = kvm_usable()
            if why:
                raise TestbedError(
                    f'VM boot: accel = "kvm" but {why}',
                    fix='use accel = "auto" or "tcg" in [testbed.vm]',
                )
            self._boot_with("kvm", self.settings.boot_timeout)
            self.state.accel_note = "kvm asked for"
        else:
            why = kvm_usable()
            if why is None:
                try:
                    self._boot_with("kvm", self.settings.kvm_timeout)
                    self.state.accel_note = "auto: kvm booted the guest"
                except TestbedError as exc:
                    why = f"kvm did not boot the guest ({exc.message.splitlines()[0]})"
            if why is not None:
                self._forced_tcg = f"auto: {why}; fell back to tcg (an emulator)"
                self._boot_with("tcg", self.settings.boot_timeout)
                self.state.accel_note = self._forced_tcg
        self._configure_network()

    def _boot_with(self, accel: str, timeout: float) -> None:
        assert self._image is not None
        if not self.serial_log.exists():
            self._ledger.add("file", path=str(self.serial_log))
        self.serial_log.write_text("")
        argv = qemu_argv(
            image=self._image,
            accel=accel,
            settings=self.settings,
            serial_log=self.serial_log,
            taps=self._taps(),
            name=f"secperf-{self.prefix}-{self.role}",
        )
        qemu_err = self.serial_log.with_suffix(".qemu.log")
        if not qemu_err.exists():
            self._ledger.add("file", path=str(qemu_err))
        t0 = time.monotonic()
        with qemu_err.open("w") as err:
            self._qemu = self.ns.spawn(argv, stdout=err, stderr=err, label=f"qemu-{accel}")
        deadline = t0 + timeout
        step = "boot"
        try:
            while True:
                if self._qemu.poll() is not None:
                    raise TestbedError(
                        f"VM boot ({accel}): qemu exited with status {self._qemu.returncode}: "
                        f"{_tail(qemu_err) or _tail(self.serial_log) or 'no output'}",
                        where=str(qemu_err),
                        fix="install qemu-system-x86 (scripts/setup.sh); read the log above",
                    )
                if READY_LINE in _text(self.serial_log):
                    step = "agent"
                    try:
                        self._run_script(vmagent.script_for(["true"]), 10.0)
                        break
                    except vmagent.AgentError:
                        pass
                if time.monotonic() > deadline:
                    raise TestbedError(
                        f"VM {step} ({accel}) timed out after {timeout:.0f} s: "
                        + (
                            "the guest's agent does not answer"
                            if step == "agent"
                            else "the guest did not come up"
                        )
                        + f"; console: {_tail(self.serial_log) or 'empty'}",
                        where=str(self.serial_log),
                        fix="raise [testbed.vm] boot_timeout on a slow machine; "
                        'with accel = "kvm" check that KVM works here',
                    )
                time.sleep(0.1)
        except BaseException:
            self._qemu.stop(timeout=2.0)
            self._qemu = None
            raise
        self.state.accel = accel
        self.state.boot_s = round(time.monotonic() - t0, 2)
        self.state.boots += 1

    def power_off(self) -> None:
        """Stop the VM (qemu ends; the guest and whatever it ran are gone)."""
        for relay in self._relays:
            relay.stop(timeout=1.0)
        self._relays.clear()
        if self._qemu is not None:
            self._qemu.stop(timeout=5.0)
            self._qemu = None

    def _configure_network(self) -> None:
        """Name the guest's NICs by MAC, then the host's sysctls, addresses, routes."""
        try:
            out = self.run(
                ["sh", "-c", "for d in /sys/class/net/*; do echo ${d##*/} $(cat $d/address); done"]
            ).stdout
            by_mac = {mac: name for name, mac in (line.split() for line in out.splitlines())}
            nics = {}
            for i, link in enumerate(self.links):
                mac = data_mac(i)
                if mac not in by_mac:
                    raise TestbedError(f"the guest has no NIC with MAC {mac} (link {link})")
                nics[link] = by_mac[mac]
            self.state.nics = nics
            sysctls = host_sysctls(self.topology.host(self.role).forwarding)
            self.run(["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in sysctls.items())])
            self.run(
                ["ip", "-batch", "-"],
                input="\n".join(host_ip_lines(self.topology, self.role, nics)) + "\n",
            )
        except (TestbedError, vmagent.AgentError) as exc:
            raise TestbedError(
                f"VM network up failed: {exc}",
                where=str(self.serial_log),
                fix="see the guest console log; `secperf clean` removes leftovers",
            ) from None

    # -- switching the host's backend -----------------------------------------------------------

    def attach(self) -> None:
        """Make the VM the host on its links: the namespace's veth ends join the bridges
        (without addresses), the neighbours forget the namespace's MAC addresses."""
        if not self.running:
            self.boot()
        lines = []
        for i, link in enumerate(self.links):
            veth = self.veths[link]
            lines += [
                f"addr flush dev {veth}",
                f"link set {veth} master {bridge_name(self.prefix, i)}",
            ]
        self._ns_batch(lines)

    def detach(self) -> None:
        """Give the links back to the namespace: out of the bridges, addresses and routes
        as the topology has them (links down and up: IPv6 link-local addresses return)."""
        lines = []
        for link in self.links:
            veth = self.veths[link]
            lines += [f"link set {veth} nomaster", f"link set {veth} down"]
        lines += host_ip_lines(self.topology, self.role, self.veths)
        self._ns_batch(lines)

    # -- the host interface ------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.ns.netns}-vm"

    @property
    def cpu_groups(self) -> list[dict[str, Any]]:
        return self.ns.cpu_groups

    @property
    def ledger(self) -> Ledger:
        return self._ledger

    @property
    def runs_commands(self) -> bool:
        return True

    @property
    def shares_files(self) -> bool:
        return False  # the guest has a file system of its own

    @property
    def power(self) -> Power | None:
        return VmPower(self)

    @property
    def switch(self) -> Switch | None:
        return None  # the NetnsOrVmHost that holds it switches

    @property
    def programs(self) -> dict[str, str]:
        manifest = self._image.manifest if self._image is not None else {}
        progs = manifest.get("programs")
        return {str(k): str(v) for k, v in progs.items()} if isinstance(progs, dict) else {}

    def _run_script(self, script: str, timeout: float) -> vmagent.Answer:
        sock = vmagent.connect_in_netns(
            self.ns.netns, f"{GUEST_MGMT_ADDR}%{self.mgmt_tap}", AGENT_PORT, min(timeout, 10.0)
        )
        data = script.encode()
        header = vmagent.request_line("run", len(data), int(timeout) + 1)
        return vmagent.exchange(sock, header, data, timeout + 10.0)

    def put_file(self, host_path: str, guest_path: str | None = None) -> None:
        data = Path(host_path).read_bytes()
        mode = oct(Path(host_path).stat().st_mode & 0o777)[2:]
        sock = vmagent.connect_in_netns(
            self.ns.netns, f"{GUEST_MGMT_ADDR}%{self.mgmt_tap}", AGENT_PORT, 10.0
        )
        header = vmagent.request_line("put", vmagent.b64(guest_path or host_path), len(data), mode)
        ans = vmagent.exchange(sock, header, data, 30.0)
        if ans.rc != 0:
            raise TestbedError(f"copying {host_path} into the VM failed")

    def get_file(self, guest_path: str) -> bytes | None:
        sock = vmagent.connect_in_netns(
            self.ns.netns, f"{GUEST_MGMT_ADDR}%{self.mgmt_tap}", AGENT_PORT, 10.0
        )
        ans = vmagent.exchange(
            sock, vmagent.request_line("get", vmagent.b64(guest_path)), b"", 30.0
        )
        return ans.out if ans.rc == 0 else None

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float = 30.0,
    ) -> subprocess.CompletedProcess[str]:
        if not self.running:
            raise TestbedError(
                f"the VM of host {self.role} is not running: cannot run {shlex.join(argv)}",
                fix="it was stopped; the failed-closed check restarts it",
            )
        carry_in, _ = carried_files(argv)
        for path in carry_in:
            self.put_file(path)
        gargv = guest_argv(argv, self.programs)
        cmd = shlex.join(gargv)
        try:
            ans = self._run_script(vmagent.script_for(gargv, input), timeout)
        except vmagent.AgentError as exc:
            raise TestbedError(
                f"in the VM of host {self.role}: {cmd}: {exc}",
                where=str(self.serial_log),
                fix="the guest may have died: see its console log",
            ) from None
        out = ans.out.decode(errors="replace")
        err = ans.err.decode(errors="replace")
        if check and ans.rc != 0:
            raise TestbedError(
                f"command failed in the VM (exit {ans.rc}): {cmd}\n  {(err or out).strip()}",
                where=f"{self.name}: {cmd}",
                fix="read the command's error above",
            )
        return subprocess.CompletedProcess(list(argv), ans.rc, out, err)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        stdout: Redirect = subprocess.DEVNULL,
        stderr: Redirect = subprocess.DEVNULL,
        label: str = "",
        pass_fds: Sequence[int] = (),
    ) -> ManagedProcess:
        """Start a program in the guest; a relay process on the host stands for it (its
        stdout is the program's; stopping it stops the program; the program's stderr
        and the files it wrote come back to the host when it is stopped)."""
        if pass_fds:
            raise TestbedError(
                f"cannot hand file descriptors to a program in the VM of host {self.role}",
                fix="run that program on a namespace host",
            )
        if not self.running:
            raise TestbedError(f"the VM of host {self.role} is not running", fix="boot it first")
        carry_in, carry_out = carried_files(argv)
        # A file that came out of the guest before (a daemon's log, appended to by each
        # start) is the guest's: it goes on coming out, never back in.
        carry_out += [p for p in carry_in if p in self._from_guest]
        carry_in = [p for p in carry_in if p not in self._from_guest]
        self._from_guest.update(carry_out)
        for path in carry_in:
            self.put_file(path)
        gargv = guest_argv(argv, self.programs)
        err_path = getattr(stderr, "name", None)
        # The directories of the files it will write exist in the guest too.
        dirs = sorted({str(Path(p).parent) for p in carry_out})
        prelude = f"mkdir -p {shlex.join(dirs)}\n" if dirs else ""
        err_guest = f"/tmp/secperf-stderr-{len(self._relays)}-{time.monotonic_ns()}"
        relay = [
            sys.executable,
            vmagent.__file__,
            "relay",
            "-",
            f"{GUEST_MGMT_ADDR}%{self.mgmt_tap}",
            str(AGENT_PORT),
            vmagent.b64(prelude + vmagent.script_for(gargv)),
            err_guest if isinstance(err_path, str) else "-",
        ]
        proc = self.ns.spawn(relay, stdout=stdout, stderr=stderr, label=label or gargv[0])

        def carry_back() -> None:
            # best effort: a VM that was stopped or died keeps its files
            with contextlib.suppress(vmagent.AgentError, TestbedError, OSError):
                fetch()

        def fetch() -> None:
            if not self.running:
                return
            for path in carry_out:
                data = self.get_file(path)
                if data is not None:
                    Path(path).write_bytes(data)
            if isinstance(err_path, str) and Path(err_path).parent.is_dir():
                data = self.get_file(err_guest)
                if data:
                    with open(err_path, "ab") as f:
                        f.write(data)

        proc.after_stop.append(carry_back)
        self._relays.append(proc)
        return proc

    def interface_counters(self) -> dict[str, InterfaceCounters]:
        return parse_ip_stats(self.run(["ip", "-s", "-j", "link", "show"]).stdout)

    def cpu_seconds(self) -> float | None:
        """The host's cgroup (qemu's threads, the relays): the VM as this machine sees it."""
        return self.ns.cpu_seconds()

    def memory_bytes(self) -> int:
        return self.ns.memory_bytes()

    def stop_started(self) -> list[str]:
        """Stop the programs started in the guest (not the VM itself)."""
        stopped = []
        for proc in reversed(self._relays):
            if proc.returncode is None:
                proc.stop(timeout=2.0)
                stopped.append(f"process {proc.pid} ({proc.label}, in the VM)")
        self._relays = [p for p in self._relays if p.returncode is None]
        return stopped

    def track_file(self, path: str) -> None:
        self.ns.track_file(path)

    def track_setting(self, path: str, value: str) -> None:
        pass  # the guest's kernel goes with the VM

    def proc_stat(self) -> dict[str, int]:
        """The guest's own /proc/stat (aggregate cpu line, USER_HZ ticks)."""
        return parse_proc_stat(self.run(["cat", "/proc/stat"]).stdout)

    def describe(self) -> dict[str, Any]:
        """What ran, for run.json: accel (and why), CPUs, memory, image, boot time."""
        return {
            "backend": "vm",
            "accel": self.state.accel,
            "accel_note": self.state.accel_note,
            "cpus": self.settings.cpus,
            "memory_mb": self.settings.memory_mb,
            "boot_s": self.state.boot_s,
            "boots": self.state.boots,
            "image": self.state.image,
            "guest_nics": self.state.nics,
        }

    def __repr__(self) -> str:
        return f"VmHost({self.role!r}, netns={self.ns.netns!r}, accel={self.state.accel!r})"


class VmPower:
    """A VM's power switch (the `Power` capability): qemu ends, then boots again."""

    def __init__(self, vm: VmHost) -> None:
        self._vm = vm

    def off(self) -> None:
        self._vm.power_off()

    def on(self) -> None:
        self._vm.boot()


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, n: int = 400) -> str:
    return " ".join(_text(path)[-n:].split())
