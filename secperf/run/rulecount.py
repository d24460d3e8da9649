"""Every rule's packets, on a counted copy of the live rule set (the attribution round).

nftables (and iptables-nft, whose rules are nft rules): the host's live rule set is
read (`nft -j list ruleset`, libnftables' JSON), and replaced in one transaction by a
copy in which every rule carries a counter placed before its verdict (a rule that has
an anonymous counter keeps it) and every chain begins with a rule that only counts:
what entered it. After the test the counters are read back, and the original is
loaded again and checked to be back (the same JSON, handles and counter values
aside). Rules are named by family, table, chain and index (their place, which a
reload keeps) and by the handle they had; their text comes from `nft -a list ruleset`.

A rule set nft lists but cannot load back (iptables-nft's compat matches, `xt` in the
JSON) is counted in place instead: only the counting rules at the chains' heads are
inserted (iptables-nft gives every rule a counter of its own, read less what it held
before the test) and deleted by handle after.

iptables-legacy keeps a counter on every rule already: `iptables-legacy-save -c`
after the test gives each rule's packets (the runner loads the rules afresh before
the test, so they count that test alone); there is no entering count, so no walk.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from secperf.errors import MechanismError
from secperf.testbed.hosts import Host

# The verdicts and NAT statements of libnftables' JSON, as the report names them.
VERDICTS = ("accept", "drop", "reject", "queue", "goto", "jump", "return", "continue")
NAT = ("dnat", "snat", "masquerade", "redirect")
# A verdict map decides the packets it maps and passes the rest on: how many it
# decided no counter before it can tell, so the walk counts them as walking on.
STATEMENTS = (*VERDICTS, *NAT, "vmap")
ZERO = {"packets": 0, "bytes": 0}
Where = Callable[[str, str, str, int], str | None]


def items(ruleset: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(i) for i in ruleset.get("nftables") or [] if isinstance(i, Mapping)]


def _rules(ruleset: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for item in items(ruleset):
        if "rule" in item:
            yield item["rule"]


def verdict_of(expr: list[Any]) -> tuple[str, str | None]:
    """A rule's verdict (or NAT statement), and a jump's or goto's target chain;
    "continue" for a rule that only matches, counts or marks."""
    for stmt in expr:
        if not isinstance(stmt, Mapping):
            continue
        for name in STATEMENTS:
            if name in stmt:
                arg = stmt[name]
                target = arg.get("target") if isinstance(arg, Mapping) else None
                return name, str(target) if target is not None else None
    return "continue", None


def _has_counter(expr: list[Any]) -> bool:
    return any(isinstance(s, Mapping) and isinstance(s.get("counter"), Mapping) for s in expr)


def counted(expr: list[Any]) -> list[Any]:
    """The rule's statements with an anonymous counter before its verdict (at the end
    when it has none); an anonymous counter of its own is kept, its values zeroed."""
    out = copy.deepcopy(expr)
    if _has_counter(out):
        for stmt in out:
            if isinstance(stmt, dict) and isinstance(stmt.get("counter"), dict):
                stmt["counter"] = dict(ZERO)
        return out
    at = next(
        (
            i
            for i, s in enumerate(out)
            if isinstance(s, Mapping) and any(name in s for name in STATEMENTS)
        ),
        len(out),
    )
    return [*out[:at], {"counter": dict(ZERO)}, *out[at:]]


def _counter(expr: list[Any]) -> dict[str, int]:
    for stmt in expr:
        if isinstance(stmt, Mapping) and isinstance(stmt.get("counter"), Mapping):
            c = stmt["counter"]
            return {"packets": int(c.get("packets") or 0), "bytes": int(c.get("bytes") or 0)}
    return dict(ZERO)


HEAD_COMMENT = "secperf-entering"


def _head(chain: Mapping[str, Any]) -> dict[str, Any]:
    """The rule that only counts what enters `chain`, inserted at its head."""
    head = {
        "family": chain["family"],
        "table": chain["table"],
        "chain": chain["name"],
        "comment": HEAD_COMMENT,
        "expr": [{"counter": dict(ZERO)}],
    }
    return {"insert": {"rule": head}}


def has_xt(ruleset: Mapping[str, Any]) -> bool:
    """Rules with iptables' compat expressions (iptables-nft's `-m multiport`, ...):
    nft lists them but cannot load them back, so they cannot be copied."""
    return any(
        isinstance(s, Mapping) and "xt" in s for r in _rules(ruleset) for s in r.get("expr") or []
    )


def heads_only(ruleset: Mapping[str, Any]) -> dict[str, Any]:
    """For a rule set that cannot be copied: only the counting rules at the chains'
    heads, inserted beside the rules as they are (which count with their own
    counters: iptables-nft gives every rule one)."""
    return {"nftables": [_head(i["chain"]) for i in items(ruleset) if "chain" in i]}


def heads_removed(live: Mapping[str, Any]) -> dict[str, Any]:
    """Deleting the counting rules `heads_only` inserted, by their handles."""
    return {
        "nftables": [
            {"delete": {"rule": {k: r[k] for k in ("family", "table", "chain", "handle")}}}
            for r in _rules(live)
            if r.get("comment") == HEAD_COMMENT
        ]
    }


def instrument(ruleset: Mapping[str, Any]) -> dict[str, Any]:
    """The counted copy as one transaction: flush the rule set, then every object of
    the original with its rules counted, and a counting rule at the head of each
    chain (its comment marks it)."""
    cmds: list[dict[str, Any]] = [{"flush": {"ruleset": None}}]
    heads: list[dict[str, Any]] = []
    for item in items(ruleset):
        if "metainfo" in item:
            continue
        if "rule" in item:
            rule = {k: v for k, v in item["rule"].items() if k != "handle"}
            rule["expr"] = counted(list(rule.get("expr") or []))
            cmds.append({"add": {"rule": rule}})
            continue
        cmds.append({"add": item})
        if "chain" in item:
            heads.append(_head(item["chain"]))
    return {"nftables": [*cmds, *heads]}


def restore(ruleset: Mapping[str, Any]) -> dict[str, Any]:
    """The original rule set again, in one transaction (counter values as they were)."""
    cmds: list[dict[str, Any]] = [{"flush": {"ruleset": None}}]
    for item in items(ruleset):
        if "metainfo" in item:
            continue
        kind = next(iter(item))
        body = {k: v for k, v in item[kind].items() if k != "handle"}
        cmds.append({"add": {kind: body}})
    return {"nftables": cmds}


def comparable(ruleset: Mapping[str, Any]) -> list[Any]:
    """A rule set as a reload must give it back: without handles and counter values."""

    def strip(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {
                k: (dict(ZERO) if k == "counter" and isinstance(v, Mapping) else strip(v))
                for k, v in value.items()
                if k != "handle"
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return [strip(i) for i in items(ruleset) if "metainfo" not in i]


_TABLE = re.compile(r"^table (\S+) (\S+) \{")
_CHAIN = re.compile(r"^chain (\S+) \{")
_HANDLE = re.compile(r"\s*# handle (\d+)$")
_COUNTER_VALUES = re.compile(r"counter packets \d+ bytes \d+")


def rule_texts(listing: str) -> dict[tuple[str, str, int], str]:
    """`nft -a list ruleset` -> (family, table, handle) -> the rule as nft prints it."""
    out: dict[tuple[str, str, int], str] = {}
    table: tuple[str, str] | None = None
    in_chain = False
    for raw in listing.splitlines():
        line = raw.strip()
        if m := _TABLE.match(line):
            table, in_chain = (m.group(1), m.group(2)), False
        elif _CHAIN.match(line):
            in_chain = True
        elif line == "}":
            in_chain = False
        elif in_chain and table is not None and (h := _HANDLE.search(line)):
            text = _COUNTER_VALUES.sub("counter", line[: h.start()].strip())
            out[(*table, int(h.group(1)))] = text
    return out


def counts(
    original: Mapping[str, Any],
    live: Mapping[str, Any],
    texts: Mapping[tuple[str, str, int], str],
    where: Where,
    since: bool = False,
) -> list[dict[str, Any]]:
    """The chains of the `rule_counts` record: for each chain of the original, its
    entering packets (the head rule) and each rule's counters read from the `live`
    counted copy, matched by place (family, table, chain, index); `since`: the rules
    kept their own counters, so what they held in the original is taken off."""
    chains: dict[tuple[str, str, str], dict[str, Any]] = {}
    for item in items(original):
        if "chain" in item:
            ch = item["chain"]
            key = (ch["family"], ch["table"], ch["name"])
            chains[key] = {
                "family": key[0],
                "table": key[1],
                "chain": key[2],
                "hook": ch.get("hook"),
                "policy": ch.get("policy"),
                "entering": 0,
                "rules": [],
            }
    for rule in _rules(original):
        chain = chains.get((rule["family"], rule["table"], rule["chain"]))
        if chain is None:
            continue
        index = len(chain["rules"])
        verdict, target = verdict_of(list(rule.get("expr") or []))
        handle = rule.get("handle")
        held = _counter(list(rule.get("expr") or [])) if since else ZERO
        chain["rules"].append(
            {
                "held": held,
                "index": index,
                "handle": handle,
                "verdict": verdict,
                "target": target,
                "text": texts.get((rule["family"], rule["table"], int(handle or -1))),
                "where": where(rule["family"], rule["table"], rule["chain"], index),
                "packets": 0,
                "bytes": 0,
            }
        )
    seen: dict[tuple[str, str, str], int] = {}
    for rule in _rules(live):
        key = (rule["family"], rule["table"], rule["chain"])
        chain = chains.get(key)
        if chain is None:
            continue
        got = _counter(list(rule.get("expr") or []))
        if rule.get("comment") == HEAD_COMMENT:
            chain["entering"] = got["packets"]
            continue
        index = seen.get(key, 0)
        seen[key] = index + 1
        if index < len(chain["rules"]):
            held = chain["rules"][index]["held"]
            chain["rules"][index].update({k: got[k] - held[k] for k in ZERO})
    for chain in chains.values():
        for r in chain["rules"]:
            del r["held"]
    return list(chains.values())


def nft_json(host: Host, *args: str) -> dict[str, Any]:
    proc = host.run(["nft", "-j", *args])
    try:
        value = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError as exc:
        raise MechanismError(
            f"nft -j {' '.join(args)} printed no JSON on {host.name}: {exc}",
            where=host.name,
            fix="check the nftables version (nft -j needs libnftables with JSON)",
        ) from None
    return value if isinstance(value, dict) else {}


def load(host: Host, ruleset: Mapping[str, Any], what: str) -> None:
    proc = host.run(["nft", "-j", "-f", "-"], input=json.dumps(ruleset), check=False)
    if proc.returncode != 0:
        raise MechanismError(
            f"{what} on {host.name}: nft -j -f failed: {(proc.stderr or proc.stdout).strip()}",
            where=host.name,
            fix="the attribution round could not load it: set [repeat] attribution = false "
            "and report the rule set",
        )


class CountedRules:
    """The counted copy of one host's live nft rule set, for one test: `start`
    replaces the live set (False: it holds no rules), `finish` reads the counters,
    restores the original and checks it is back."""

    def __init__(self, host: Host, where: Where, name: str | None = None) -> None:
        self.host = host
        self.where = where
        self.name = name or host.name  # the testbed's name for it ("dut")
        self.original: dict[str, Any] = {}
        self.in_place = False

    def start(self) -> bool:
        self.original = nft_json(self.host, "list", "ruleset")
        if not any(True for _ in _rules(self.original)):
            return False
        self.texts = rule_texts(self.host.run(["nft", "-a", "list", "ruleset"]).stdout)
        self.in_place = has_xt(self.original)
        if self.in_place:
            load(self.host, heads_only(self.original), "the chains' counting rules")
        else:
            load(self.host, instrument(self.original), "the counted copy of the rule set")
        return True

    def finish(self) -> dict[str, Any]:
        """The `rule_counts` record (docs/data-format.md); the original is back."""
        live = nft_json(self.host, "list", "ruleset")
        chains = counts(self.original, live, self.texts, self.where, since=self.in_place)
        if self.in_place:
            load(self.host, heads_removed(live), "removing the chains' counting rules")
        else:
            load(self.host, restore(self.original), "restoring the rule set")
        back = comparable(nft_json(self.host, "list", "ruleset")) == comparable(self.original)
        if not back:
            raise MechanismError(
                f"the rule set on {self.host.name} is not the one the attribution round "
                "replaced after restoring it",
                where=self.host.name,
                fix="set [repeat] attribution = false and report the rule set",
            )
        return {
            "type": "rule_counts",
            "host": self.name,
            "source": "nft",
            # copy: every rule counted on a copy; in place: the rules' own counters
            # (a rule set nft cannot load back: iptables-nft's compat matches)
            "method": "in place" if self.in_place else "copy",
            "walk": True,
            "restored": back,
            "chains": chains,
        }


_LEGACY_TABLE = re.compile(r"^\*(\S+)$")
_LEGACY_RULE = re.compile(r"^\[(\d+):(\d+)\] -A (\S+)(.*)$")
_LEGACY_TARGET = re.compile(r"\s-[jg] (\S+)")


def legacy_counts(save: str, family: str, where: Where) -> list[dict[str, Any]]:
    """`iptables-legacy-save -c` -> the chains of a `rule_counts` record (each rule's
    packets; no entering count: iptables has none)."""
    chains: dict[tuple[str, str], dict[str, Any]] = {}
    table = ""
    for line in save.splitlines():
        if m := _LEGACY_TABLE.match(line.strip()):
            table = m.group(1)
            continue
        m = _LEGACY_RULE.match(line.strip())
        if m is None:
            continue
        name, spec = m.group(3), m.group(4).strip()
        chain = chains.setdefault(
            (table, name),
            {"family": family, "table": table, "chain": name, "entering": None, "rules": []},
        )
        index = len(chain["rules"])
        t = _LEGACY_TARGET.search(" " + spec)
        chain["rules"].append(
            {
                "index": index,
                "handle": None,
                "verdict": t.group(1).lower() if t else "continue",
                "target": None,
                "text": f"-A {name} {spec}",
                "where": where(family, table, name, index),
                "packets": int(m.group(1)),
                "bytes": int(m.group(2)),
            }
        )
    return list(chains.values())


def legacy_record(
    host: Host, family: int, where: Where, name: str | None = None
) -> dict[str, Any] | None:
    """The `rule_counts` record of the host's legacy iptables rules (None: none)."""
    save = "iptables-legacy-save" if family == 4 else "ip6tables-legacy-save"
    proc = host.run([save, "-c"], check=False)
    chains = legacy_counts(proc.stdout, "ip" if family == 4 else "ip6", where)
    if proc.returncode != 0 or not any(c["rules"] for c in chains):
        return None
    return {
        "type": "rule_counts",
        "host": name or host.name,
        "source": "iptables-legacy",
        "walk": False,
        "restored": True,
        "chains": chains,
    }
