"""The map from a rule set's addresses to the testbed's (owner: the address map).

Every prefix, address and range that the rule sets and the traffic name is mapped
into MAPPED_NET4 / MAPPED_NET6 so that each relation among them holds after the map
as before: containment (10.0.0.0/8 contains 10.1.0.0/16), disjointness (neither
contains 192.168.5.200) and address order (so ranges keep their members). A construct
the map cannot preserve is refused with its file:line.

How: CIDR prefixes are always nested or disjoint, so the named networks form a forest
(a named address is a /32 or /128 leaf). Each node gets the smallest aligned
power-of-two block that holds, in address order, its children's blocks and a few
addresses for each stretch of its own (the "gaps": addresses in it and in none of its
children), so an address taken from a gap lands in the same gap after the map. The
first address of a prefix maps to its block's first, the last to its block's last
(a child that ends where its parent ends is laid out at the block's end), which makes
the map monotone on every address. The roots sit in a virtual /0 whose block is the
whole MAPPED_NET (a named /0 is that node).

The rewriting of rule files is in nft_rewrite and ipt_rewrite; this module re-exports
them (`addrmap.map_nft`, `addrmap.map_iptables`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from ipaddress import IPv4Network, IPv6Network, ip_address, ip_network
from typing import Any

from secperf.errors import MechanismError
from secperf.rulesets.ipt_rewrite import map_iptables
from secperf.rulesets.model import Flow, Named
from secperf.rulesets.nft_rewrite import map_nft

__all__ = [
    "MAPPED_NET4",
    "MAPPED_NET6",
    "AddressMap",
    "MapEntry",
    "map_iptables",
    "map_nft",
]

# Inside the testbed ranges, apart from the links' subnets (198.18.1-239.0/24), the
# tunnels' inner addresses (198.18.240.0/20) and the ACL's never-matching entries
# (198.19.0.0/17).
MAPPED_NET4 = IPv4Network("198.19.128.0/17")
MAPPED_NET6 = IPv6Network("2001:2:0:8000::/49")
# Addresses of its own each gap of a prefix keeps at least (or all it has when fewer):
# room for traffic inside a prefix and in none of its children, and for the gap's first
# and last address to stay apart from its neighbours.
SPARE = 4
FORMAT_VERSION = 1

Net = IPv4Network | IPv6Network
_FIX_NAME = (
    "name it first: every address the traffic uses is collected with the rule set's "
    "(secperf.rulesets.prefixes) before AddressMap.build, or added with AddressMap.extend"
)


@dataclass(frozen=True)
class MapEntry:
    """One named network and where it lands: original and mapped in CIDR form."""

    original: str
    mapped: str
    where: str
    what: str


@dataclass
class _Node:
    orig: Net
    named: Named | None  # None for the virtual /0 when no rule names a /0
    children: list[_Node] = field(default_factory=list)
    size: int = 0  # the block's number of addresses
    start: int = 0  # the block's first address
    firsts: list[int] = field(default_factory=list)  # children's first addresses, sorted

    @property
    def first(self) -> int:
        return int(self.orig.network_address)

    @property
    def last(self) -> int:
        return int(self.orig.broadcast_address)

    @property
    def end(self) -> int:
        """The block's last address."""
        return self.start + self.size - 1

    def block(self) -> Net:
        bits = self.orig.max_prefixlen - (self.size.bit_length() - 1)
        return ip_network((self.start, bits))

    def walk(self) -> Iterator[_Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    def gaps(self) -> Iterator[tuple[int, int]]:
        """The original stretches of its own (first, last), one before each child and
        one after the last; a stretch may be empty (first > last)."""
        lo = self.first
        for child in self.children:
            yield lo, child.first - 1
            lo = child.last + 1
        yield lo, self.last


def _parse(value: str, where: str) -> Net:
    try:
        return ip_network(value.strip(), strict=False)
    except ValueError as exc:
        raise MechanismError(
            f"{value!r} is not an IPv4 or IPv6 address or prefix",
            where=where,
            fix="write an address (10.1.5.200), a prefix (10.1.0.0/16) or a range's ends",
        ) from exc


def _align_up(value: int, size: int) -> int:
    return -(-value // size) * size


def _pow2_at_least(value: int) -> int:
    return 1 << max(value - 1, 0).bit_length()


def _need(node: _Node) -> int:
    """The smallest block that holds the node's children and gaps (children first)."""
    for child in node.children:
        child.size = _need(child)
    cursor = 0
    for i, (lo, hi) in enumerate(node.gaps()):
        cursor += min(max(hi - lo + 1, 0), SPARE)
        if i < len(node.children):
            size = node.children[i].size
            cursor = _align_up(cursor, size) + size
    return _pow2_at_least(cursor)


def _place(node: _Node) -> None:
    """Lay the children out in the node's block, in address order, each aligned to its
    size; a last child that ends where the node ends goes to the block's end."""
    cursor = node.start
    for i, (lo, hi) in enumerate(node.gaps()):
        cursor += min(max(hi - lo + 1, 0), SPARE)
        if i < len(node.children):
            child = node.children[i]
            child.start = _align_up(cursor, child.size)
            cursor = child.start + child.size
    if node.children and node.children[-1].last == node.last:
        node.children[-1].start = node.end - node.children[-1].size + 1
    for child in node.children:
        _place(child)


def _forest(root: _Node, nodes: dict[Net, _Node]) -> None:
    """Hang every node under the smallest node that contains it (sorted by first address
    and then prefix length, a parent comes before its children)."""
    stack = [root]
    for net in sorted(nodes, key=lambda n: (int(n.network_address), n.prefixlen)):
        node = nodes[net]
        if node is root:
            continue
        while stack[-1] is not root and not net.subnet_of(stack[-1].orig):  # type: ignore[arg-type]
            stack.pop()
        stack[-1].children.append(node)
        stack.append(node)
    for node in root.walk():
        node.firsts = [c.first for c in node.children]


def _consumers(root: _Node) -> list[_Node]:
    """The largest blocks of the top level, for the message of a map that does not fit."""
    return sorted(root.children or [root], key=lambda n: (-n.size, n.first))[:3]


class _Family:
    """One address family's forest, placed in its MAPPED_NET."""

    def __init__(self, mapped: Net, nodes: dict[Net, _Node]) -> None:
        self.mapped = mapped
        everything = ip_network((0, 0)) if mapped.version == 4 else ip_network("::/0")
        self.root = nodes.get(everything) or _Node(everything, None)
        self.nodes = nodes
        _forest(self.root, nodes)
        self.root.start = int(mapped.network_address)
        self.root.size = mapped.num_addresses

    @classmethod
    def build(cls, mapped: Net, named: dict[Net, Named]) -> _Family:
        family = cls(mapped, {net: _Node(net, n) for net, n in named.items()})
        root = family.root
        need = _need(root)
        if need > root.size:
            raise family._too_large(need)
        _place(root)
        return family

    def _too_large(self, need: int) -> MechanismError:
        count = sum(1 for n in self.root.walk() if n.named is not None)
        big = _consumers(self.root)
        listed = "; ".join(
            f"{n.orig} ({n.named.where if n.named else 'the top level'}) needs {n.size} "
            f"addresses for {sum(1 for _ in n.walk())} networks and hosts"
            for n in big
        )
        return MechanismError(
            f"the {count} distinct IPv{self.mapped.version} networks and addresses the rule "
            f"sets and the traffic name need {need} testbed addresses, more than "
            f"{self.mapped} holds ({self.mapped.num_addresses}); the largest: {listed}",
            where=next((n.named.where for n in big if n.named is not None), None),
            fix="name fewer distinct prefixes or hosts (merge hosts into the prefix that "
            "holds them, or give the traffic fewer distinct addresses)",
        )

    def deepest(self, value: int) -> _Node:
        node = self.root
        while True:
            i = bisect.bisect_right(node.firsts, value) - 1
            if i < 0 or node.children[i].last < value:
                return node
            node = node.children[i]

    def address(self, value: int, text: str) -> int:
        """Where an address lands: a named one at its node, any other by its offset in
        the gap of the smallest named prefix that holds it, clamped inside that gap."""
        node = self.deepest(value)
        if value == node.first:
            return node.start
        if value == node.last:
            return node.end
        i = bisect.bisect_right(node.firsts, value)
        kids = node.children
        lo = node.start + 1 if i == 0 else kids[i - 1].end + 1
        hi = node.end - 1 if i == len(kids) else kids[i].start - 1
        if lo > hi:
            raise MechanismError(
                f"{text} lies in {node.orig} but the map kept no address for it there "
                "that stays between its neighbours",
                fix=_FIX_NAME,
            )
        if i == len(kids) and kids:  # the last gap hangs from the block's end
            want = node.end - (node.last - value)
        else:
            want = lo + (value - (node.first + 1 if i == 0 else kids[i - 1].last + 1))
        return min(max(want, lo), hi)


class AddressMap:
    """Named networks and addresses, IPv4 and IPv6, placed in the testbed's ranges."""

    def __init__(self, v4: _Family, v6: _Family) -> None:
        self._families = {4: v4, 6: v6}

    @classmethod
    def build(cls, named: Sequence[Named]) -> AddressMap:
        """Place every named network; the first naming of a network gives its where.
        Too many to fit raises MechanismError naming the largest consumers."""
        parsed: dict[Net, Named] = {}
        for item in named:
            parsed.setdefault(_parse(item.network, item.where), item)
        return cls(
            _Family.build(MAPPED_NET4, {k: v for k, v in parsed.items() if k.version == 4}),
            _Family.build(MAPPED_NET6, {k: v for k, v in parsed.items() if k.version == 6}),
        )

    def extend(self, more: Sequence[Named]) -> AddressMap:
        """A new map over the old names and `more` (rebuilt: the old map's addresses
        may move, so map flows and rules with the map that has them all)."""
        return AddressMap.build([*self.named(), *more])

    def named(self) -> list[Named]:
        return [n.named for f in self._families.values() for n in f.root.walk() if n.named]

    # lookups

    def address(self, orig: str) -> str:
        """The mapped address of any address: a named one where it was placed, any other
        by its offset in its gap of the smallest named prefix holding it (inside the same
        prefixes, between the same named neighbours). Two addresses that were not named
        may share one mapped address when the gap is short: name the traffic's
        addresses before build (or extend) to keep them apart."""
        try:
            value = ip_address(orig.strip())
        except ValueError as exc:
            raise MechanismError(
                f"{orig!r} is not an IPv4 or IPv6 address",
                fix="give an address such as 10.1.5.200 or 2001:db8::1",
            ) from exc
        return str(ip_address(self._families[value.version].address(int(value), orig)))

    def network(self, orig: str) -> str:
        """The mapped network of a named network (an address: its /32 or /128)."""
        net = _parse(orig, "the address map")
        node = self._families[net.version].nodes.get(net)
        if node is not None:
            return str(node.block())
        if net.num_addresses == 1:
            return f"{self.address(str(net.network_address))}/{net.prefixlen}"
        raise MechanismError(f"{orig} is not a network the map was built with", fix=_FIX_NAME)

    def range(self, lo: str, hi: str) -> tuple[str, str]:
        """The mapped ends of an address range (monotone: members stay members)."""
        a, b = ip_address(lo.strip()), ip_address(hi.strip())
        if a.version != b.version or int(a) > int(b):
            raise MechanismError(
                f"{lo}-{hi} is not a range of addresses",
                fix="write the lower end first, both of one family",
            )
        return self.address(lo), self.address(hi)

    def flow(self, f: Flow) -> Flow:
        """The flow in testbed addresses (src, dst, and the DNAT target it reaches)."""
        served = None if f.served_by is None else self.address(f.served_by)
        return replace(f, src=self.address(f.src), dst=self.address(f.dst), served_by=served)

    def knows(self, orig: str) -> bool:
        """Whether the map was built with this network or address (a /32 or bare)."""
        try:
            net = ip_network(orig.strip(), strict=False)
        except ValueError:
            return False
        return net in self._families[net.version].nodes

    def known_address(self, orig: str, obj: str) -> str:
        """The mapped address of a *named* address, for rewriting a rule file: an
        address the map was not built with means the collector missed it."""
        net = _parse(orig, obj)
        if net.num_addresses != 1 or "/" in orig:
            return self.known_network(orig, obj)
        return str(self._known(net, orig, obj).block().network_address)

    def known_network(self, orig: str, obj: str) -> str:
        """The mapped network of a *named* network, for rewriting a rule file."""
        return str(self._known(_parse(orig, obj), orig, obj).block())

    def _known(self, net: Net, orig: str, obj: str) -> _Node:
        node = self._families[net.version].nodes.get(net)
        if node is None:
            raise MechanismError(
                f"{orig} in {obj} is not in the address map (the prefixes collected from "
                "the rule set missed it)",
                where=obj,
                fix="report it as a bug of secperf.rulesets.prefixes, with the rule set",
            )
        return node

    # what is kept and printed

    def entries(self) -> list[MapEntry]:
        return [
            MapEntry(str(n.orig), str(n.block()), n.named.where, n.named.what)
            for f in self._families.values()
            for n in f.root.walk()
            if n.named is not None
        ]

    def describe(self) -> list[str]:
        """One line a named network: "10.1.0.0/16 -> 198.19.128.0/22  router.nft:9"."""
        lines = []
        for e in self.entries():
            orig, mapped = e.original, e.mapped
            if orig.endswith(("/32", "/128")) and ip_network(orig).num_addresses == 1:
                orig, mapped = orig.split("/")[0], mapped.split("/")[0]
            lines.append(f"{orig} -> {mapped}  {e.where}")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, "entries": [asdict(e) for e in self.entries()]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AddressMap:
        """The map a run directory kept, as it was placed (not rebuilt: a later secperf
        may lay maps out differently, and the kept map is what the run used)."""
        if data.get("version") != FORMAT_VERSION:
            raise MechanismError(
                f"address map format {data.get('version')!r} is not {FORMAT_VERSION}",
                where="addrmap.json",
                fix="rebuild the map from the rule set with this secperf",
            )
        nodes: dict[int, dict[Net, _Node]] = {4: {}, 6: {}}
        for raw in data.get("entries", []):
            e = MapEntry(**raw)
            orig, mapped = _parse(e.original, e.where), _parse(e.mapped, e.where)
            node = _Node(orig, Named(e.original, e.where, e.what))
            node.start, node.size = int(mapped.network_address), mapped.num_addresses
            nodes[orig.version][orig] = node
        families = [_Family(net, nodes[net.version]) for net in (MAPPED_NET4, MAPPED_NET6)]
        for family in families:
            _check_kept(family)
        return cls(*families)


def _check_kept(family: _Family) -> None:
    """A kept map must still keep the relations: each block inside its parent's, and
    siblings in address order without overlap."""
    for node in family.root.walk():
        previous = node.start - 1
        for child in node.children:
            if child.start <= previous or child.end > node.end or child.start < node.start:
                raise MechanismError(
                    f"the kept address map places {child.orig} at {child.block()}, which "
                    f"breaks its relations within {node.orig}",
                    where="addrmap.json",
                    fix="rebuild the map from the rule set",
                )
            previous = child.end
