"""What every VPN implementation shares: tunnel ends, addresses, names, daemons, proofs.

A tunnel has two ends (`TunnelEnd`): a host that runs the daemon, the address the
other end reaches it at (`underlay`), the tunnel's own addresses (`inner4`,
`inner6`) and the networks it sends through the tunnel (`routes`: those behind
the peer). Host-to-host, the client and the server are the ends and `routes` is
empty (traffic goes to the peer's inner address); site-to-site, two gateways are
the ends and each end's `routes` holds the far zone's networks. What lies behind
an end is therefore its peer's `routes`: the implementations that must name it
(WireGuard's allowed IPs, IPsec's traffic selectors, tinc's subnets) read it there.

Inner addresses come from 198.18.240.0/20 and 2001:2:0:f0::/64, kept for tunnel
overlays (the testbed's links never use them; 2001:2:0:ff::/64, inside the /60
the overlays were given, is the ACL generators' and stays out). Tunnel `i`
gets the /30 starting at 198.18.240.0 + 4i and the /120 starting at
2001:2:0:f0:: + 256i (OpenVPN takes IPv6 prefixes of /64 to /124 only), end a the
first host address, end b the second.

Every daemon runs in the foreground through its host's `spawn` (so it joins the
host's cgroup and the run's ledger), with stdout and stderr in a log file in the
run directory; `start` polls until a ping crosses the tunnel, and a tunnel that
does not come up is an error that quotes the daemons' last log lines.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from secperf.errors import MechanismError
from secperf.testbed import topology
from secperf.testbed.hosts import Host, InterfaceCounters, ManagedProcess
from secperf.testbed.ledger import proc_state
from secperf.testbed.procfs import cpu_seconds, rss_bytes
from secperf.tools import Tool

TUNNEL_NET4 = topology.TUNNEL_NET4  # 198.18.240.0/20, which no link of the graph uses
# The first /64 of the overlays' 2001:2:0:f0::/60: that /60 also holds the ACL
# generators' 2001:2:0:ff::/64, which no tunnel may use.
TUNNEL_NET6 = next(topology.TUNNEL_NET6.subnets(new_prefix=64))
MAX_TUNNELS = TUNNEL_NET4.num_addresses // 4
TUNNEL_ROUTE_METRIC = 10
IFNAMSIZ = 15  # the kernel's limit on an interface name (16 with the NUL)
START_TIMEOUT_S = 20.0
LOG_TAIL_LINES = 12
NAME_RE = re.compile(r"^[a-z][a-z0-9-]*$")
# In front of a daemon's argv: its own mount namespace with an empty /run, so that
# pid files at compiled-in paths (charon's /run/charon.pid, vtund's) neither collide
# between two daemons on one machine nor stay behind.
PRIVATE_RUN = (
    "unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=4m secperf-run /run && exec "$@"', "sh",
)  # fmt: skip


@dataclass(frozen=True)
class TunnelEnd:
    """One end of a tunnel."""

    host: Host  # where its daemon runs (a namespace here, an SSH host in a lab)
    name: str  # a short name for files and logs ("client", "gw-in")
    underlay: str  # this end's address on the path to the peer (the peer reaches it there)
    inner4: str  # the tunnel address with its prefix, e.g. "198.18.240.1/30"
    inner6: str | None = None  # e.g. "2001:2:0:f0::1/120"
    routes: tuple[str, ...] = ()  # networks this end sends through the tunnel (behind the peer)

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise MechanismError(
                f"tunnel end name {self.name!r} is not plain",
                fix="use lowercase letters, digits and '-' (it goes into file names)",
            )
        ipaddress.ip_address(self.underlay)  # raises ValueError on a bad address
        ipaddress.IPv4Interface(self.inner4)
        if self.inner6 is not None:
            ipaddress.IPv6Interface(self.inner6)
        for net in self.routes:
            ipaddress.ip_network(net, strict=False)

    @property
    def ip4(self) -> str:
        """The bare inner IPv4 address, e.g. '198.18.240.1'."""
        return str(ipaddress.IPv4Interface(self.inner4).ip)

    @property
    def ip6(self) -> str | None:
        return str(ipaddress.IPv6Interface(self.inner6).ip) if self.inner6 else None

    @property
    def underlay_family(self) -> int:
        return ipaddress.ip_address(self.underlay).version

    def host_prefixes(self) -> list[str]:
        """This end's inner addresses as host prefixes (/32, /128)."""
        out = [f"{self.ip4}/32"]
        if self.ip6:
            out.append(f"{self.ip6}/128")
        return out


def tunnel_addresses(index: int) -> tuple[tuple[str, str], tuple[str, str]]:
    """((a4, b4), (a6, b6)) with prefixes for tunnel number `index` (0-based)."""
    if not 0 <= index < MAX_TUNNELS:
        raise MechanismError(f"tunnel index {index} is out of range 0..{MAX_TUNNELS - 1}")
    n4 = ipaddress.IPv4Network((int(TUNNEL_NET4.network_address) + 4 * index, 30))
    n6 = ipaddress.IPv6Network((int(TUNNEL_NET6.network_address) + 256 * index, 120))
    return (
        (f"{n4[1]}/30", f"{n4[2]}/30"),
        (f"{n6[1]}/120", f"{n6[2]}/120"),
    )


def tunnel_name(prefix: str, index: int) -> str:
    """The stem of a tunnel's device names, e.g. 'sp1a2b3v0' (devices add 'a'/'b'): the
    longest run prefix (12) still leaves room for tunnels 0-9."""
    name = f"{prefix}v{index}"
    check_tunnel_name(name)
    return name


def check_tunnel_name(name: str) -> str:
    """A stem must leave room for the end letter within IFNAMSIZ, and be plain."""
    if not NAME_RE.match(name) or len(name) + 1 > IFNAMSIZ:
        raise MechanismError(
            f"tunnel name {name!r} is not usable for device names",
            fix=f"use at most {IFNAMSIZ - 1} lowercase letters, digits and '-', starting "
            "with the run prefix (the device of each end appends 'a' or 'b')",
        )
    return name


def check_ends(a: TunnelEnd, b: TunnelEnd) -> None:
    """Two ends that can form a tunnel: one underlay family, distinct names and addresses,
    and no route that would send the tunnel's own packets into itself."""
    if a.name == b.name:
        raise MechanismError(f"both tunnel ends are named {a.name!r}", fix="name each end")
    if a.underlay_family != b.underlay_family:
        raise MechanismError(
            f"tunnel ends {a.underlay} and {b.underlay} are of different address families",
            fix="give both ends underlay addresses of one family",
        )
    if (a.inner6 is None) != (b.inner6 is None):
        raise MechanismError("one tunnel end has an inner IPv6 address and the other not")
    net_a = ipaddress.IPv4Interface(a.inner4).network
    if ipaddress.IPv4Interface(b.inner4).network != net_a or a.ip4 == b.ip4:
        raise MechanismError(
            f"inner addresses {a.inner4} and {b.inner4} are not two hosts of one network"
        )
    for end, peer in ((a, b), (b, a)):
        for net in end.routes:
            if ipaddress.ip_address(peer.underlay) in ipaddress.ip_network(net, strict=False):
                raise MechanismError(
                    f"{end.name}'s tunnel route {net} holds the peer's underlay address "
                    f"{peer.underlay}: the tunnel's own packets would loop into it",
                    fix="route the far side's networks, not the peer's underlay address",
                )


def endpoint(addr: str, port: int) -> str:
    """'198.18.2.2:51820' or '[2001:2:0:2::2]:51820'."""
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


# -- what ran --------------------------------------------------------------------


@runtime_checkable
class Vpn(Protocol):
    """One VPN implementation between two tunnel ends."""

    @property
    def kind(self) -> str:
        """ "wireguard" | "openvpn" | "ipsec" | "tinc" | "vtun"."""
        ...

    def render(self, a: TunnelEnd, b: TunnelEnd, files_dir: Path, name: str) -> list[Path]:
        """Generate keys/certificates and write both ends' configs into files_dir.
        `name` is the stem of the device names (it carries the run prefix)."""
        ...

    def start(self, a: TunnelEnd, b: TunnelEnd) -> None:
        """Start both daemons; return once a ping crosses the tunnel (or raise)."""
        ...

    def stop(self) -> None:
        """Stop the daemons, remove the devices, addresses and routes start() added."""
        ...

    def devices(self) -> dict[str, str]:
        """End name -> its tunnel device (for the interface counters)."""
        ...

    def pids(self) -> dict[str, list[int]]:
        """End name -> the pids of its daemon (and what the daemon forked)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What ran: implementation, version, cipher, mode, backend, compression."""
        ...

    def host_files(self) -> list[Path]:
        """Files start() makes outside the run directory (wireguard-go's control
        sockets): the runner records them in the ledger, so that a run killed before
        stop() leaves none behind."""
        ...


# -- daemons ---------------------------------------------------------------------------


@dataclass
class Daemon:
    end: str
    proc: ManagedProcess
    log: Path
    host: Host


@dataclass
class DaemonSet:
    """The daemons of one tunnel, their logs, and the clean-up steps start() registered."""

    what: str  # "wireguard-go", for messages
    daemons: list[Daemon] = field(default_factory=list)
    # Undo steps (host, argv), run in reverse order by stop(). Their failures are not
    # errors: a daemon usually takes its device, and the routes through it, with it.
    undo: list[tuple[Host, list[str]]] = field(default_factory=list)

    def spawn(self, end: TunnelEnd, argv: Sequence[str], log: Path, label: str) -> ManagedProcess:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            proc = end.host.spawn(argv, stdout=out, stderr=subprocess.STDOUT, label=label)
        self.daemons.append(Daemon(end.name, proc, log, end.host))
        return proc

    def check_alive(self) -> None:
        for d in self.daemons:
            if d.proc.poll() is not None:
                raise MechanismError(
                    f"{self.what} on {d.end} exited with status {d.proc.returncode}:\n"
                    f"{log_tail(d.log)}",
                    where=str(d.log),
                    fix="read the daemon's log above; its configuration is beside it",
                )

    def failure(self, message: str, fix: str) -> MechanismError:
        tails = "\n".join(f"--- {d.end} ({d.log}):\n{log_tail(d.log)}" for d in self.daemons)
        return MechanismError(
            f"{message}\n{tails}",
            where=self.daemons[0].log.parent.as_posix() if self.daemons else None,
            fix=fix,
        )

    def add_undo(self, host: Host, argv: list[str]) -> None:
        self.undo.append((host, argv))

    def stop(self) -> None:
        forked = [p for d in self.daemons for p in group_pids(d.proc.pid) if p != d.proc.pid]
        for d in reversed(self.daemons):
            d.proc.stop(timeout=5.0)
        # What a daemon forked (vtund's session process) got the group's signals too;
        # wait until it has exited, so that "stopped" means gone.
        deadline = time.monotonic() + 5.0
        alive = forked
        while alive and time.monotonic() < deadline:
            time.sleep(0.02)
            alive = [p for p in forked if proc_state(p) not in (None, "Z", "X")]
        for host, argv in reversed(self.undo):
            host.run(argv, check=False)
        self.daemons.clear()
        self.undo.clear()
        if alive:
            raise MechanismError(
                f"{self.what}'s children {alive} outlived it",
                fix="`secperf clean` stops what runs in the run's namespaces",
            )

    def pids(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for d in self.daemons:
            if d.proc.poll() is None:
                out.setdefault(d.end, []).extend(group_pids(d.proc.pid))
        return out


class DaemonTunnel:
    """What the implementations share: the render checks and the start sequence, written
    once; an implementation fills in what differs (`write`, `launch`, and the optional
    hooks) and keeps its daemons in its DaemonSet (`_ds`) and each end's tunnel device
    in `_names`.

    The start sequence: `prepare` the hosts; start each end's daemon (`launch`), the
    listening end first when the other connects to it (`server_first`; end b is the
    server), waiting until it listens (`listener`); `connect` what needs both daemons;
    wait until a ping crosses the tunnel; wait until the tunnel is `ready`; send each
    end's routes through its device (`route_devices`). Any failure on the way stops
    everything started so far (daemons, and the undo steps of devices, addresses and
    routes), so a failed start leaves nothing behind."""

    kind: ClassVar[str]  # "wireguard" | "openvpn" | "ipsec" | "tinc" | "vtun"
    TOOLS: ClassVar[tuple[Tool, ...]]  # the programs it runs (secperf doctor, preflight)
    server_first: ClassVar[bool] = True
    route_devices: ClassVar[bool] = True

    def __init__(self, daemon: str) -> None:
        self._ds = DaemonSet(daemon)
        self._names: dict[str, str] = {}
        self._files: Path | None = None  # set once render() wrote everything

    # -- what an implementation writes and runs ---------------------------------------
    def check(self, a: TunnelEnd, b: TunnelEnd) -> None:
        """Refuse ends this implementation cannot carry (before anything is written)."""

    def write(self, a: TunnelEnd, b: TunnelEnd, files_dir: Path, name: str) -> list[Path]:
        """Keys, certificates and both ends' configurations, in files_dir (which exists);
        `name` is the stem of the device names."""
        raise NotImplementedError

    def prepare(self, a: TunnelEnd, b: TunnelEnd) -> None:
        """Before any daemon: host settings the tunnel needs (undo steps in `_ds`)."""

    def launch(self, end: TunnelEnd, peer: TunnelEnd, server: bool) -> None:
        """Start `end`'s daemon (`server`: end b, the one the other connects to)."""
        raise NotImplementedError

    def listener(self) -> tuple[int, str] | None:
        """(port, "tcp" or "udp") the server end listens on before the other starts, or
        None when the other need not wait for it."""
        return None

    def connect(self, a: TunnelEnd, b: TunnelEnd) -> None:
        """Once both daemons run: what brings the tunnel up between them."""

    def ready(self, a: TunnelEnd, b: TunnelEnd) -> None:
        """Once packets pass: wait for whatever else makes the tunnel the measured one."""

    # -- the Vpn interface -------------------------------------------------------------
    def render(self, a: TunnelEnd, b: TunnelEnd, files_dir: Path, name: str) -> list[Path]:
        check_ends(a, b)
        check_tunnel_name(name)
        self.check(a, b)
        files_dir.mkdir(parents=True, exist_ok=True)
        out = self.write(a, b, files_dir, name)
        self._files = files_dir
        return out

    def start(self, a: TunnelEnd, b: TunnelEnd) -> None:
        if self._files is None:
            raise MechanismError(f"{self.kind}: start() before render()")
        ds = self._ds
        try:
            self.prepare(a, b)
            listen = self.listener()
            for end, peer in ((b, a), (a, b)) if self.server_first else ((a, b), (b, a)):
                self.launch(end, peer, server=end is b)
                if end is b and listen is not None:
                    wait_listening(ds, b, *listen)
            self.connect(a, b)
            wait_passing(a, b, ds)
            self.ready(a, b)
            if self.route_devices:
                for end in (a, b):
                    add_routes(ds, end, self._names[end.name])
        except BaseException:
            ds.stop()
            raise

    @property
    def files(self) -> Path:
        """The run directory's folder of this tunnel (after render())."""
        if self._files is None:
            raise MechanismError(f"{self.kind}: start() before render()")
        return self._files

    def stop(self) -> None:
        self._ds.stop()

    def devices(self) -> dict[str, str]:
        return dict(self._names)

    def pids(self) -> dict[str, list[int]]:
        return self._ds.pids()

    def host_files(self) -> list[Path]:
        return []  # everything it writes is in the run directory (or its private /run)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = text.strip().splitlines()[-lines:]
    return "\n".join(f"  {line}" for line in tail) if tail else "  (empty log)"


def group_pids(leader: int) -> list[int]:
    """The leader and every process in its process group (daemons' forks)."""
    out = [leader]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = text[text.rfind(")") + 2 :].split()
        pid = int(stat.parent.name)
        if pid != leader and len(fields) > 2 and int(fields[2]) == leader:
            out.append(pid)
    return out


def wait_for(
    check: Callable[[], bool],
    daemons: DaemonSet,
    *,
    what: str,
    fix: str,
    timeout: float = START_TIMEOUT_S,
) -> None:
    """Poll `check()` until it is true, the deadline passes (error), or a daemon dies."""
    deadline = time.monotonic() + timeout
    while True:
        daemons.check_alive()
        if check():
            return
        if time.monotonic() >= deadline:
            raise daemons.failure(f"{what} within {timeout:.0f} s", fix)
        time.sleep(0.1)


def pings(host: Host, addr: str, timeout_s: float = 0.5) -> bool:
    """One ping from `host` to `addr` answered within the timeout."""
    wait = max(1, round(timeout_s))
    argv = ["ping", "-n", "-q", "-c", "1", "-W", str(wait), addr]
    return host.run(argv, check=False, timeout=wait + 5.0).returncode == 0


def wait_passing(
    a: TunnelEnd, b: TunnelEnd, daemons: DaemonSet, timeout: float = START_TIMEOUT_S
) -> None:
    """Until a ping from a's inner address crosses the tunnel to b's and back."""
    wait_for(
        lambda: pings(a.host, b.ip4),
        daemons,
        what=f"no ping crossed the {daemons.what} tunnel from {a.name} to {b.ip4}",
        fix="read the daemons' logs above; `secperf clean` removes what a crashed run left",
        timeout=timeout,
    )


def wait_listening(
    ds: DaemonSet, end: TunnelEnd, port: int, proto: str = "tcp", timeout: float = START_TIMEOUT_S
) -> None:
    """Until a socket listens on `port` in `end`'s host (a server end before its client
    starts: a client that finds nobody there waits seconds before it tries again)."""
    flag = "-Hltn" if proto == "tcp" else "-Hlun"

    def listening() -> bool:
        out = end.host.run(["ss", flag, f"sport = :{port}"], check=False).stdout
        return bool(out.strip())

    wait_for(
        listening,
        ds,
        what=f"{ds.what} in {end.name} did not listen on {proto} port {port}",
        fix="read the daemon's log above; another program may hold the port",
        timeout=timeout,
    )


def add_routes(ds: DaemonSet, end: TunnelEnd, device: str) -> None:
    """Send `end.routes` through `device` (added after the tunnel is up; undone by stop)."""
    for net in end.routes:
        family = "-6" if ipaddress.ip_network(net, strict=False).version == 6 else "-4"
        # Metric 10, below the graph's own routes (metric 100): the tunnel wins while it
        # is up, and deleting exactly this route leaves the graph's route in place.
        metric = ["metric", str(TUNNEL_ROUTE_METRIC)]
        end.host.run(["ip", family, "route", "replace", net, "dev", device, *metric])
        ds.add_undo(end.host, ["ip", family, "route", "del", net, "dev", device, *metric])


def version_of(argv: list[str], pattern: str) -> str:
    """A tool's version from its own output (on this machine), or 'unknown'."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    m = re.search(pattern, proc.stdout + proc.stderr)
    return m.group(1) if m else "unknown"


def run_local(argv: list[str], *, what: str, input: str | None = None) -> str:
    """Run a key/certificate tool on the controller; its failure is a MechanismError."""
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, check=False, input=input
        )
    except FileNotFoundError:
        raise MechanismError(
            f"{argv[0]} is not installed ({what})",
            fix="run `make setup-all` (scripts/setup.sh --all installs the VPN packages)",
        ) from None
    if proc.returncode != 0:
        raise MechanismError(
            f"{what} failed: {' '.join(argv)}: {(proc.stderr or proc.stdout).strip()[-500:]}",
            fix="check that the tool works on this machine (`secperf doctor`)",
        )
    return proc.stdout


def write_private(path: Path, text: str) -> Path:
    """A file only root may read (keys), written in one go."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)
    return path


# -- measurements ------------------------------------------------------------------------


def device_counters(host: Host, device: str) -> InterfaceCounters:
    """The counters of a tunnel device in `host` (the host interface's own reading)."""
    counters = host.interface_counters()
    if device not in counters:
        raise MechanismError(
            f"no device {device} in {host.name} (it has {', '.join(sorted(counters))})",
            fix="the tunnel is down: start it first",
        )
    return counters[device]


def memory(vpn: Vpn) -> dict[str, int]:
    """End name -> resident memory of its daemon in bytes (only ends whose daemon runs)."""
    out: dict[str, int] = {}
    for end, pids in vpn.pids().items():
        rss = rss_bytes(pids)
        if rss is not None:
            out[end] = rss
    return out


def daemon_cpu(vpn: Vpn) -> dict[str, float]:
    """End name -> CPU seconds its daemon has used so far (only ends whose daemon runs)."""
    out: dict[str, float] = {}
    for end, pids in vpn.pids().items():
        cpu = cpu_seconds(pids)
        if cpu is not None:
            out[end] = cpu
    return out
