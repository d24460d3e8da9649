"""Every prefix, address and range end a rule set names, and addresses chosen among them.

`named_prefixes` lists what the address map must place, each with the file:line that
names it: nft's address matches (a single address, a prefix, a range, an anonymous
set, a named set's elements, maps' keys and values of an address type, the address
parts of concatenations) and NAT targets; iptables' -s/-d, iprange's ranges and
--to-destination/--to-source. What names addresses that cannot be listed (an ipset,
an `@set` that does not exist) is refused with the rule's file:line.

`pick_address` and `outside_all` choose the addresses of derived flows so that each
lands where its rule means it to: in the prefix the rule names and in no narrower
prefix that other rules treat otherwise.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Sequence
from typing import Any

from secperf.errors import MechanismError
from secperf.rulesets import matches
from secperf.rulesets.model import Named, Rule, RuleSet

IPNet = ipaddress.IPv4Network | ipaddress.IPv6Network
# Where an unconstrained side ("the internet") is taken from: the documentation
# ranges first (RFC 5737 / RFC 3849), then wider public space.
_OUTSIDE4 = ("198.51.100.0/24", "203.0.113.0/24", "192.0.2.0/24")
_OUTSIDE6 = ("2001:db8:5100::/48", "2001:db8::/32", "3fff::/20", "2a00::/12", "2600::/12")
_NAT = ("dnat", "snat")


def named_prefixes(rs: RuleSet) -> list[Named]:
    out: list[Named] = []
    seen: set[tuple[str, str, str]] = set()

    def add(net: str, where: str, what: str) -> None:
        if (net, where, what) not in seen:
            seen.add((net, where, what))
            out.append(Named(network=net, where=where, what=what))

    if rs.format == "iptables":
        for rule in rs.rules():
            for net, what in _iptables(rule):
                add(net, rule.ref.where(), what)
        return out
    sets = matches.sets_of(rs)
    for key, s in sets.items():
        where = rs.set_lines.get(key, f"{rs.source} (set {' '.join(key)})")
        for net, what in _set_addresses(s, where):
            add(net, where, what)
    for rule in rs.rules():
        for net, what in _nft_rule(rule, rs, sets):
            add(net, rule.ref.where(), what)
    return out


def _set_addresses(s: dict[str, Any], where: str) -> Iterator[tuple[str, str]]:
    """The address parts of a named set's elements, and of a map's values."""
    keys = matches._types(s)
    values = matches._types(s, "map") if "map" in s else []
    for e in s.get("elem", []):
        key, value = (e[0], e[1]) if isinstance(e, list) else (e, None)
        try:
            yield from _typed(key, keys)
            if value is not None:
                yield from _typed(value, values)
        except matches.Unresolvable as exc:
            raise MechanismError(f"set {s['name']}: {exc}", where=where) from exc


def _typed(value: Any, types: list[str]) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict) and "elem" in value:
        value = value["elem"]["val"]
    parts = value["concat"] if isinstance(value, dict) and "concat" in value else [value]
    for t, part in zip(types, parts, strict=False):
        if t in matches.ADDRESS_TYPES:
            yield from matches.address_values(part, _no_set)


def _no_set(name: str) -> list[Any]:
    raise matches.Unresolvable(f"@{name} inside a set")


def _fields(left: Any) -> list[bool]:
    """For each part of a match's left side: whether it is an address field."""
    parts = left["concat"] if isinstance(left, dict) and "concat" in left else [left]
    out = []
    for p in parts:
        pay = p.get("payload", {}) if isinstance(p, dict) else {}
        out.append(pay.get("protocol") in ("ip", "ip6") and pay.get("field") in ("saddr", "daddr"))
    return out


def _nft_rule(
    rule: Rule, rs: RuleSet, sets: dict[tuple[str, str, str], dict[str, Any]]
) -> Iterator[tuple[str, str]]:
    fam, table = rule.ref.family, rule.ref.table

    def named_set(name: str) -> dict[str, Any]:
        s = sets.get((fam, table, name))
        if s is None:
            raise MechanismError(
                f"@{name}: no set or map of that name in table {fam} {table}",
                where=rule.ref.where(),
                fix="declare the set in the file (its elements are what the map places)",
            )
        return s

    for stmt in rule.expr:
        if not isinstance(stmt, dict) or len(stmt) != 1:
            continue
        ((key, val),) = stmt.items()
        try:
            if key == "match":
                yield from _match_values(val["left"], val["right"], named_set)
            elif key == "vmap":
                yield from _match_values(val["key"], val["data"], named_set, is_map=True)
            elif key in _NAT and isinstance(val, dict) and "addr" in val:
                addr = val["addr"]
                if isinstance(addr, dict) and "map" in addr:
                    named_or_inline = addr["map"]["data"]
                    if isinstance(named_or_inline, str) and named_or_inline.startswith("@"):
                        named_set(named_or_inline[1:])  # its values are listed with the sets
                    else:
                        for e in named_or_inline.get("set", []):
                            yield from _nat_values(e[1] if isinstance(e, list) else e)
                else:
                    yield from _nat_values(addr)
        except matches.Unresolvable as exc:
            raise MechanismError(
                f"cannot list the addresses it names: {exc}",
                where=rule.ref.where(),
                fix="name addresses, prefixes, ranges or sets of them",
            ) from exc


def _nat_values(v: Any) -> Iterator[tuple[str, str]]:
    if isinstance(v, dict) and "concat" in v:
        v = v["concat"][0]
    for net, what in matches.address_values(v, _no_set):
        yield net, "nat target" if what == "address" else what


def _match_values(
    left: Any, right: Any, named_set: Any, is_map: bool = False
) -> Iterator[tuple[str, str]]:
    is_addr = _fields(left)
    if not any(is_addr):
        return
    if isinstance(right, str) and right.startswith("@"):
        named_set(right[1:])  # its elements are listed with the sets
        return
    elems = right["set"] if isinstance(right, dict) and "set" in right else [right]
    for e in elems:
        if is_map and isinstance(e, list):
            e = e[0]
        parts = e["concat"] if isinstance(e, dict) and "concat" in e else [e]
        for addr, part in zip(is_addr, parts, strict=False):
            if addr:
                if isinstance(part, dict) and ("payload" in part or "meta" in part):
                    raise matches.Unresolvable(f"an address compared with {part}")
                yield from matches.address_values(part, _no_set)


def _iptables(rule: Rule) -> Iterator[tuple[str, str]]:
    args = list(rule.expr)
    for i, a in enumerate(args[:-1]):
        val = args[i + 1]
        try:
            if a in ("-s", "--source", "-d", "--destination"):
                for v in val.split(","):
                    net = matches.network(v)
                    yield net, "address" if net.endswith(("/32", "/128")) else "prefix"
            elif a in ("--src-range", "--dst-range"):
                for v in val.split("-"):
                    yield matches.network(v), "range end"
            elif a in ("--to-destination", "--to-source", "--to"):
                yield from _ipt_nat(val)
            elif a == "--match-set":
                raise MechanismError(
                    f"ipset {val!r}: its members are not in the file",
                    where=rule.ref.where(),
                    fix="write the set's members as -s/-d rules, or review the nft form",
                )
        except ValueError as exc:
            raise MechanismError(
                f"{a} {val}: not an address ({exc})", where=rule.ref.where()
            ) from exc


def _ipt_nat(val: str) -> Iterator[tuple[str, str]]:
    """`10.1.5.200`, `10.1.5.200:8080`, `10.0.0.1-10.0.0.9:80-90`, `[2001:db8::1]:80`."""
    if val.startswith("["):
        addr = val[1 : val.index("]")]
    elif val.count(":") == 1:
        addr = val.split(":")[0]
    else:
        addr = val
    if not addr:
        return
    ends = addr.split("-")
    for end in ends:
        yield matches.network(end), "nat target" if len(ends) == 1 else "range end"


def _nets(texts: Sequence[str]) -> list[IPNet]:
    return [ipaddress.ip_network(t, strict=False) for t in texts]


def pick_address(within: str, named: Sequence[Named], avoid: Sequence[str] = ()) -> str:
    """An address in `within` in no narrower named prefix, none of the named addresses
    and none of `avoid`: its network and broadcast addresses last."""
    net = ipaddress.ip_network(within, strict=False)
    if net.num_addresses == 1:
        return str(net.network_address)
    narrower = [
        n
        for n in _nets([x.network for x in named] + list(avoid))
        if n.version == net.version and n.subnet_of(net) and n != net  # type: ignore[arg-type]
    ]
    pieces: list[IPNet] = [net]
    for n in sorted(set(narrower), key=lambda x: (x.prefixlen, x)):
        pieces = [q for p in pieces for q in (_exclude(p, n) if n.subnet_of(p) else [p])]  # type: ignore[arg-type]
    ends = {net.network_address, net.broadcast_address}
    for p in sorted(pieces):
        first = p.network_address + 1 if p == net else p.network_address
        for a in (first, p.network_address + 1, p.broadcast_address):
            if a in p and a not in ends:
                return str(a)
    # Everything is taken by narrower prefixes: any host not to avoid.
    taken = set(_nets(list(avoid)))
    for a in _hosts(net):
        if ipaddress.ip_network(a) not in taken:
            return str(a)
    return str(net.network_address)


def _exclude(p: IPNet, n: IPNet) -> list[IPNet]:
    return [] if p == n else list(p.address_exclude(n))  # type: ignore[arg-type]


def _hosts(net: IPNet) -> Iterator[Any]:
    for i, a in enumerate(net.hosts()):
        if i >= 1024:
            return
        yield a


def outside_all(named: Sequence[Named], family: str) -> str:
    """An address in no named prefix but a /0: a host on the internet."""
    nets = [n for n in _nets([x.network for x in named]) if n.prefixlen > 0]
    version = 6 if family == "ip6" else 4
    candidates = list(_OUTSIDE6 if version == 6 else _OUTSIDE4)
    candidates += [f"{a}.0.0.0/8" for a in range(1, 224)] if version == 4 else []
    for c in _nets(candidates):
        if any(c.subnet_of(n) for n in nets if n.version == c.version):  # type: ignore[arg-type]
            continue
        addr = ipaddress.ip_address(pick_address(str(c), named))
        if not any(addr in n for n in nets):
            return str(addr)
    raise MechanismError(
        "every candidate for an outside address lies in a prefix the rule set names",
        fix="give the traffic as a flow file (its addresses say where the outside is)",
    )
