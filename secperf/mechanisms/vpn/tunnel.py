"""Mechanism `vpn`: a tunnel between the two hosts its `on` names, placed on the graph.

Host-to-host (`on = "ends"`, the default: the workload's client and server are
the tunnel's ends, as in document 003), the workload targets the server's inner
address, so every byte it measures crosses the tunnel. Site-to-site (`on =
"gateways"` or two forwarding hosts), each gateway sends the network behind the
other end into the tunnel and the workload targets the server as usual.

Keys, certificates and configurations are made on the first apply (they need the
hosts), once per run; the daemons start before every test and stop after it, as
every mechanism is loaded afresh. After each test the runner asks `observe()` for
what the tunnel did: its devices' byte counters and its daemons' CPU time over the
test, the daemons' resident memory, and what ran (implementation, cipher, backend).
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from secperf.errors import MechanismError, ScenarioError
from secperf.mechanisms.base import (
    CheckContext,
    Mechanism,
    MechanismContext,
    MechanismKind,
    RenderedFile,
)
from secperf.mechanisms.vpn.base import (
    TunnelEnd,
    Vpn,
    daemon_cpu,
    device_counters,
    memory,
    tunnel_addresses,
    tunnel_name,
)
from secperf.mechanisms.vpn.ipsec import Ipsec, kernel_has_esp
from secperf.mechanisms.vpn.openvpn import OpenVpn
from secperf.mechanisms.vpn.pptp import refuse as refuse_pptp
from secperf.mechanisms.vpn.spec import VpnSpec
from secperf.mechanisms.vpn.tinc import Tinc
from secperf.mechanisms.vpn.vtun import Vtun
from secperf.mechanisms.vpn.wireguard import Wireguard
from secperf.metric import Extractor, Metric, Record, num
from secperf.testbed.hosts import Host
from secperf.testbed.topology import Topology
from secperf.tools import Tool

# Each implementation by its `implementation = "..."` name.
IMPLEMENTATIONS: dict[str, type[Wireguard | OpenVpn | Ipsec | Tinc | Vtun]] = {
    "wireguard": Wireguard,
    "openvpn": OpenVpn,
    "ipsec": Ipsec,
    "tinc": Tinc,
    "vtun": Vtun,
}

# Each tunnel of a run gets its own inner /30 and device names.
_indexes = itertools.count()


def make(implementation: str, **params: Any) -> Vpn:
    """The implementation with its parameters (None values take its defaults)."""
    params = {k: v for k, v in params.items() if v is not None}
    if implementation == "pptp":
        raise refuse_pptp()
    if implementation not in IMPLEMENTATIONS:
        raise MechanismError(
            f"vpn implementation {implementation!r} is unknown",
            fix=f"use one of {', '.join(IMPLEMENTATIONS)}",
        )
    vpn: Vpn = IMPLEMENTATIONS[implementation](**params)
    return vpn


def from_spec(spec: VpnSpec) -> Vpn:
    """The Vpn for a scenario's `{ kind = "vpn", ... }` entry."""
    return make(spec.implementation, **spec.implementation_params())


class Tunnel(Mechanism):
    """A `vpn` mechanism: one Vpn implementation between two hosts of the graph."""

    spec: VpnSpec

    def __init__(self, spec: VpnSpec) -> None:
        super().__init__(spec)
        self.index = next(_indexes)
        self.vpn: Vpn = from_spec(spec)
        self._rendered = False
        self._ends: tuple[TunnelEnd, TunnelEnd] | None = None
        self._before: dict[str, int] = {}
        self._cpu_before: dict[str, float] = {}
        self._attempts = 0  # starts it took before this test (2: the first failed)

    # -- the Mechanism interface -------------------------------------------------------
    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        """Nothing yet: keys and configurations are written on the first apply."""
        return []

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        raise MechanismError("a tunnel needs both its ends at once (the runner applies it whole)")

    def release(self, host: Host, ctx: MechanismContext) -> None:
        raise MechanismError("a tunnel needs both its ends at once (the runner releases it whole)")

    def apply_group(self, hosts: Sequence[Host], ctx: MechanismContext) -> None:
        a, b = self._tunnel_ends(hosts, ctx)
        if not self._rendered:
            prefix = ctx.table.removeprefix("secperf_")
            files = ctx.files_dir / f"{ctx.name}.vpn"
            self.vpn.render(a, b, files, tunnel_name(prefix, self.index))
            self._rendered = True
        for path in self.vpn.host_files():
            for host in hosts:
                host.track_file(str(path))
        self._attempts = 1
        try:
            self.vpn.start(a, b)
        except MechanismError as first:
            # A daemon that dies in its first second on a loaded machine (vtund on a
            # packet that came before its device was up: EIO) gets one more start;
            # start() has already stopped whatever it began. The record says so.
            self._attempts = 2
            try:
                self.vpn.start(a, b)
            except MechanismError as second:
                second.message = f"{second.message}\n(the first start failed too: {first})"
                raise
        self._before = self._device_bytes()
        self._cpu_before = daemon_cpu(self.vpn)

    def release_group(self, hosts: Sequence[Host], ctx: MechanismContext) -> None:
        self.vpn.stop()

    def target_address(self, ctx: MechanismContext, server: str, family: int) -> str | None:
        """Host-to-host, the server is reached at its inner address (through the tunnel)."""
        if not self._host_to_host(ctx) or ctx.hosts[1] != server:
            return None
        (_a4, b4), (_a6, b6) = tunnel_addresses(self.index)
        inner = b4 if family == 4 else b6
        return str(ipaddress.ip_interface(inner).ip)

    # -- what the tunnel did -------------------------------------------------------------
    def observe(self) -> dict[str, Any]:
        """Bytes through each end's device and its daemon's CPU seconds since the tunnel
        started, the daemons' memory now, and what ran."""
        after = self._device_bytes()
        cpu = daemon_cpu(self.vpn)
        return {
            "kind": self.kind,
            "tunnel": self.vpn.describe(),
            "device_bytes": {end: after[end] - self._before.get(end, 0) for end in after},
            "cpu_seconds": {
                end: cpu[end] - self._cpu_before[end] for end in cpu if end in self._cpu_before
            },
            "memory_bytes": memory(self.vpn),
            "start_attempts": self._attempts,
        }

    def _device_bytes(self) -> dict[str, int]:
        if self._ends is None:
            return {}
        out: dict[str, int] = {}
        for end in self._ends:
            device = self.vpn.devices().get(end.name)
            if device is not None:
                c = device_counters(end.host, device)
                out[end.name] = c.rx_bytes + c.tx_bytes
        return out

    # -- placement ----------------------------------------------------------------------
    @staticmethod
    def _host_to_host(ctx: MechanismContext) -> bool:
        topo = ctx.topology
        return topo is not None and not any(topo.host(h).forwarding for h in ctx.hosts)

    def _tunnel_ends(
        self, hosts: Sequence[Host], ctx: MechanismContext
    ) -> tuple[TunnelEnd, TunnelEnd]:
        if self._ends is not None:
            return self._ends
        topo = ctx.topology
        if topo is None or len(ctx.hosts) != 2 or len(hosts) != 2:
            raise MechanismError(
                f"a tunnel needs two ends on the testbed graph, not {ctx.hosts}",
                fix='place it with on = "ends", "gateways" or two host names',
            )
        family = ctx.plan.family
        (a4, b4), (a6, b6) = tunnel_addresses(self.index)
        name_a, name_b = ctx.hosts
        under_a, under_b = _underlay(topo, name_a, name_b, family)
        routes_a: tuple[str, ...] = ()
        routes_b: tuple[str, ...] = ()
        if not self._host_to_host(ctx):
            # Site to site: each gateway sends what lies behind the other into the tunnel.
            client, server = ctx.ends
            near_a = topo.path(client, server).index(name_a) < topo.path(client, server).index(
                name_b
            )
            client_net = str(topo.primary_interface(client, family).network)
            server_net = str(topo.primary_interface(server, family).network)
            routes_a, routes_b = (
                ((server_net,), (client_net,)) if near_a else ((client_net,), (server_net,))
            )
        v6 = family == 6
        self._ends = (
            TunnelEnd(hosts[0], name_a, under_a, a4, a6 if v6 else None, routes_a),
            TunnelEnd(hosts[1], name_b, under_b, b4, b6 if v6 else None, routes_b),
        )
        return self._ends


def _underlay(topo: Topology, a: str, b: str, family: int) -> tuple[str, str]:
    """Each end's address as the other reaches it: on their shared segment when they
    are neighbours, else their primary addresses."""
    idx = 0 if family == 4 else 1
    for peer, seg in topo.neighbours(a):
        if peer == b:
            return str(seg.members[a][idx].ip), str(seg.members[b][idx].ip)
    return topo.primary_address(a, family), topo.primary_address(b, family)


def tools(spec: VpnSpec) -> list[Tool]:
    impl = IMPLEMENTATIONS.get(spec.implementation)
    return list(impl.TOOLS) if impl is not None else []


def check(spec: VpnSpec, ctx: CheckContext) -> None:
    """IPsec transport mode without the kernel's ESP transform (kernel-libipsec carries
    tunnel mode only): refused now rather than after the testbed is built."""
    if spec.implementation == "ipsec" and spec.mode == "transport" and not kernel_has_esp():
        raise ScenarioError(
            f"{ctx.key}: ipsec transport mode needs the kernel's ESP transform, which this "
            "kernel lacks; kernel-libipsec, the user-space fallback, carries tunnel "
            "mode only",
            where=ctx.where,
            fix='use mode = "tunnel" here, or a kernel with ESP (CONFIG_INET_ESP)',
        )


def _tunnel_rss(end: int) -> Extractor:
    """A tunnel mechanism record's daemon memory at one end (0: the end on the client's
    side, 1: the server's), in MiB."""

    def get(r: Record) -> float | None:
        hosts, mem = r.get("hosts"), r.get("memory_bytes")
        if not isinstance(hosts, list) or len(hosts) != 2 or not isinstance(mem, Mapping):
            return None
        value = num(mem.get(hosts[end]))
        return None if value is None else value / 2**20

    return get


def _tunnel_cpu(end: int) -> Extractor:
    """A tunnel mechanism record's daemon CPU at one end (0: the client's side, 1: the
    server's) per kB (1000 B) through that end's tunnel device over the test, in µs:
    the daemon's own service demand, whatever else its host runs."""

    def get(r: Record) -> float | None:
        hosts, cpu, moved = r.get("hosts"), r.get("cpu_seconds"), r.get("device_bytes")
        if not isinstance(hosts, list) or len(hosts) != 2:
            return None
        if not isinstance(cpu, Mapping) or not isinstance(moved, Mapping):
            return None
        seconds, nbytes = num(cpu.get(hosts[end])), num(moved.get(hosts[end]))
        if seconds is None or not nbytes:
            return None
        return seconds * 1e6 / (nbytes / 1000)

    return get


# A tunnel's daemons (document 003, Figs. 2-3): each end's CPU per kB and memory (RSS).
TUNNEL_CPU_CLIENT = Metric(
    "tunnel_cpu_client_us_per_kb",
    "Tunnel daemon CPU per kB, client end",
    "CPU µs/kB (1 kB = 1000 B through its device)",
    False,
    False,
    scale="ratio",  # CPU per unit of work, as a service demand
)
TUNNEL_CPU_SERVER = Metric(
    "tunnel_cpu_server_us_per_kb",
    "Tunnel daemon CPU per kB, server end",
    "CPU µs/kB (1 kB = 1000 B through its device)",
    False,
    False,
    scale="ratio",  # CPU per unit of work, as a service demand
)
TUNNEL_RSS_CLIENT = Metric(
    "tunnel_rss_client_mib", "Tunnel daemon memory, client end", "MiB (RSS)", False, False
)
TUNNEL_RSS_SERVER = Metric(
    "tunnel_rss_server_mib", "Tunnel daemon memory, server end", "MiB (RSS)", False, False
)


KIND = MechanismKind(
    name="vpn",
    model=VpnSpec,
    runtime=Tunnel,
    # both ends' daemons started and the tunnel up before each test (the kept seed003
    # runs: about 3 s a test beyond its transfer)
    apply_s=3.0,
    tools=tools,
    known_tools=tuple(t for impl in IMPLEMENTATIONS.values() for t in impl.TOOLS),
    check=check,
    # its `mechanism` records: each end's daemon CPU and memory beside the throughput
    metrics=(
        (TUNNEL_CPU_CLIENT, _tunnel_cpu(0)),
        (TUNNEL_CPU_SERVER, _tunnel_cpu(1)),
        (TUNNEL_RSS_CLIENT, _tunnel_rss(0)),
        (TUNNEL_RSS_SERVER, _tunnel_rss(1)),
    ),
)
