"""The testbed graph: hosts, links, addresses and routes, with no side effects.

A Topology is pure data. `Testbed.build` turns it into namespaces and veths; the
mechanisms and workloads read addresses from it. Every address comes from the
benchmarking ranges (RFC 2544 198.18.0.0/15, RFC 5180 2001:2::/48) and is
checked on construction, so a testbed can never answer for a real network.
198.19.0.0/16 and 2001:2:0:ff::/64 are kept free: ACL generators draw their
non-matching entries from them, so no testbed host may ever live there.

Address plan (link: v4 net / v6 net, host numbers):
  client-dut    198.18.1.0/24 2001:2:0:1::/64   dut .1/::1  client .2/::2
  dut-server    198.18.2.0/24 2001:2:0:2::/64   dut .1/::1  server .2/::2
  client-server 198.18.3.0/24 2001:2:0:3::/64   client .1/::1  server .2/::2  (direct=True)
  attacker-dut  198.18.4.0/24 2001:2:0:4::/64   dut .1/::1  attacker .2/::2  (attacker=True)
Emulated hosts (i < N ≤ 200): client 198.18.1.(10+i) and 2001:2:0:1::(a+i),
server 198.18.2.(10+i) and 2001:2:0:2::(a+i), as extra addresses on the
host's interface toward the dut.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import (
    IPv4Address,
    IPv4Interface,
    IPv4Network,
    IPv6Address,
    IPv6Interface,
    IPv6Network,
    ip_address,
)

from secperf.errors import TestbedError

TESTBED_NET4 = IPv4Network("198.18.0.0/15")
TESTBED_NET6 = IPv6Network("2001:2::/48")
# Generated non-matching ACL entries come from here; no host may use them.
ACL_RESERVED_NET4 = IPv4Network("198.19.0.0/16")
ACL_RESERVED_NET6 = IPv6Network("2001:2:0:ff::/64")

MAX_EMULATED_HOSTS = 200
EMULATED_FIRST = 10  # .10 / ::a: clear of the .1/.2 host addresses

ROLES = ("client", "dut", "server", "attacker", "ids")
OFFLOAD_SETTINGS = ("on", "off")
DUT = "dut"


def check_testbed_address(addr: str | IPv4Address | IPv6Address, *, where: str = "") -> None:
    """Refuse an address outside the testbed ranges (or inside the ACL-reserved /16)."""
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
            fix="use addresses from 198.18.0.0/16 or 2001:2::/48 only",
        )


@dataclass(frozen=True)
class HostSpec:
    """One host: its role, its zone (inside/outside, None for the dut) and forwarding."""

    role: str
    zone: str | None
    forwarding: bool


@dataclass(frozen=True)
class LinkSpec:
    """One veth link between hosts `a` and `b`, with each end's addresses and an optional rate."""

    name: str
    a: str
    b: str
    net4: IPv4Network
    net6: IPv6Network
    addr4: dict[str, IPv4Interface]
    addr6: dict[str, IPv6Interface]
    rate_bps: int | None

    def peer(self, role: str) -> str:
        """The role at the other end of this link."""
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
    net4 = IPv4Network(f"198.18.{n}.0/24")
    net6 = IPv6Network(f"2001:2:0:{n:x}::/64")
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


@dataclass(frozen=True)
class Topology:
    """Hosts, links and the number of emulated hosts on each side."""

    hosts: tuple[HostSpec, ...]
    links: tuple[LinkSpec, ...]
    emulated_hosts: int = 0
    # TSO/GSO/GRO on every veth: "on" = the kernel's defaults, "off" = all three off
    # (secperf.testbed.links.apply_offloads).
    offloads: str = "on"

    def __post_init__(self) -> None:
        roles = [h.role for h in self.hosts]
        if len(set(roles)) != len(roles):
            raise TestbedError(f"duplicate host roles in {roles}", fix="give each host one role")
        # Interface names carry the first letter of each end's role.
        initials = [r[0] for r in roles]
        if len(set(initials)) != len(initials) or not all(r.isalpha() for r in roles):
            raise TestbedError(
                f"host roles {roles} must be alphabetic with distinct first letters",
                fix=f"use roles from {ROLES}",
            )
        names = [link.name for link in self.links]
        if len(set(names)) != len(names):
            raise TestbedError(f"duplicate link names in {names}")
        pairs = [frozenset(link.ends()) for link in self.links]
        if len(set(pairs)) != len(pairs):
            raise TestbedError("two links join the same pair of hosts")
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
            self._check_link(link, set(roles))
        for role in ("client", "server"):
            if role in roles:
                for fam in (4, 6):
                    for addr in self.emulated_addresses(role, fam):
                        check_testbed_address(addr, where=f"emulated host on {role}")

    @staticmethod
    def _check_link(link: LinkSpec, roles: set[str]) -> None:
        where = f"link {link.name}"
        if link.a == link.b or not {link.a, link.b} <= roles:
            raise TestbedError(f"{where} joins {link.a} and {link.b}, not two known hosts")
        if link.rate_bps is not None and link.rate_bps <= 0:
            raise TestbedError(f"{where}: rate {link.rate_bps} bit/s must be positive")
        if not (
            link.net4.subnet_of(TESTBED_NET4)
            and not link.net4.overlaps(ACL_RESERVED_NET4)
            and link.net6.subnet_of(TESTBED_NET6)
            and not link.net6.overlaps(ACL_RESERVED_NET6)
        ):
            raise TestbedError(
                f"{where}: {link.net4} / {link.net6} is outside the testbed ranges",
                where=where,
                fix="use subnets of 198.18.0.0/16 and 2001:2::/48",
            )
        if set(link.addr4) != {link.a, link.b} or set(link.addr6) != {link.a, link.b}:
            raise TestbedError(f"{where}: needs one v4 and one v6 address per end")
        ifaces: list[IPv4Interface | IPv6Interface] = [*link.addr4.values(), *link.addr6.values()]
        for iface in ifaces:
            check_testbed_address(iface.ip, where=where)
            if iface.network != (link.net4 if iface.version == 4 else link.net6):
                raise TestbedError(f"{where}: {iface} is not in the link's subnet")

    @classmethod
    def standard(
        cls,
        *,
        link_rate_bps: int | None = None,
        direct: bool = False,
        attacker: bool = False,
        emulated_hosts: int = 0,
        offloads: str = "on",
    ) -> Topology:
        """client – dut – server, optionally a direct client–server link and an attacker.

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
        return cls(tuple(hosts), tuple(links), emulated_hosts, offloads)

    # -- queries ---------------------------------------------------------

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(h.role for h in self.hosts)

    def host(self, role: str) -> HostSpec:
        for h in self.hosts:
            if h.role == role:
                return h
        raise KeyError(f"no host with role {role!r} (have {self.roles})")

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

    def server_address(self, family: int = 4, via: str = "dut") -> str:
        """The server address a client targets: via "dut" (through it) or "direct"."""
        if via == "dut":
            link = self.link_between(DUT, "server")
        elif via == "direct":
            link = self.link_between("client", "server")
        else:
            raise ValueError(f"via must be 'dut' or 'direct', not {via!r}")
        if link is None:
            raise TestbedError(
                f"this topology has no {via} path to the server",
                fix="build the topology with direct=True" if via == "direct" else None,
            )
        return self.address("server", link.name, family)

    def gateway(self, role: str, family: int = 4) -> str | None:
        """The dut's address on `role`'s link to it: `role`'s default route (None for the dut)."""
        if role == DUT:
            return None
        link = self.link_between(role, DUT)
        if link is None:
            return None
        return self.address(DUT, link.name, family)

    def emulated_addresses(self, role: str, family: int = 4) -> tuple[str, ...]:
        """The extra source/destination addresses of the emulated hosts on `role`'s dut link."""
        if self.emulated_hosts == 0 or role not in ("client", "server"):
            return ()
        link = self.link_between(role, DUT)
        if link is None:
            return ()
        net = link.net4 if _family(family) == 4 else link.net6
        return tuple(str(net[EMULATED_FIRST + i]) for i in range(self.emulated_hosts))


def _family(family: int) -> int:
    if family not in (4, 6):
        raise ValueError(f"family must be 4 or 6, not {family!r}")
    return family
