"""Links: veth pairs made directly inside their namespaces, their addresses, and shaping.

Interface names are `<prefix>-<h><p>`: the run prefix, a dash, the tag of this
end's host and of the peer's (`Topology.tag`: the initial, or the initial and a
number where hosts share it). `sp1a2b3-cd` is the client's end of the client–dut
link and `sp1a2b3-dc` the dut's end; in a graph with gateways `gw-a` and `gw-b`,
`sp1a2b3-g1g2` joins them. Every name carries the prefix (so it is traceable to
its run) and must fit IFNAMSIZ (15 characters). A switch host holds a bridge,
`<prefix>-br`, with every port of the switch in it.

Each veth is created with both ends already in their namespaces
(`ip link add A netns N1 type veth peer name B netns N2`), so no testbed
interface ever exists in the root namespace, even for an instant.

A link with a rate gets a tbf qdisc on the egress of both ends, which shapes
both directions: burst = max(10 ms at the rate, 1600 B) and latency 50 ms
(500 ms below 1 Mbit/s, where a full-size packet alone takes ~12 ms at 1 Mbit/s
and tens of ms at modem rates), or the link's own `queue`. Verified on this kernel: 100 Mbit/s holds
~96 Mbit/s TCP, 33.6 kbit/s holds ~32 kbit/s.

A testbed built with `priority_ports` (a run's: the engine's control port) gives
every shaped link a strict priority for them, so that a load that fills the link
cannot starve the engine's control connection: tbf stays the root and holds the
rate exactly as above (it cuts GSO packets to the MTU before they queue), and its
queue becomes an htb that only orders packets: two classes far above the link's
rate (so neither ever waits for tokens, and htb serves the lower `prio` first),
the control connection's (TCP to or from those ports, by u32 filters; a short
pfifo) and everything else's (a byte FIFO as deep as tbf's own queue). The
measured traffic gets the whole rate whenever the control connection is idle,
which is nearly always (a few hundred bytes a test). Without htb in a kernel (it
has no prio either: FIELD-NOTES) the link keeps plain tbf, and its control
connection no priority: `shape` returns which it got.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Protocol

from secperf.errors import TestbedError
from secperf.testbed.commands import run_command
from secperf.testbed.ledger import Ledger
from secperf.testbed.topology import MAPPED_HOSTS_NET4, MAPPED_HOSTS_NET6, LinkSpec, Topology

IFNAMSIZ = 15  # usable characters in a Linux interface name
TBF_MIN_BURST = 1600  # bytes: more than one full-size frame
TBF_BURST_SECONDS = 0.010
SLOW_LINK_BPS = 1_000_000


def ifname(prefix: str, tag: str, peer_tag: str) -> str:
    """An end's name from its host's tag and its peer's (`Topology.tag`):
    ifname('sp1a2b3', 'c', 'd') == 'sp1a2b3-cd'."""
    name = f"{prefix}-{tag}{peer_tag}"
    if len(name) > IFNAMSIZ:
        raise TestbedError(
            f"interface name {name!r} is longer than {IFNAMSIZ} characters",
            fix="use a run prefix of at most 12 characters",
        )
    return name


@dataclass(frozen=True)
class TbfParams:
    rate_bps: int
    burst_bytes: int
    latency_ms: int

    def tc_args(self) -> list[str]:
        return [
            "tbf",
            "rate",
            f"{self.rate_bps}bit",
            "burst",
            str(self.burst_bytes),
            "latency",
            f"{self.latency_ms}ms",
        ]


def tbf_params(rate_bps: int, queue_s: float | None = None) -> TbfParams:
    """The tbf that holds `rate_bps`: 10 ms of burst (≥ 1600 B), a queue of `queue_s`
    (default 50 ms, 500 ms if slow)."""
    if rate_bps <= 0:
        raise TestbedError(f"link rate {rate_bps} bit/s must be positive")
    burst = max(int(rate_bps / 8 * TBF_BURST_SECONDS), TBF_MIN_BURST)
    latency = 500 if rate_bps < SLOW_LINK_BPS else 50
    if queue_s is not None:
        latency = max(1, round(queue_s * 1000))
    return TbfParams(rate_bps, burst, latency)


def create_veth(ledger: Ledger, name: str, netns: str, peer: str, peer_netns: str) -> None:
    """One veth pair, each end born in its namespace (recorded before it is made)."""
    ledger.add("veth", name=name, netns=netns, peer=peer, peer_netns=peer_netns)
    argv = ["ip", "link", "add", name, "netns", netns, "type", "veth"]
    try:
        run_command([*argv, "peer", "name", peer, "netns", peer_netns])
    except TestbedError:
        ledger.remove("veth", name=name, netns=netns)  # not made: not ours to delete
        raise


CONTROL_FIFO_PACKETS = 100
# The htb under tbf only orders packets: its classes run this many times the link's
# rate, so they never wait for tokens (tbf holds the rate).
PRIORITY_HEADROOM = 10
MTU_BYTES = 1514


def priority_commands(
    dev: str, rate_bps: int, queue_s: float | None, priority_ports: Sequence[int]
) -> list[list[str]]:
    """The `tc` commands (without `tc`) that put a strict-priority htb under the tbf
    that `tbf_params(rate_bps, queue_s)` makes on `dev` (root handle 1:): TCP to or
    from `priority_ports` first (the module's docstring)."""
    tbf = tbf_params(rate_bps, queue_s)
    fast = f"{rate_bps * PRIORITY_HEADROOM}bit"
    # tbf's own queue limit: what drains in its latency at the rate, plus the burst
    fifo = int(rate_bps / 8 * tbf.latency_ms / 1000) + tbf.burst_bytes
    leaf = f"htb rate {fast} ceil {fast} quantum {MTU_BYTES}"
    lines = [
        f"qdisc add dev {dev} parent 1:1 handle 2: htb default 20",
        f"class add dev {dev} parent 2: classid 2:1 htb rate {fast} ceil {fast}",
        f"class add dev {dev} parent 2:1 classid 2:10 {leaf} prio 0",
        f"class add dev {dev} parent 2:1 classid 2:20 {leaf} prio 1",
        f"qdisc add dev {dev} parent 2:10 handle 10: pfifo limit {CONTROL_FIFO_PACKETS}",
        f"qdisc add dev {dev} parent 2:20 handle 20: bfifo limit {fifo}",
    ]
    for port in priority_ports:
        for proto, ip, pref in (("ip", "ip", 1), ("ipv6", "ip6", 2)):
            for end in ("sport", "dport"):
                lines.append(
                    f"filter add dev {dev} parent 2: protocol {proto} prio {pref} u32 "
                    f"match {ip} protocol 6 0xff match {ip} {end} {port} 0xffff flowid 2:10"
                )
    return [line.split() for line in lines]


def shape(
    netns: str,
    dev: str,
    rate_bps: int,
    queue_s: float | None = None,
    priority_ports: Sequence[int] = (),
) -> bool:
    """Put tbf at `rate_bps` on the egress of `dev`, with `priority_ports` first in
    its queue; True if they got the priority (False: none asked, or no htb here)."""
    tbf = tbf_params(rate_bps, queue_s)
    root = ["tc", "-n", netns, "qdisc", "replace", "dev", dev, "root", "handle", "1:"]
    run_command([*root, *tbf.tc_args()])
    if not priority_ports:
        return False
    try:
        for cmd in priority_commands(dev, rate_bps, queue_s, priority_ports):
            run_command(["tc", "-n", netns, *cmd])
    except TestbedError:
        run_command([*root, *tbf.tc_args()])  # plain tbf again, whatever was added
        return False
    return True


class Runs(Protocol):
    """What reshape needs of a host: to run a command in it (a testbed host does)."""

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float = 30.0,
    ) -> subprocess.CompletedProcess[str]: ...


def reshape(
    host: Runs,
    dev: str,
    rate_bps: int | None,
    queue_s: float | None = None,
    priority_ports: Sequence[int] = (),
) -> bool:
    """Change the egress rate of `dev` in a built testbed (a workload's `link_rate`):
    shaped to `rate_bps` as `shape` does (and its result), or no qdisc at all for None
    (unlimited: nothing queues, so nothing needs a priority)."""
    # A new root replaces the old one with everything under it (an htb's filters too).
    if rate_bps is None:
        host.run(["tc", "qdisc", "del", "dev", dev, "root"], check=False)
        return False
    tbf = tbf_params(rate_bps, queue_s)
    host.run(["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", *tbf.tc_args()])
    if not priority_ports:
        return False
    for cmd in priority_commands(dev, rate_bps, queue_s, priority_ports):
        if host.run(["tc", *cmd], check=False).returncode != 0:
            host.run(["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", *tbf.tc_args()])
            return False
    return True


BRIDGE = "br"
GRAPH_ROUTE_METRIC = 100


def bridge_lines(bridge: str, ports: list[str]) -> list[str]:
    """`ip -batch` lines that make a switch: one bridge, every port in it, all up.

    No STP, no address: a plain learning switch for a zone's LAN."""
    lines = ["link set lo up", f"link add {bridge} type bridge stp_state 0 forward_delay 0"]
    lines += [f"link set {port} master {bridge}" for port in ports]
    lines += [f"link set {port} up" for port in ports]
    lines.append(f"link set {bridge} up")
    return lines


def host_ip_lines(topology: Topology, role: str, ifnames: dict[str, str]) -> list[str]:
    """`ip -batch` lines that configure one host: loopback, addresses, links up, routes.

    `ifnames` maps each of the host's link names to its interface name. IPv6
    addresses are `nodad`: usable at once, no 1-2 s of tentative state.
    """
    lines = ["link set lo up"]
    links: list[LinkSpec] = list(topology.links_of(role))
    for link in links:
        if role not in link.addr4:
            continue
        dev = ifnames[link.name]
        lines.append(f"addr add {link.addr4[role]} dev {dev}")
        lines.append(f"addr add {link.addr6[role]} dev {dev} nodad")
        if link.peer(role) == "dut":
            for fam, plen in ((4, link.net4.prefixlen), (6, link.net6.prefixlen)):
                for addr in topology.emulated_addresses(role, fam):
                    extra = " nodad" if fam == 6 else ""
                    lines.append(f"addr add {addr}/{plen} dev {dev}{extra}")
    lines += extra_address_lines(topology, role, ifnames)
    for link in links:
        lines.append(f"link set {ifnames[link.name]} up")
    # The direct link's /24 is on-link, more specific than the default: traffic
    # to 198.18.3.x never crosses the dut. Subnets the default gateway does not
    # lead to get their own route (Topology.routes).
    # (Batch lines take no global options such as -6: the prefix names the family.)
    for fam, default in ((4, "0.0.0.0/0"), (6, "::/0")):
        gw = topology.gateway(role, fam)
        if gw is not None:
            lines.append(f"route add {default} via {gw}")
        # Metric 100: a mechanism's own route to the same subnet (a tunnel's, metric 10)
        # takes precedence while it is up, and removing it leaves this one in place.
        lines += [
            f"route add {net} via {via} metric {GRAPH_ROUTE_METRIC}"
            for net, via in topology.routes(role, fam)
        ]
        lines += extra_route_lines(topology, role, fam)
    return lines


def extra_address_lines(topology: Topology, role: str, ifnames: dict[str, str]) -> list[str]:
    """`ip -batch` lines for the host's extra host addresses (Topology.extra_addresses,
    a rule-set review's mapped ones): on an end host's link towards its gateway, on a
    forwarding host's loopback (it owns them, whichever interface a packet comes in by)."""
    addrs = topology.extra_addresses.get(role, ())
    if not addrs:
        return []
    dev = "lo"
    if not topology.host(role).forwarding:
        gateway = topology.gateway(role)
        link = next(
            (
                lk
                for lk in topology.links_of(role)
                if role in lk.addr4 and gateway is not None and ip_address(gateway) in lk.net4
            ),
            None,
        )
        if link is None:
            raise TestbedError(
                f"host {role} has extra addresses but no link towards a forwarding host",
                fix="link it to the DUT (or a gateway)",
            )
        dev = ifnames[link.name]
    out = []
    for addr in addrs:
        six = ip_address(addr).version == 6
        out.append(f"addr add {addr}/{128 if six else 32} dev {dev}{' nodad' if six else ''}")
    return out


def extra_route_lines(topology: Topology, role: str, family: int) -> list[str]:
    """Routes to the extra addresses: a forwarding host has a host route to each that
    another host owns (via the first hop towards it); an end host sends the whole mapped
    range to its gateway. Nothing when the topology has no extra address."""
    if not topology.extra_addresses:
        return []
    if not topology.host(role).forwarding:
        gateway = topology.gateway(role, family)
        if gateway is None:
            return []
        net = MAPPED_HOSTS_NET4 if family == 4 else MAPPED_HOSTS_NET6
        return [f"route add {net} via {gateway} metric {GRAPH_ROUTE_METRIC}"]
    out = []
    plen = 32 if family == 4 else 128
    for addr, owner in topology.extra_owner(family).items():
        if owner == role:
            continue
        via = topology.next_hop(role, owner, family)
        if via is not None:
            out.append(f"route add {addr}/{plen} via {via}")
    return out


# `ethtool -K` keywords and the `ethtool -k` lines they switch.
OFFLOAD_FEATURES = {
    "tso": "tcp-segmentation-offload",
    "gso": "generic-segmentation-offload",
    "gro": "generic-receive-offload",
}


def offload_state(netns: str, dev: str) -> dict[str, str]:
    """`ethtool -k` of one interface: feature -> "on"/"off" (its first word), as the
    kernel has it now."""
    out = run_command(
        ["ip", "netns", "exec", netns, "ethtool", "-k", dev],
        fix="install ethtool (apt-get install ethtool)",
    ).stdout
    state: dict[str, str] = {}
    for line in out.splitlines()[1:]:
        name, sep, value = line.partition(":")
        if sep and value.split():
            state[name.strip()] = value.split()[0]
    return state


def set_offloads(netns: str, dev: str, setting: str) -> None:
    """Turn TSO, GSO and GRO off on `dev` (setting "off") and check that the kernel
    did; "on" leaves the interface as the kernel made it."""
    if setting == "on":
        return
    args = [arg for key in OFFLOAD_FEATURES for arg in (key, "off")]
    run_command(
        ["ip", "netns", "exec", netns, "ethtool", "-K", dev, *args],
        fix='install ethtool (apt-get install ethtool), or set offloads = "on" in [testbed]',
    )
    state = offload_state(netns, dev)
    still_on = [f for f in OFFLOAD_FEATURES.values() if state.get(f) != "off"]
    if still_on:
        raise TestbedError(
            f"{dev} in {netns}: {', '.join(still_on)} still on after ethtool -K … off",
            fix='this kernel does not let a veth turn them off: set offloads = "on" in '
            "[testbed] (and read the figures as per super-packet, docs/methodology.md)",
        )


def apply_offloads(setting: str, ends: Iterable[tuple[str, str]]) -> None:
    """The testbed's offload setting on every (netns, interface) veth end."""
    for netns, dev in ends:
        set_offloads(netns, dev, setting)
