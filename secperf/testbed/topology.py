"""The testbed graph: hosts in zones, links with their rates, addresses and routes.

A Topology is pure data, with no side effects. `Testbed.build` turns it into
hosts (namespaces) and links (veths); the mechanisms and workloads read names,
addresses and paths from it. Every address comes from the benchmarking ranges
(RFC 2544 198.18.0.0/15, RFC 5180 2001:2::/48) and is checked on construction,
so a testbed can never answer for a real network. 198.19.0.0/17 and
2001:2:0:ff::/64 are kept free (ACL generators draw their non-matching entries
from them), and so is 198.18.240.0/20 with 2001:2:0:f0::/60: tunnel overlays
(VPN inner addresses) live there. 198.19.128.0/17 and 2001:2:0:8000::/49 hold a
rule-set review's mapped addresses (secperf.rulesets.addrmap): a host owns them
only as the topology's extra host addresses (`Topology.extra_addresses`).

Hosts have a name (unique), a role (`client`, `server`, `dut`, `gateway`,
`attacker`, `ids`, or `switch`), a zone, and forward or not. A link joins two
hosts; a `switch` host is an Ethernet bridge with no address, so every host
linked to it shares one subnet (a zone's LAN). Routes are derived from the
graph: an end host's default route goes to its first forwarding neighbour, and
every other subnet gets the first hop of the shortest path through forwarding
hosts (only where that differs from the default).

The standard plan (`Topology.standard`), unchanged since the first release:
  client-dut    198.18.1.0/24 2001:2:0:1::/64   dut .1/::1  client .2/::2
  dut-server    198.18.2.0/24 2001:2:0:2::/64   dut .1/::1  server .2/::2
  client-server 198.18.3.0/24 2001:2:0:3::/64   client .1/::1  server .2/::2  (direct=True)
  attacker-dut  198.18.4.0/24 2001:2:0:4::/64   dut .1/::1  attacker .2/::2  (attacker=True)
Emulated hosts (i < N ≤ 200): client 198.18.1.(10+i) and 2001:2:0:1::(a+i),
server 198.18.2.(10+i) and 2001:2:0:2::(a+i), as extra addresses on the
host's interface toward the dut.

A graph (`Topology.graph`, from a scenario's [topology]) numbers its links in
order: the n-th subnet is 198.18.n.0/24 and 2001:2:0:n::/64 (n < 240); on a
point-to-point link the first end is .1, the second .2; on a switch's LAN the
members are .1, .2, ... in the order of their links (forwarding hosts first).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from ipaddress import (
    IPv4Address,
    IPv4Interface,
    IPv4Network,
    IPv6Address,
    IPv6Interface,
    IPv6Network,
    ip_address,
    ip_network,
)

from secperf.errors import TestbedError

TESTBED_NET4 = IPv4Network("198.18.0.0/15")
TESTBED_NET6 = IPv6Network("2001:2::/48")
# Generated non-matching ACL entries come from here; no host may use them.
ACL_RESERVED_NET4 = IPv4Network("198.19.0.0/17")
ACL_RESERVED_NET6 = IPv6Network("2001:2:0:ff::/64")
# A rule-set review's mapped addresses (secperf.rulesets.addrmap.MAPPED_NET4/6): a host
# owns them as extra host addresses (Topology.extra_addresses), no link subnet uses them.
MAPPED_HOSTS_NET4 = IPv4Network("198.19.128.0/17")
MAPPED_HOSTS_NET6 = IPv6Network("2001:2:0:8000::/49")
# Tunnel overlays (VPN inner addresses); no link subnet may use them.
TUNNEL_NET4 = IPv4Network("198.18.240.0/20")
TUNNEL_NET6 = IPv6Network("2001:2:0:f0::/60")
MAX_SUBNETS = 239  # 198.18.1.0/24 .. 198.18.239.0/24

MAX_EMULATED_HOSTS = 200
EMULATED_FIRST = 10  # .10 / ::a: clear of the .1/.2 host addresses

ROLES = ("client", "server", "dut", "gateway", "attacker", "ids", "switch")
FORWARDING_ROLES = ("dut", "gateway")
OFFLOAD_SETTINGS = ("on", "off")
DUT = "dut"
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,19}$")
# An interface name a rule set may use (the kernel's rule: 1-15 characters, no `/`,
# no space or `:`); "lo" and the testbed bridge's are taken.
IFNAME_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,15}$")


def check_testbed_address(addr: str | IPv4Address | IPv6Address, *, where: str = "") -> None:
    """Refuse an address outside the testbed ranges (or inside the ACL-reserved /17)."""
    a = ip_address(addr) if isinstance(addr, str) else addr
    ok = (
        a in TESTBED_NET4 and a not in ACL_RESERVED_NET4
        if isinstance(a, IPv4Address)
        else a in TESTBED_NET6 and a not in ACL_RESERVED_NET6
    )
    if not ok:
        raise TestbedError(
            f"address {a} is outside the testbed ranges "
            f"({TESTBED_NET4} and {TESTBED_NET6}, without {ACL_RESERVED_NET4} "
            f"and {ACL_RESERVED_NET6})",
            where=where or None,
            fix="use addresses from 198.18.0.0/16, 198.19.128.0/17 or 2001:2::/48 only",
        )


@dataclass(frozen=True)
class HostSpec:
    """One host: its name, its zone (None for routers), whether it forwards, its role.

    The role defaults to the name when the name is a role ("client", "dut", ...),
    so the standard plan's hosts are named by their roles."""

    name: str
    zone: str | None
    forwarding: bool
    role: str = ""

    def __post_init__(self) -> None:
        if not self.role:
            if self.name not in ROLES:
                raise TestbedError(
                    f"host {self.name!r} needs a role", fix=f"give it one of {ROLES}"
                )
            object.__setattr__(self, "role", self.name)
        if self.role not in ROLES:
            raise TestbedError(
                f"host {self.name!r}: role {self.role!r} is not a role",
                fix=f"use one of {', '.join(ROLES)}",
            )

    @property
    def is_switch(self) -> bool:
        return self.role == "switch"


@dataclass(frozen=True)
class LinkSpec:
    """One veth link between hosts `a` and `b`, with each end's addresses, its rate
    (bit/s, None = unlimited), its queue (seconds a shaped link may buffer; None =
    secperf's default for the rate) and its offloads (None = the topology's).

    A switch end has no address: the link's subnet is the switch's LAN."""

    name: str
    a: str
    b: str
    net4: IPv4Network
    net6: IPv6Network
    addr4: dict[str, IPv4Interface]
    addr6: dict[str, IPv6Interface]
    rate_bps: int | None
    queue_s: float | None = None
    offloads: str | None = None

    def peer(self, role: str) -> str:
        """The host at the other end of this link."""
        if role == self.a:
            return self.b
        if role == self.b:
            return self.a
        raise KeyError(f"{role} is not on link {self.name}")

    def ends(self) -> tuple[str, str]:
        return (self.a, self.b)


def _link(
    n: int, a: str, b: str, host_a: int, host_b: int, rate_bps: int | None, name: str | None = None
) -> LinkSpec:
    """Link number n: 198.18.n.0/24 and 2001:2:0:n::/64, host numbers per end."""
    net4, net6 = subnet(n)
    return LinkSpec(
        name=name or f"{a}-{b}",
        a=a,
        b=b,
        net4=net4,
        net6=net6,
        addr4={
            a: IPv4Interface(f"{net4[host_a]}/{net4.prefixlen}"),
            b: IPv4Interface(f"{net4[host_b]}/{net4.prefixlen}"),
        },
        addr6={
            a: IPv6Interface(f"{net6[host_a]}/{net6.prefixlen}"),
            b: IPv6Interface(f"{net6[host_b]}/{net6.prefixlen}"),
        },
        rate_bps=rate_bps,
    )


def subnet(n: int) -> tuple[IPv4Network, IPv6Network]:
    """The n-th testbed subnet: 198.18.n.0/24 and 2001:2:0:n::/64."""
    if not 1 <= n <= MAX_SUBNETS:
        raise TestbedError(
            f"a testbed has at most {MAX_SUBNETS} subnets (asked for number {n})",
            fix="use fewer links or zones",
        )
    return IPv4Network(f"198.18.{n}.0/24"), IPv6Network(f"2001:2:0:{n:x}::/64")


@dataclass(frozen=True)
class GraphHost:
    """A host as a scenario describes it (before addresses are assigned)."""

    name: str
    role: str
    zone: str | None = None


@dataclass(frozen=True)
class GraphLink:
    """A link as a scenario describes it: its two ends and its own settings."""

    a: str
    b: str
    rate_bps: int | None = None
    queue_s: float | None = None
    offloads: str | None = None


def zone_graph(
    zone: str, clients: int, servers: int, router: str = DUT, rate_bps: int | None = None
) -> tuple[list[GraphHost], list[GraphLink]]:
    """A zone's LAN as graph hosts and links (the router itself not included):
    `<zone>-c1..`, `<zone>-s1..`, on a switch `<zone>-sw` joined to `router` when
    there is more than one host, else the one host linked to the router; every
    link at `rate_bps`."""
    members = [GraphHost(f"{zone}-c{i + 1}", "client", zone) for i in range(clients)]
    members += [GraphHost(f"{zone}-s{i + 1}", "server", zone) for i in range(servers)]
    if len(members) == 1:
        return members, [GraphLink(router, members[0].name, rate_bps)]
    switch = f"{zone}-sw"
    links = [GraphLink(router, switch, rate_bps)]
    links += [GraphLink(switch, m.name, rate_bps) for m in members]
    return [*members, GraphHost(switch, "switch", zone)], links


@dataclass(frozen=True)
class Segment:
    """One subnet and the hosts on it (two for a point-to-point link, many on a LAN)."""

    net4: IPv4Network
    net6: IPv6Network
    members: dict[str, tuple[IPv4Interface, IPv6Interface]] = field(default_factory=dict)


@dataclass(frozen=True)
class Topology:
    """Hosts, links and the number of emulated hosts on each side."""

    hosts: tuple[HostSpec, ...]
    links: tuple[LinkSpec, ...]
    emulated_hosts: int = 0
    # TSO/GSO/GRO on every veth (unless a link says otherwise): "on" = the kernel's
    # defaults, "off" = all three off (secperf.testbed.links.apply_offloads).
    offloads: str = "on"
    # Interface names by end: (host, peer) -> the name `host`'s end of its link to `peer`
    # carries inside the host (a rule set's `lan0`); every other end has the generated
    # name (secperf.testbed.links.ifname).
    ifnames: dict[tuple[str, str], str] = field(default_factory=dict)
    # Extra host addresses (/32, /128) per host, from MAPPED_HOSTS_NET4/6 (a rule-set
    # review's mapped addresses): on an end host's link towards its gateway, on a
    # forwarding host's loopback; every forwarding host routes each to its owner, every
    # end host routes the mapped ranges to its gateway (secperf.testbed.links).
    extra_addresses: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [h.name for h in self.hosts]
        if len(set(names)) != len(names):
            raise TestbedError(f"duplicate host names in {names}", fix="name each host once")
        for name in names:
            if not NAME_RE.match(name):
                raise TestbedError(
                    f"host name {name!r} is not usable",
                    fix="use 1-20 lowercase letters, digits and dashes, starting with a letter",
                )
        link_names = [link.name for link in self.links]
        if len(set(link_names)) != len(link_names):
            raise TestbedError(f"duplicate link names in {link_names}")
        pairs = [frozenset(link.ends()) for link in self.links]
        if len(set(pairs)) != len(pairs):
            raise TestbedError("two links join the same pair of hosts", fix="join them once")
        if self.offloads not in OFFLOAD_SETTINGS:
            raise TestbedError(
                f"offloads={self.offloads!r} is not a setting",
                fix=f"use one of {OFFLOAD_SETTINGS}",
            )
        if not 0 <= self.emulated_hosts <= MAX_EMULATED_HOSTS:
            raise TestbedError(
                f"emulated_hosts={self.emulated_hosts} is out of range",
                fix=f"use 0..{MAX_EMULATED_HOSTS}",
            )
        for link in self.links:
            self._check_link(link)
        self._check_segments()
        for name in ("client", "server"):
            if name in names:
                for fam in (4, 6):
                    for addr in self.emulated_addresses(name, fam):
                        check_testbed_address(addr, where=f"emulated host on {name}")
        self._check_ifnames()
        self._check_extra_addresses()

    def _check_ifnames(self) -> None:
        """Each named end is an end of a link, each name usable and once per host."""
        per_host: dict[str, str] = {}
        for (host, peer), name in self.ifnames.items():
            where = f"interface {name!r} of {host} (towards {peer})"
            if self.link_between(host, peer) is None:
                raise TestbedError(f"{where}: {host} has no link to {peer}", where=where)
            if not IFNAME_RE.match(name) or name in ("lo", "br"):
                raise TestbedError(
                    f"{where}: not a name this testbed can give an interface",
                    where=where,
                    fix="use 1-15 letters, digits and ._+- (not lo)",
                )
            key = f"{host}/{name}"
            if key in per_host:
                raise TestbedError(
                    f"{where}: {host} already has an interface {name!r} (towards {per_host[key]})",
                    where=where,
                    fix="give each of a host's links its own name",
                )
            per_host[key] = peer

    def _check_extra_addresses(self) -> None:
        """Extra addresses are host addresses in the mapped ranges, each on one host."""
        used = {str(i.ip) for lk in self.links for i in lk.addr4.values()}
        used |= {str(i.ip) for lk in self.links for i in lk.addr6.values()}
        for host, addrs in self.extra_addresses.items():
            where = f"extra address of {host}"
            if host not in self.names or self.host(host).is_switch:
                raise TestbedError(f"{where}: no such host (have {', '.join(self.names)})")
            for text in addrs:
                a = ip_address(text)
                net = MAPPED_HOSTS_NET4 if isinstance(a, IPv4Address) else MAPPED_HOSTS_NET6
                if a not in net:
                    raise TestbedError(
                        f"{where}: {a} is outside {net}",
                        where=where,
                        fix="map the address into the rule-set range (secperf.rulesets.addrmap)",
                    )
                if str(a) in used:
                    raise TestbedError(f"{where}: {a} is used twice", where=where)
                used.add(str(a))

    def extra_owner(self, family: int = 4) -> dict[str, str]:
        """Every extra address of this family -> the host that owns it."""
        return {
            a: host
            for host, addrs in self.extra_addresses.items()
            for a in addrs
            if ip_address(a).version == _family(family)
        }

    def next_hop(self, name: str, dst: str, family: int = 4) -> str | None:
        """The address `name` sends a packet for host `dst`'s primary address to: `dst`
        itself on a shared segment, else the derived route's hop or the gateway."""
        idx = 0 if _family(family) == 4 else 1
        for peer, seg in self.neighbours(name):
            if peer == dst:
                return str(seg.members[peer][idx].ip)
        target = ip_address(self.primary_address(dst, family))
        for net, via in self.routes(name, family):
            if target in ip_network(net):
                return via
        return self.gateway(name, family)

    def _check_link(self, link: LinkSpec) -> None:
        where = f"link {link.name}"
        names = {h.name for h in self.hosts}
        if link.a == link.b or not {link.a, link.b} <= names:
            raise TestbedError(f"{where} joins {link.a} and {link.b}, not two known hosts")
        if link.rate_bps is not None and link.rate_bps <= 0:
            raise TestbedError(f"{where}: rate {link.rate_bps} bit/s must be positive")
        if link.queue_s is not None and not 0 < link.queue_s <= 10:
            raise TestbedError(f"{where}: queue {link.queue_s} s must be in (0, 10] s")
        if link.offloads is not None and link.offloads not in OFFLOAD_SETTINGS:
            raise TestbedError(f"{where}: offloads={link.offloads!r}, use one of on, off")
        if not (
            link.net4.subnet_of(TESTBED_NET4)
            and not link.net4.overlaps(ACL_RESERVED_NET4)
            and not link.net4.overlaps(TUNNEL_NET4)
            and not link.net4.overlaps(MAPPED_HOSTS_NET4)
            and link.net6.subnet_of(TESTBED_NET6)
            and not link.net6.overlaps(MAPPED_HOSTS_NET6)
            and not link.net6.overlaps(ACL_RESERVED_NET6)
            and not link.net6.overlaps(TUNNEL_NET6)
        ):
            raise TestbedError(
                f"{where}: {link.net4} / {link.net6} is outside the testbed ranges",
                where=where,
                fix="use subnets of 198.18.0.0/16 and 2001:2::/48 (not the tunnel range)",
            )
        switches = {e for e in link.ends() if self.host(e).is_switch}
        if len(switches) == 2:
            raise TestbedError(f"{where} joins two switches", fix="join them through a host")
        addressed = set(link.ends()) - switches
        if set(link.addr4) != addressed or set(link.addr6) != addressed:
            raise TestbedError(f"{where}: needs one v4 and one v6 address per host end")
        ifaces: list[IPv4Interface | IPv6Interface] = [*link.addr4.values(), *link.addr6.values()]
        for iface in ifaces:
            check_testbed_address(iface.ip, where=where)
            if iface.network != (link.net4 if iface.version == 4 else link.net6):
                raise TestbedError(f"{where}: {iface} is not in the link's subnet")

    def _check_segments(self) -> None:
        """Each switch's links share one subnet; no subnet serves two segments; no
        address is used twice."""
        seen: dict[IPv4Network, str] = {}
        used: set[str] = set()
        for key, seg in self._segment_map().items():
            if seg.net4 in seen:
                raise TestbedError(f"subnet {seg.net4} is used by {seen[seg.net4]} and {key}")
            seen[seg.net4] = key
            for a4, a6 in seg.members.values():
                for a in (str(a4.ip), str(a6.ip)):
                    if a in used:
                        raise TestbedError(f"address {a} is used twice ({key})")
                    used.add(a)

    def _segment_map(self) -> dict[str, Segment]:
        """Segment key (a link name, or `switch:NAME`) -> its subnet and members."""
        out: dict[str, Segment] = {}
        for link in self.links:
            sw = next((e for e in link.ends() if self.host(e).is_switch), None)
            key = f"switch:{sw}" if sw else link.name
            seg = out.setdefault(key, Segment(link.net4, link.net6))
            if (seg.net4, seg.net6) != (link.net4, link.net6):
                raise TestbedError(
                    f"link {link.name}: every link of switch {sw} must share its subnet "
                    f"({seg.net4}), not {link.net4}"
                )
            for end in link.ends():
                if end != sw:
                    seg.members[end] = (link.addr4[end], link.addr6[end])
        return out

    # -- construction ------------------------------------------------------------

    @classmethod
    def standard(
        cls,
        *,
        link_rate_bps: int | None = None,
        direct: bool = False,
        attacker: bool = False,
        emulated_hosts: int = 0,
        offloads: str = "on",
        ids: bool = False,
    ) -> Topology:
        """client – dut – server, optionally a direct client–server link, an attacker and
        an ids host (a sensor on its own link to the dut, for a mirror of its traffic).

        The rate, when given, shapes every link (the direct one too, so that the
        direct baseline runs at the same rate as the path through the dut).
        """
        hosts = [
            HostSpec("client", "inside", False),
            HostSpec(DUT, None, True),
            HostSpec("server", "outside", False),
        ]
        links = [
            _link(1, "client", DUT, 2, 1, link_rate_bps),
            _link(2, DUT, "server", 1, 2, link_rate_bps),
        ]
        if direct:
            links.append(_link(3, "client", "server", 1, 2, link_rate_bps))
        if attacker:
            hosts.append(HostSpec("attacker", "outside", False))
            links.append(_link(4, "attacker", DUT, 2, 1, link_rate_bps))
        if ids:
            hosts.append(HostSpec("ids", None, False))
            links.append(_link(5, DUT, "ids", 1, 2, link_rate_bps))
        return cls(tuple(hosts), tuple(links), emulated_hosts, offloads)

    @classmethod
    def graph(
        cls,
        hosts: Sequence[GraphHost],
        links: Sequence[GraphLink],
        *,
        link_rate_bps: int | None = None,
        offloads: str = "on",
    ) -> Topology:
        """A graph from a scenario's [topology]: subnets numbered in link order (a
        switch's LAN takes the number of its first link), addresses assigned per
        subnet, forwarding hosts first. `link_rate_bps` shapes every link that has
        no rate of its own."""
        specs = tuple(HostSpec(h.name, h.zone, h.role in FORWARDING_ROLES, h.role) for h in hosts)
        roles = {h.name: h.role for h in hosts}
        for gl in links:
            for end in (gl.a, gl.b):
                if end not in roles:
                    raise TestbedError(
                        f"link {gl.a}-{gl.b} names host {end!r}, which [topology] does not have",
                        where="[topology] links",
                        fix=f"use one of: {', '.join(roles)}",
                    )
        # Subnet number per segment, in order of first appearance.
        seg_of: list[str] = []
        for gl in links:
            sw = gl.a if roles[gl.a] == "switch" else gl.b if roles[gl.b] == "switch" else None
            seg_of.append(f"switch:{sw}" if sw else f"{gl.a}-{gl.b}")
        numbers: dict[str, int] = {}
        for key in seg_of:
            numbers.setdefault(key, len(numbers) + 1)
        # Host numbers within each segment: forwarding hosts first, then in link order.
        members: dict[str, list[str]] = {}
        for gl, key in zip(links, seg_of, strict=True):
            for end in (gl.a, gl.b):
                if roles[end] != "switch" and end not in members.setdefault(key, []):
                    members[key].append(end)
        for key in members:
            members[key].sort(key=lambda h: roles[h] not in FORWARDING_ROLES)
        out: list[LinkSpec] = []
        for gl, key in zip(links, seg_of, strict=True):
            net4, net6 = subnet(numbers[key])
            ends = [e for e in (gl.a, gl.b) if roles[e] != "switch"]
            out.append(
                LinkSpec(
                    name=f"{gl.a}-{gl.b}",
                    a=gl.a,
                    b=gl.b,
                    net4=net4,
                    net6=net6,
                    addr4={e: IPv4Interface(f"{net4[members[key].index(e) + 1]}/24") for e in ends},
                    addr6={e: IPv6Interface(f"{net6[members[key].index(e) + 1]}/64") for e in ends},
                    rate_bps=gl.rate_bps if gl.rate_bps is not None else link_rate_bps,
                    queue_s=gl.queue_s,
                    offloads=gl.offloads,
                )
            )
        return cls(specs, tuple(out), 0, offloads)

    @classmethod
    def zoned(cls, zones: dict[str, tuple[int, int]], *, router: str = DUT) -> Topology:
        """A DUT joining zones' LANs: zone -> (clients, servers), as [topology.zones]."""
        hosts, links = [GraphHost(router, "dut")], []
        for zone, (clients, servers) in zones.items():
            zone_hosts, zone_links = zone_graph(zone, clients, servers, router)
            hosts += zone_hosts
            links += zone_links
        return cls.graph(hosts, links)

    # -- queries ---------------------------------------------------------

    @property
    def roles(self) -> tuple[str, ...]:
        """Every host's name (the standard plan names hosts by their roles)."""
        return tuple(h.name for h in self.hosts)

    @property
    def names(self) -> tuple[str, ...]:
        return self.roles

    def host(self, name: str) -> HostSpec:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(f"no host {name!r} (have {self.roles})")

    def hosts_with(self, *, role: str | None = None, zone: str | None = None) -> tuple[str, ...]:
        """Names of the hosts with this role and/or in this zone, in graph order."""
        return tuple(
            h.name
            for h in self.hosts
            if (role is None or h.role == role) and (zone is None or h.zone == zone)
        )

    @property
    def zones(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(h.zone for h in self.hosts if h.zone))

    def tag(self, name: str) -> str:
        """A short id of the host for interface names: its initial when no other
        host shares it, else the initial and its number among those that do."""
        initial = name[0]
        same = [h.name for h in self.hosts if h.name[0] == initial]
        return initial if len(same) == 1 else f"{initial}{same.index(name) + 1}"

    def link(self, name: str) -> LinkSpec:
        for link in self.links:
            if link.name == name:
                return link
        raise KeyError(f"no link {name!r} (have {[lk.name for lk in self.links]})")

    def link_between(self, a: str, b: str) -> LinkSpec | None:
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        return None

    def links_of(self, role: str) -> tuple[LinkSpec, ...]:
        return tuple(lk for lk in self.links if role in lk.ends())

    def interface(self, role: str, link: str, family: int = 4) -> IPv4Interface | IPv6Interface:
        """Address with prefix length of `role`'s end of `link`."""
        spec = self.link(link)
        table: dict[str, IPv4Interface] | dict[str, IPv6Interface]
        table = spec.addr4 if _family(family) == 4 else spec.addr6
        if role not in table:
            raise KeyError(f"{role} is not on link {link}")
        return table[role]

    def address(self, role: str, link: str, family: int = 4) -> str:
        """Bare address of `role`'s end of `link`, e.g. '198.18.1.2'."""
        return str(self.interface(role, link, family).ip)

    def primary_interface(self, name: str, family: int = 4) -> IPv4Interface | IPv6Interface:
        """The host's address on its first link toward a forwarding host (else its
        first link): where the rest of the testbed reaches it."""
        own = [lk for lk in self.links_of(name) if name in lk.addr4]
        if not own:
            raise TestbedError(f"host {name!r} has no address", fix="link it to a host or switch")
        toward = [lk for lk in own if self._forwarding_neighbours(name, lk)]
        link = (toward or own)[0]
        return self.interface(name, link.name, family)

    def primary_address(self, name: str, family: int = 4) -> str:
        return str(self.primary_interface(name, family).ip)

    def server_address(self, family: int = 4, via: str = "dut", server: str = "server") -> str:
        """The server address a client targets: via "dut" (through it) or "direct"."""
        if via == "direct":
            link = self.link_between("client", server)
            if link is None:
                raise TestbedError(
                    "this topology has no direct path to the server",
                    fix="build the topology with direct=True",
                )
            return self.address(server, link.name, family)
        if via != "dut":
            raise ValueError(f"via must be 'dut' or 'direct', not {via!r}")
        if server not in self.roles:
            raise TestbedError(f"this topology has no host {server!r}")
        return self.primary_address(server, family)

    def _forwarding_neighbours(self, name: str, link: LinkSpec) -> list[str]:
        """Forwarding hosts that `name` reaches in one hop over `link` (through a switch,
        every forwarding member of its LAN)."""
        peer = link.peer(name)
        if self.host(peer).is_switch:
            return [
                m
                for lk in self.links_of(peer)
                if (m := lk.peer(peer)) != name
                if self.host(m).forwarding
            ]
        return [peer] if self.host(peer).forwarding else []

    def segments(self) -> list[Segment]:
        return list(self._segment_map().values())

    def neighbours(self, name: str) -> list[tuple[str, Segment]]:
        """(host, shared segment) for every host one hop from `name`, in graph order."""
        out: list[tuple[str, Segment]] = []
        for seg in self.segments():
            if name in seg.members:
                out += [(m, seg) for m in seg.members if m != name]
        return out

    def gateway(self, role: str, family: int = 4) -> str | None:
        """The default route of an end host: its first forwarding neighbour's address
        on the segment they share (None for forwarding hosts and isolated ones)."""
        if self.host(role).forwarding:
            return None
        for peer, seg in self.neighbours(role):
            if self.host(peer).forwarding:
                return str(seg.members[peer][0 if _family(family) == 4 else 1].ip)
        return None

    def routes(self, name: str, family: int = 4) -> list[tuple[str, str]]:
        """(subnet, next hop) for every subnet `name` is not on whose shortest path
        through forwarding hosts starts elsewhere than its default gateway."""
        idx = 0 if _family(family) == 4 else 1
        default = self.gateway(name, family)
        # Breadth-first from `name`; only forwarding hosts pass packets on.
        first_hop: dict[str, str] = {}
        queue: deque[str] = deque()
        for peer, seg in self.neighbours(name):
            if self.host(peer).forwarding and peer not in first_hop:
                first_hop[peer] = str(seg.members[peer][idx].ip)
                queue.append(peer)
        while queue:
            here = queue.popleft()
            for peer, _seg in self.neighbours(here):
                if self.host(peer).forwarding and peer not in first_hop and peer != name:
                    first_hop[peer] = first_hop[here]
                    queue.append(peer)
        out: list[tuple[str, str]] = []
        for seg in self.segments():
            if name in seg.members:
                continue
            net = str(seg.net4 if idx == 0 else seg.net6)
            # The nearest forwarding host on that segment, by BFS order.
            for router in first_hop:
                if router in seg.members:
                    if first_hop[router] != default:
                        out.append((net, first_hop[router]))
                    break
        return out

    def path(self, src: str, dst: str) -> list[str]:
        """The hosts a packet from `src` to `dst`'s primary address crosses (both
        included, switches left out), following the derived routes."""
        target = self.primary_address(dst)
        hops = [src]
        here = src
        for _ in range(len(self.hosts) + 1):
            if here == dst:
                return hops
            seg_here = [s for s in self.segments() if here in s.members]
            on_link = next((s for s in seg_here if ip_address(target) in s.net4), None)
            if on_link is not None:
                hops.append(dst)
                return hops
            nxt = next(
                (via for net, via in self.routes(here) if ip_address(target) in IPv4Network(net)),
                self.gateway(here),
            )
            if nxt is None:
                raise TestbedError(f"no route from {here} to {dst} ({target})")
            here = next(
                m for s in seg_here for m, (a4, _a6) in s.members.items() if str(a4.ip) == nxt
            )
            hops.append(here)
        raise TestbedError(f"the routes from {src} to {dst} loop")

    def emulated_addresses(self, role: str, family: int = 4) -> tuple[str, ...]:
        """The extra source/destination addresses of the emulated hosts on `role`'s dut link."""
        if self.emulated_hosts == 0 or role not in ("client", "server"):
            return ()
        link = self.link_between(role, DUT)
        if link is None:
            return ()
        net = link.net4 if _family(family) == 4 else link.net6
        return tuple(str(net[EMULATED_FIRST + i]) for i in range(self.emulated_hosts))

    def describe(self) -> dict[str, object]:
        """The graph as plain data, for run.json and the report's drawing."""
        return {
            "hosts": [
                {"name": h.name, "role": h.role, "zone": h.zone, "forwarding": h.forwarding}
                for h in self.hosts
            ],
            "links": [
                {
                    "name": lk.name,
                    "ends": [lk.a, lk.b],
                    "net4": str(lk.net4),
                    "net6": str(lk.net6),
                    "addresses": {h: str(i) for h, i in lk.addr4.items()},
                    "rate_bps": lk.rate_bps,
                    "queue_s": lk.queue_s,
                    "offloads": lk.offloads or self.offloads,
                }
                for lk in self.links
            ],
            "emulated_hosts": self.emulated_hosts,
            "offloads": self.offloads,
            **(
                {
                    "ifnames": [
                        {"host": h, "peer": p, "name": n} for (h, p), n in self.ifnames.items()
                    ]
                }
                if self.ifnames
                else {}
            ),
            **({"extra_addresses": dict(self.extra_addresses)} if self.extra_addresses else {}),
        }


def _family(family: int) -> int:
    if family not in (4, 6):
        raise ValueError(f"family must be 4 or 6, not {family!r}")
    return family
