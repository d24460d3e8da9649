"""Whether two nftables rules provably match no packet in common (owner: suggest).

Pure, on libnftables' JSON expressions. Two rules are disjoint when one field both
match on, before any statement that acts on the packet, takes values in one that it
cannot take in the other:

- the same left-hand side (`tcp dport`, `ip saddr`, `iifname`, `meta l4proto`) compared
  with `==` (or `in`) to plain values, sets of them, prefixes or ranges with no value in
  common (10.1.0.0/16 and 10.2.0.0/16; 22 and 80-90; "lan0" and "wan0"; no wildcard);
- or the protocols they need: a packet is TCP or UDP (`tcp dport 22` against `udp dport
  53`, `meta l4proto udp`), IPv4 or IPv6 (`ip saddr` against `ip6 saddr`, `meta nfproto`).

Anything this cannot read (`!=`, a named set, a wildcard, a mark, a concatenation) proves
nothing: the answer is then "not provably disjoint", never a guess.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Any

# A field's values as a list of closed intervals of one kind: ("int", lo, hi),
# ("ip4"/"ip6", lo, hi) or ("str", s, s).
Interval = tuple[str, Any, Any]

_L4 = frozenset({"tcp", "udp", "udplite", "sctp", "dccp", "icmp", "icmpv6", "esp", "ah"})
_L3 = {"ip": "ipv4", "ip6": "ipv6", "icmp": "ipv4", "icmpv6": "ipv6"}
_L4_KEYS = ({"meta": {"key": "l4proto"}}, {"payload": {"protocol": "ip", "field": "protocol"}})
_L3_KEYS = ({"meta": {"key": "nfproto"}},)


def _matches(expr: Sequence[Any]) -> list[dict[str, Any]]:
    """The rule's leading matches: those evaluated before any other statement."""
    out: list[dict[str, Any]] = []
    for stmt in expr:
        if not (isinstance(stmt, dict) and set(stmt) == {"match"}):
            break
        out.append(stmt["match"])
    return out


def _interval(value: Any) -> list[Interval] | None:
    """One value's intervals, or None when it cannot be read as plain values."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return [("int", value, value)]
    if isinstance(value, str):
        if not value or value.startswith(("@", "$")) or "*" in value:
            return None
        try:
            a = ipaddress.ip_address(value)
        except ValueError:
            return [("str", value, value)]
        kind = f"ip{a.version}"
        return [(kind, int(a), int(a))]
    if isinstance(value, dict) and "prefix" in value:
        p = value["prefix"]
        try:
            net = ipaddress.ip_network(f"{p['addr']}/{p['len']}", strict=False)
        except (KeyError, TypeError, ValueError):
            return None
        kind = f"ip{net.version}"
        return [(kind, int(net.network_address), int(net.broadcast_address))]
    if isinstance(value, dict) and "range" in value:
        lo, hi = (_interval(v) for v in value["range"])
        if not lo or not hi or lo[0][0] != hi[0][0]:
            return None
        return [(lo[0][0], lo[0][1], hi[0][2])]
    if isinstance(value, dict) and "set" in value:
        out: list[Interval] = []
        for v in value["set"] if isinstance(value["set"], list) else [value["set"]]:
            got = _interval(v)
            if got is None:
                return None
            out += got
        return out
    return None


def _values(m: dict[str, Any]) -> list[Interval] | None:
    if m.get("op") not in ("==", "in"):
        return None
    return _interval(m.get("right"))


def _overlap(a: Iterable[Interval], b: Iterable[Interval]) -> bool:
    bs = list(b)
    for kind, lo, hi in a:
        for kind2, lo2, hi2 in bs:
            if kind != kind2 or (kind == "str" and lo != lo2):
                # values of different kinds: a string could name what a number does
                # (a service name against a port): not provably apart
                if kind != kind2:
                    return True
                continue
            if lo <= hi2 and lo2 <= hi:
                return True
    return False


def _protocols(ms: Sequence[dict[str, Any]], keys: Sequence[Any], layer: int) -> set[str] | None:
    """The protocols a packet must carry to meet every match (None: any)."""
    need: set[str] | None = None
    for m in ms:
        left = m.get("left")
        got: set[str] | None = None
        if left in keys:
            vals = _values(m)
            if vals is not None and all(k == "str" for k, _, _ in vals):
                got = {lo for _, lo, _ in vals}
        elif isinstance(left, dict) and "payload" in left:
            proto = left["payload"].get("protocol") if isinstance(left["payload"], dict) else None
            if layer == 4 and proto in _L4:
                got = {proto}
            elif layer == 3 and proto in _L3:
                got = {_L3[proto]}
        if got is not None:
            need = got if need is None else need & got
    return need


def disjoint(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether no packet can meet both rules' leading matches (module docstring)."""
    ma, mb = _matches(a), _matches(b)
    for layer, keys in ((4, _L4_KEYS), (3, _L3_KEYS)):
        pa, pb = _protocols(ma, keys, layer), _protocols(mb, keys, layer)
        if pa is not None and pb is not None and not pa & pb:
            return True
    for x in ma:
        vx = _values(x)
        if vx is None:
            continue
        for y in mb:
            if y.get("left") != x.get("left"):
                continue
            vy = _values(y)
            if vy is not None and not _overlap(vx, vy):
                return True
    return False
