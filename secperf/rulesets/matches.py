"""What a rule matches, in the terms a flow is made of.

`of(rule, rs)` reads a rule's matches (nft's JSON expressions, or iptables'
arguments) into a `Match`: interfaces, protocol, ports, addresses, connection state,
and the reasons no flow can be made that it matches (a mark, a socket's owner, an
ICMP type other than echo-request...). Values are kept as the choices the rule allows
(the elements of a set, the low end of a range) so that a flow can take one of them.
`address_values` reads every address a value names, for the address map.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field, replace
from typing import Any

from secperf.errors import MechanismError
from secperf.rulesets import iptsave
from secperf.rulesets.model import Rule, RuleSet

ADDRESS_TYPES = frozenset({"ipv4_addr", "ipv6_addr"})
# Statements that let a packet through unchanged as far as a flow can tell.
_NEUTRAL = frozenset(
    {"counter", "log", "mangle", "notrack", "ct", "meta", "set", "xt", "flow", "dup", "fwd"}
)
_SOFT = frozenset({"limit", "quota", "meter", "ct count"})
_TERMINAL = frozenset(
    {"accept", "drop", "reject", "return", "continue", "jump", "goto", "queue", "vmap"}
    | {"dnat", "snat", "masquerade", "redirect"}
)


class Unresolvable(ValueError):
    """A value that names addresses this module cannot list."""


@dataclass
class Match:
    iif: str | None = None
    oif: str | None = None
    iif_not: list[str] = field(default_factory=list)
    oif_not: list[str] = field(default_factory=list)
    family: str | None = None  # "ip" / "ip6" when the rule's addresses say
    protos: list[str] = field(default_factory=list)  # empty: any protocol
    dports: list[tuple[int, int]] = field(default_factory=list)  # empty: any port
    sport: int | None = None
    src: list[str] = field(default_factory=list)  # networks the rule allows; empty: any
    dst: list[str] = field(default_factory=list)
    src_not: list[str] = field(default_factory=list)
    dst_not: list[str] = field(default_factory=list)
    ct_states: set[str] | None = None
    ct_dnat: bool = False
    # iptables' addrtype: whether the destination must be (True) or must not be (False)
    # one of the DUT's own addresses; None: either
    dst_local: bool | None = None
    icmp_types: list[str] | None = None
    cannot: list[str] = field(default_factory=list)  # why no flow can match it
    soft: list[str] = field(default_factory=list)  # matched, but not always (limit)

    def then(self, other: Match) -> Match:
        """The matches of a jump rule followed by those of a rule in the chain it enters."""
        out = replace(other)
        for name in ("iif", "oif", "family", "sport"):
            if getattr(out, name) is None:
                setattr(out, name, getattr(self, name))
        for name in ("protos", "dports", "src", "dst"):
            if not getattr(out, name):
                setattr(out, name, list(getattr(self, name)))
        for name in ("iif_not", "oif_not", "src_not", "dst_not", "cannot", "soft"):
            setattr(out, name, getattr(self, name) + getattr(out, name))
        if out.ct_states is None:
            out.ct_states = self.ct_states
        if out.icmp_types is None:
            out.icmp_types = self.icmp_types
        if out.dst_local is None:
            out.dst_local = self.dst_local
        out.ct_dnat = self.ct_dnat or other.ct_dnat
        return out

    def new_connections(self) -> bool:
        """Whether a new connection (the first packet of a flow) can match."""
        return self.ct_states is None or "new" in self.ct_states


def network(text: str) -> str:
    """An address or prefix as a network: "10.1.5.200" -> "10.1.5.200/32"."""
    return str(ipaddress.ip_network(text, strict=False))


def _addr(v: Any) -> list[tuple[str, str]]:
    if isinstance(v, str):
        try:
            return [(network(v), "address")]
        except ValueError as exc:
            raise Unresolvable(f"{v!r} is not an address") from exc
    if isinstance(v, dict) and "prefix" in v:
        p = v["prefix"]
        return [(network(f"{p['addr']}/{p['len']}"), "prefix")]
    if isinstance(v, dict) and "range" in v:
        return [(network(str(x)), "range end") for x in v["range"]]
    if isinstance(v, dict) and "elem" in v:
        return _addr(v["elem"]["val"])
    raise Unresolvable(f"an address match on {v!r}")


def sets_of(rs: RuleSet) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The named sets and maps of a loaded nft rule set, by (family, table, name)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    if rs.format != "nft":
        return out
    for item in rs.raw:
        for kind in ("set", "map"):
            if kind in item:
                s = item[kind]
                out[(s["family"], s["table"], s["name"])] = s
    return out


def elements(s: dict[str, Any]) -> list[Any]:
    """A set's elements (a map's keys), unwrapped from `elem` objects."""
    out = []
    for e in s.get("elem", []):
        key = e[0] if isinstance(e, list) else e
        if isinstance(key, dict) and "elem" in key:
            key = key["elem"]["val"]
        out.append(key)
    return out


def _types(s: dict[str, Any], key: str = "type") -> list[str]:
    t = s.get(key, [])
    if isinstance(t, str):
        t = [p.strip() for p in t.split(" . ")]
    return [str(x) for x in t]


def address_values(value: Any, where_set: Any) -> list[tuple[str, str]]:
    """Every (network, what) an address field's value names; `where_set(name)` gives a
    named set's (elements) for an `@name` reference, or raises Unresolvable."""
    if isinstance(value, str) and value.startswith("@"):
        out: list[tuple[str, str]] = []
        for e in where_set(value[1:]):
            out += _addr(e)
        return out
    if isinstance(value, dict) and "set" in value:
        out = []
        for e in value["set"]:
            out += _addr(e)
        return out
    return _addr(value)


def _ports(v: Any) -> list[tuple[int, int]]:
    if isinstance(v, int):
        return [(v, v)]
    if isinstance(v, dict) and "range" in v:
        lo, hi = v["range"]
        return [(int(lo), int(hi))]
    if isinstance(v, dict) and "set" in v:
        return [p for e in v["set"] for p in _ports(e)]
    if isinstance(v, dict) and "elem" in v:
        return _ports(v["elem"]["val"])
    raise Unresolvable(f"a port match on {v!r}")


def _strings(v: Any) -> list[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, list):
        return [str(x) for x in v]
    if isinstance(v, dict) and "set" in v:
        return [str(x) for x in v["set"]]
    raise Unresolvable(f"a match on {v!r}")


class _Reader:
    def __init__(self, rule: Rule, rs: RuleSet):
        self.rule, self.rs, self.m = rule, rs, Match()
        self.sets = sets_of(rs)

    def set_elements(self, name: str) -> list[Any]:
        s = self.sets.get((self.rule.ref.family, self.rule.ref.table, name))
        if s is None:
            raise Unresolvable(f"@{name} names no set of table {self.rule.ref.table}")
        return elements(s)

    def field(self, left: Any) -> str | None:
        if not isinstance(left, dict):
            return None
        if "meta" in left:
            key = left["meta"]["key"]
            return {"iifname": "iif", "oifname": "oif", "iif": "iif", "oif": "oif"}.get(
                key, {"l4proto": "proto", "nfproto": "nfproto"}.get(key, f"meta {key}")
            )
        if "payload" in left:
            p = left["payload"]
            proto, fld = p.get("protocol"), p.get("field")
            if proto in ("ip", "ip6") and fld in ("saddr", "daddr"):
                self.m.family = str(proto)
                return str(fld)
            if (proto, fld) in (("ip", "protocol"), ("ip6", "nexthdr")):
                return "proto"
            if proto in ("tcp", "udp", "th", "sctp", "udplite") and fld in ("dport", "sport"):
                if proto != "th" and proto not in self.m.protos:
                    self.m.protos = [proto]
                return str(fld)
            if proto in ("icmp", "icmpv6") and fld == "type":
                self.m.protos = ["icmp"]
                return "icmptype"
            return f"{proto} {fld}"
        if "ct" in left:
            return f"ct {left['ct']['key']}"
        return None

    def apply(self, fld: str | None, op: str, right: Any, text: str) -> None:
        m, neg = self.m, op == "!="
        if fld in ("iif", "oif"):
            names = _strings(right)
            if neg:
                getattr(m, f"{fld}_not").extend(names)
            else:
                setattr(m, fld, names[0])
        elif fld == "proto" and not neg:
            m.protos = _strings(right)
        elif fld == "nfproto" and not neg:
            m.family = {"ipv4": "ip", "ipv6": "ip6"}.get(_strings(right)[0])
        elif fld in ("saddr", "daddr"):
            side = "src" if fld == "saddr" else "dst"
            values = address_values(right, self.set_elements)
            nets = [n for n, _ in values[:1]] if _is_range(right) else [n for n, _ in values]
            getattr(m, f"{side}_not" if neg else side).extend(nets)
        elif fld == "dport" and not neg:
            m.dports = _ports(right)
        elif fld == "sport" and not neg:
            m.sport = _ports(right)[0][0]
        elif fld == "icmptype" and not neg:
            m.icmp_types = _strings(right)
            if "echo-request" not in m.icmp_types:
                m.cannot.append(f"icmp type {', '.join(m.icmp_types)}: a probe sends echo-request")
        elif fld == "ct state":
            states = set(_strings(right))
            m.ct_states = (
                {"new", "established", "related", "invalid", "untracked"} - states
                if (neg)
                else states
            )
        elif fld == "ct status" and not neg and "dnat" in _strings(right):
            m.ct_dnat = True
        else:
            m.cannot.append(f"{text}: a match no generated flow can be made to meet")

    def stmt(self, s: Any) -> None:
        if not isinstance(s, dict) or len(s) != 1:
            return
        ((key, val),) = s.items()
        if key == "match":
            left, right, op = val["left"], val["right"], val.get("op", "==")
            if isinstance(left, dict) and "concat" in left:
                self.concat(left["concat"], right, op)
            else:
                self.apply(self.field(left), op, right, self.rule.text or key)
        elif key in _SOFT:
            self.m.soft.append(f"{key}: the flow is matched only while within it")
        elif key not in _NEUTRAL and key not in _TERMINAL:
            self.m.cannot.append(f"statement {key}: not understood for traffic")

    def concat(self, lefts: list[Any], right: Any, op: str) -> None:
        """`ip saddr . tcp dport @set`: the first element's parts, field by field."""
        if isinstance(right, str) and right.startswith("@"):
            elems = self.set_elements(right[1:])
        elif isinstance(right, dict) and "set" in right:
            elems = right["set"]
        else:
            elems = [right]
        if not elems:
            self.m.cannot.append("a concatenation over an empty set")
            return
        first = elems[0]
        parts = first["concat"] if isinstance(first, dict) and "concat" in first else [first]
        for left, part in zip(lefts, parts, strict=False):
            self.apply(self.field(left), op, part, self.rule.text)


def _is_range(v: Any) -> bool:
    return isinstance(v, dict) and "range" in v


def of(rule: Rule, rs: RuleSet) -> Match:
    """What `rule` matches; a value it names that cannot be read is a MechanismError
    with the rule's file:line."""
    try:
        if rs.format == "iptables":
            return _iptables(list(rule.expr))
        reader = _Reader(rule, rs)
        for s in rule.expr:
            reader.stmt(s)
        return reader.m
    except (Unresolvable, ValueError, KeyError, TypeError) as exc:
        raise MechanismError(
            f"cannot read what the rule matches: {exc}",
            where=rule.ref.where(),
            fix="write the match with addresses, prefixes, ranges or sets of them",
        ) from exc


def _ipt_port(text: str, proto: str) -> int:
    """A port as iptables reads it: a number, or a service name looked up as iptables
    does (getservbyname, /etc/services: `ssh`, `domain`, `auth`)."""
    if text.isdigit():
        return int(text)
    try:
        return socket.getservbyname(text, proto if proto in ("tcp", "udp") else "tcp")
    except OSError as exc:
        raise Unresolvable(f"port {text!r} is no service name this machine knows") from exc


def _ipt_ports(text: str, proto: str = "tcp") -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition(":")
        out.append((_ipt_port(lo, proto), _ipt_port(hi or lo, proto)))
    return out


def _iptables(args: list[str]) -> Match:
    m = Match()
    neg = False
    i = 0
    while i < len(args):
        a = args[i]
        val = args[i + 1] if i + 1 < len(args) else ""
        if a == "!":
            neg, i = True, i + 1
            continue
        took = 2
        if a in ("-i", "--in-interface", "-o", "--out-interface"):
            side = "iif" if a in ("-i", "--in-interface") else "oif"
            if neg:
                getattr(m, f"{side}_not").append(val)
            else:
                setattr(m, side, val)
        elif a in ("-p", "--protocol") and not neg and val not in ("all", "0"):
            m.protos = ["icmp" if val in ("icmp", "ipv6-icmp", "icmpv6") else val]
        elif a in ("-s", "--source", "-d", "--destination"):
            side = "src" if a in ("-s", "--source") else "dst"
            nets = [network(v) for v in val.split(",")]
            getattr(m, f"{side}_not" if neg else side).extend(nets)
        elif a in ("--src-range", "--dst-range"):
            side = "src" if a == "--src-range" else "dst"
            getattr(m, f"{side}_not" if neg else side).append(network(val.split("-")[0]))
        elif a in ("--dport", "--destination-port", "--dports", "--destination-ports"):
            if not neg:
                m.dports = _ipt_ports(val, m.protos[0] if m.protos else "tcp")
        elif a in ("--sport", "--source-port"):
            if not neg:
                m.sport = _ipt_ports(val, m.protos[0] if m.protos else "tcp")[0][0]
        elif a in ("--ctstate", "--state"):
            states = {s.lower() for s in val.split(",")}
            if "dnat" in states:
                m.ct_dnat = True
                states.discard("dnat")
            if states:
                m.ct_states = states
        elif a in ("--icmp-type", "--icmpv6-type"):
            m.icmp_types = [val]
            if val not in ("8", "echo-request", "128"):
                m.cannot.append(f"icmp type {val}: a probe sends echo-request")
        elif a in ("--dst-type", "--src-type"):
            # the flows are unicast, from the clients: LOCAL is the DUT's own addresses
            types = {t.upper() for t in val.split(",")}
            if a == "--dst-type" and types == {"LOCAL"}:
                m.dst_local = not neg
            elif a == "--dst-type" and types == {"UNICAST"}:
                m.cannot += ["addrtype ! UNICAST: every flow is unicast"] if neg else []
            elif not neg:
                m.cannot.append(f"addrtype {a[2:]} {val}: no flow's address is of that type")
        elif a in ("--match-set",):
            raise Unresolvable(f"ipset {val!r}: its members are not in the file")
        elif a == "--limit" or a == "--quota":
            m.soft.append(f"{a[2:]}: the flow is matched only while within it")
        elif a in ("--mark", "--uid-owner", "--gid-owner", "--string", "--pkt-type"):
            m.cannot.append(f"{a} {val}: a match no generated flow can be made to meet")
        elif a in ("-m", "--match", "-j", "--jump", "-g", "--goto"):
            pass
        elif a.startswith("-") and not a.startswith("--to") and not a.startswith("--reject"):
            took = 2 if i + 1 < len(args) and not args[i + 1].startswith("-") else 1
        neg = False
        i += took
    if iptsave.option(args, "-j", "--jump") in ("DNAT", "SNAT") and m.family is None:
        m.family = "ip"
    return m


def vmap_elements(rule: Rule, rs: RuleSet) -> list[tuple[Match, str, str | None]]:
    """A verdict-map rule's elements: for each, what the rule matches with the map's key
    equal to the element's, and the element's verdict and jump target."""
    base = of(rule, rs)
    out: list[tuple[Match, str, str | None]] = []
    for s in rule.expr:
        if not (isinstance(s, dict) and "vmap" in s):
            continue
        key, data = s["vmap"]["key"], s["vmap"]["data"]
        try:
            reader = _Reader(rule, rs)
            if isinstance(data, str) and data.startswith("@"):
                found = reader.sets.get((rule.ref.family, rule.ref.table, data[1:]))
                if found is None:
                    raise Unresolvable(f"{data} names no map of table {rule.ref.table}")
                pairs = found.get("elem", [])
            else:
                pairs = data.get("set", [])
            for k, verdict in pairs:
                one = _Reader(rule, rs)
                if isinstance(key, dict) and "concat" in key:
                    one.concat(key["concat"], k, "==")
                else:
                    one.apply(one.field(key), "==", k, rule.text)
                ((vname, vval),) = verdict.items()
                target = vval.get("target") if isinstance(vval, dict) else None
                out.append((base.then(one.m), str(vname), target))
        except (Unresolvable, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MechanismError(
                f"cannot read the verdict map: {exc}", where=rule.ref.where()
            ) from exc
    return out
