"""A rule set's libnftables JSON with its addresses mapped (owner: the address map).

The input is the `nftables` list of `nft -j -a list ruleset` after loading the user's
file; the output is one document that `nft -j -f FILE` loads on the DUT: a flush of
the ruleset, then every object as listed, with each address the map knows rewritten
(strings, `prefix` and `range` objects, anonymous sets, named sets' and maps' `elem`
including concatenations, NAT `addr`, maps' address values), the handles dropped (the
DUT assigns its own: match rules by family/table/chain/index, RuleRef.key), the
counters and quotas zeroed (a review counts from zero) and the metainfo dropped.

Addresses are found by value: in libnftables' JSON an IPv4 or IPv6 address is always a
string that parses as one, and no other field holds such a string except interface
names (skipped by their type or their match's left side) and names and comments
(skipped by key). An address the map does not know is refused: the collector missed it.
"""

from __future__ import annotations

import copy
from ipaddress import ip_network
from typing import Any

from secperf.errors import MechanismError
from secperf.rulesets.lookup import KnownAddresses, is_address, is_network
from secperf.rulesets.model import RuleSet

# Keys whose strings are names, never addresses.
_NAMES = frozenset(
    {"comment", "name", "table", "chain", "family", "target", "type", "hook", "policy"}
    | {"dev", "devices", "flags", "typeof", "key", "map", "version"}
)
# Match keys whose right-hand side is an interface name, whatever it looks like.
_IFNAMES = frozenset({"iifname", "oifname", "ibrname", "obrname", "sdifname"})
# Bit operations: an address under a mask (`ip saddr & 255.0.255.0 == 10.0.5.0`) means
# a set of addresses the map's blocks do not keep.
_BITOPS = frozenset({"&", "|", "^", "<<", ">>"})


def map_nft(
    raw: list[dict[str, Any]] | dict[str, Any],
    amap: KnownAddresses,
    *,
    ruleset: RuleSet | None = None,
    flush: bool = True,
) -> dict[str, Any]:
    """The document to load with `nft -j -f`: `{"nftables": [flush, objects...]}`.
    `raw` is the `nftables` list (or the whole `nft -j` document); `ruleset` (the
    loaded rule set), when given, lets an error name a rule's file:line; `flush=False`
    leaves out the flush of the whole ruleset (for a DUT that keeps tables of its own:
    then delete the user's tables first)."""
    objects = raw["nftables"] if isinstance(raw, dict) else raw
    out: list[dict[str, Any]] = [{"flush": {"ruleset": None}}] if flush else []
    for obj in objects:
        if not isinstance(obj, dict) or len(obj) != 1:
            raise MechanismError(
                f"{str(obj)[:80]} is not a libnftables JSON object",
                fix="pass the `nftables` list of `nft -j -a list ruleset`",
            )
        ((kind, body),) = obj.items()
        if kind == "metainfo":
            continue
        rewrite = _Rewrite(amap, _describe(kind, body, ruleset))
        out.append({kind: rewrite.object(kind, body)})
    return {"nftables": out}


def _describe(kind: str, body: dict[str, Any], ruleset: RuleSet | None) -> str:
    """The object an error names: a rule by its file:line when the rule set is known."""
    family, table = body.get("family", "?"), body.get("table", body.get("name", "?"))
    if kind == "rule":
        handle = body.get("handle")
        if ruleset is not None and isinstance(handle, int):
            rule = ruleset.by_handle(str(family), str(table), handle)
            if rule is not None:
                return rule.ref.where()
        return f"rule {family} {table} {body.get('chain', '?')} (handle {handle})"
    return f"{kind} {family} {table} {body.get('name', '')}".rstrip()


def _ifname_mask(left: Any) -> list[bool] | None:
    """Which parts of a match's left side are interface names (None: none are)."""
    parts = left["concat"] if isinstance(left, dict) and "concat" in left else [left]
    mask = [
        isinstance(p, dict) and isinstance(p.get("meta"), dict) and p["meta"].get("key") in _IFNAMES
        for p in parts
    ]
    return mask if any(mask) else None


class _Rewrite:
    def __init__(self, amap: KnownAddresses, obj: str) -> None:
        self.amap = amap
        self.obj = obj

    def object(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in copy.deepcopy(body).items() if k != "handle"}
        if kind == "counter":
            out.update(packets=0, bytes=0)
        if kind == "quota":
            out["used"] = 0
        elems = out.pop("elem", None)
        out = self.mapping(out)
        if elems is not None:
            types = out.get("type")
            mask = [t == "ifname" for t in (types if isinstance(types, list) else [types])]
            out["elem"] = [self.element(e, mask, kind == "map") for e in elems]
        return out

    def element(self, elem: Any, mask: list[bool], is_map: bool) -> Any:
        """A set's element (its key typed by the set) or a map's [key, value] pair."""
        if is_map and isinstance(elem, list) and len(elem) == 2:
            return [self.typed(elem[0], mask), self.value(elem[1])]
        return self.typed(elem, mask)

    def typed(self, value: Any, mask: list[bool] | None) -> Any:
        """A value whose parts `mask` marks as interface names (kept as written)."""
        if mask is None or not any(mask):
            return self.value(value)
        if mask == [True]:
            return value
        if isinstance(value, list):
            return [self.typed(v, mask) for v in value]
        if isinstance(value, dict) and len(value) == 1:
            ((key, inner),) = value.items()
            if key == "concat" and isinstance(inner, list) and len(inner) == len(mask):
                return {
                    "concat": [v if m else self.value(v) for v, m in zip(inner, mask, strict=True)]
                }
            if key == "set":
                return {"set": self.typed(inner, mask)}
            if key == "elem" and isinstance(inner, dict):
                rest = self.value({k: v for k, v in inner.items() if k != "val"})
                return {"elem": {"val": self.typed(inner.get("val"), mask), **rest}}
        return self.value(value)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            if is_network(value):
                return self.amap.known_network(value, self.obj)
            if is_address(value):
                return self.amap.known_address(value, self.obj)
            return value
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return self.mapping(value)
        return value

    def mapping(self, d: dict[str, Any]) -> dict[str, Any]:
        if len(d) == 1:
            ((key, inner),) = d.items()
            if key == "prefix" and isinstance(inner, dict) and "addr" in inner:
                return {"prefix": self.prefix(inner)}
            if key in _BITOPS and self.holds_address(inner):
                raise MechanismError(
                    f"{self.obj} matches an address under a bit mask ({key}); the map keeps "
                    "prefixes, ranges and addresses, not arbitrary masks",
                    where=self.obj,
                    fix="write the match as prefixes or a set of addresses",
                )
            if key == "xt":  # what iptables-nft wrote: opaque to nft, and not loadable
                name = inner.get("name", "?") if isinstance(inner, dict) else "?"
                raise MechanismError(
                    f"{self.obj} holds an iptables extension (xt {name}) that nft can "
                    "neither show the addresses of nor load",
                    where=self.obj,
                    fix='review this rule set as iptables-save output (format = "iptables")',
                )
            if key == "match" and isinstance(inner, dict):
                mask = _ifname_mask(inner.get("left"))
                rest = self.value({k: v for k, v in inner.items() if k != "right"})
                return {"match": {**rest, "right": self.typed(inner.get("right"), mask)}}
        out: dict[str, Any] = {}
        for key, inner in d.items():
            if key in _NAMES and not isinstance(inner, dict | list):
                out[key] = inner
            elif key == "counter" and isinstance(inner, dict) and "packets" in inner:
                out[key] = {**inner, "packets": 0, "bytes": 0}
            elif key == "used":
                out[key] = 0
            elif key != "expires":  # a dynamic element's remaining time: nft sets its own
                out[key] = self.value(inner)
        return out

    def prefix(self, inner: dict[str, Any]) -> dict[str, Any]:
        mapped = ip_network(self.amap.known_network(f"{inner['addr']}/{inner['len']}", self.obj))
        return {"addr": str(mapped.network_address), "len": mapped.prefixlen}

    def holds_address(self, value: Any) -> bool:
        if isinstance(value, str):
            return is_address(value)
        if isinstance(value, list):
            return any(self.holds_address(v) for v in value)
        return False
