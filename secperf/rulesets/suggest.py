"""An equivalent rewrite of an nftables rule set, where a common pattern allows one.

Pure: a loaded `RuleSet` in, the rewritten libnftables document and the list of what
changed out (`secperf.rulesets.load.nft_text` turns the document into nft text). Three
patterns, each kept conservative so that the rewrite decides every packet as the
original does:

- **a run of same-shape rules into a set or a verdict map**: four or more consecutive
  rules of one chain whose statements are matches and one verdict, equal but for the
  value of one `==` match (a plain address, port or name: no prefix, range, named set or
  wildcard), become one rule matching an anonymous set `{ X1, X2, ... }`; when the
  verdict differs per value, a verdict map `vmap { X1 : accept, X2 : drop }`. A packet
  carries one value of the matched field, so at most one rule of the run could decide it;
- **`ct state established,related accept` first**: in a base filter chain, the rule moves
  ahead of the `accept` rules before it (it would accept an established packet they
  accept); never ahead of a drop or reject (that rule may deny an established packet the
  moved rule would let through), a rule with other statements (counter, limit, quota,
  log, a mark or ct set: moving changes what they count), or a rule matching ct or mark;
- **a hot accept ahead of rules it does not overlap**: given the share of the traffic
  each rule decides (`hot`, by `RuleRef.key()`: `hot_shares` reads it off a flow list),
  an accept rule with matches only that decides at least `HOT_SHARE` of the traffic
  moves ahead of the consecutive rules before it that decide less of it and whose
  matches it provably shares no packet with (`secperf.rulesets.disjoint`): its packets
  never met those rules, every other packet meets the same rules in the same order.

Everything else in the file (tables, sets, maps, other chains, NAT) is kept as nft loaded
it. This is not a proof of equivalence: the review measures the rewrite as a variant and
compares its decision with the proposed rule set's on every flow of the traffic.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from secperf.rulesets import matches
from secperf.rulesets.disjoint import disjoint
from secperf.rulesets.flows import covers
from secperf.rulesets.model import Chain, Flow, Rule, RuleSet

MIN_RUN = 4
HOT_SHARE = 0.25  # the least share of the traffic a rule decides to be moved as hot
_VERDICTS = ("accept", "drop", "jump", "goto", "return", "continue", "reject")
_VMAP_VERDICTS = ("accept", "drop", "jump", "goto", "return", "continue")
_ESTABLISHED = frozenset({"established", "related"})
_FILTER_HOOKS = ("input", "forward", "output", "prerouting", "postrouting", "ingress")

ChainKey = tuple[str, str, str]


@dataclass(frozen=True)
class Change:
    """One rewrite: what it did, and the file:line range of the rules it replaces."""

    pattern: str  # "set", "vmap", "ct-first" or "hot-first"
    replaces: str  # "router.nft:12-17" (or the rules' places when their lines are unknown)
    rules: int  # how many rules of the original it touches
    text: str  # what it did, in a sentence

    def as_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "replaces": self.replaces,
            "rules": self.rules,
            "text": self.text,
        }


@dataclass(frozen=True)
class Suggestion:
    document: dict[str, Any]  # {"nftables": [...]}: loadable with `nft -j -f`
    changes: tuple[Change, ...]


def span(rules: Sequence[Rule]) -> str:
    """The file:line range the rules stand on."""
    first, last = rules[0].ref, rules[-1].ref
    if first.line is not None and last.line is not None and first.file == last.file:
        lines = f"{first.line}" if first.line == last.line else f"{first.line}-{last.line}"
        return f"{first.file}:{lines}"
    if len(rules) == 1:
        return first.where()
    return f"{first.where()} to {last.where()}"


def _verdict(stmt: Any) -> bool:
    return isinstance(stmt, dict) and len(stmt) == 1 and next(iter(stmt)) in _VERDICTS


def _plain(expr: Sequence[Any]) -> bool:
    """Matches, then one verdict: nothing that counts, logs, limits or sets."""
    if not expr or not _verdict(expr[-1]):
        return False
    return all(isinstance(s, dict) and set(s) == {"match"} for s in expr[:-1])


def _scalar(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return (
        isinstance(value, str)
        and bool(value)
        and not value.startswith(("@", "$"))
        and not value.endswith("*")
    )


def _shape(rule: Rule, i: int) -> tuple[str, str] | None:
    """The rule with statement `i`'s value left out (a key that equal rules share)."""
    m = rule.expr[i]["match"]
    if m.get("op") != "==" or not _scalar(m.get("right")):
        return None
    rest = [s for j, s in enumerate(rule.expr[:-1]) if j != i]
    return repr(rest), repr(m["left"])


def _value(rule: Rule, i: int) -> Any:
    return rule.expr[i]["match"]["right"]


def _run_at(rules: Sequence[Rule], start: int) -> tuple[int, int] | None:
    """The longest run from `start` (its end and the varying statement's index)."""
    first = rules[start]
    if not _plain(first.expr):
        return None
    best: tuple[int, int] | None = None
    for i in range(len(first.expr) - 1):
        key = _shape(first, i)
        if key is None:
            continue
        end = start + 1
        while end < len(rules):
            r = rules[end]
            if (
                not _plain(r.expr)
                or len(r.expr) != len(first.expr)
                or _shape(r, i) != key
                or r.text.count("comment") != first.text.count("comment")
            ):
                break
            end += 1
        if end - start >= MIN_RUN and (best is None or end > best[0]):
            best = (end, i)
    return best


def _merged(run: Sequence[Rule], i: int) -> tuple[list[Any], str]:
    """The one rule a run becomes, and its pattern."""
    first = run[0]
    verdicts = [r.expr[-1] for r in run]
    seen: dict[str, Any] = {}  # value (as repr) -> (value, verdict): the first rule wins
    for r, v in zip(run, verdicts, strict=True):
        seen.setdefault(repr(_value(r, i)), (_value(r, i), v))
    left = first.expr[i]["match"]["left"]
    rest = [copy.deepcopy(s) for j, s in enumerate(first.expr[:-1]) if j != i]
    if all(v == verdicts[0] for v in verdicts):
        values = [val for val, _ in seen.values()]
        match = {"match": {"op": "==", "left": copy.deepcopy(left), "right": {"set": values}}}
        expr = [*first.expr[:i], match, *first.expr[i + 1 : -1], copy.deepcopy(verdicts[0])]
        return [copy.deepcopy(s) for s in expr], "set"
    data = [[val, copy.deepcopy(v)] for val, v in seen.values()]
    return [*rest, {"vmap": {"key": copy.deepcopy(left), "data": {"set": data}}}], "vmap"


def _vmap_ok(run: Sequence[Rule]) -> bool:
    return all(next(iter(r.expr[-1])) in _VMAP_VERDICTS for r in run)


def _is_ct_established(rule: Rule) -> bool:
    if len(rule.expr) != 2 or rule.expr[1] != {"accept": None}:
        return False
    m = rule.expr[0].get("match") if isinstance(rule.expr[0], dict) else None
    if not isinstance(m, dict) or m.get("left") != {"ct": {"key": "state"}}:
        return False
    right = m.get("right")
    values = right.get("set") if isinstance(right, dict) else right
    values = [values] if isinstance(values, str) else values
    if m.get("op") not in ("==", "in") or not isinstance(values, list) or not values:
        return False
    return all(isinstance(v, str) for v in values) and set(values) <= _ESTABLISHED


def _touches_state(rule: Rule) -> bool:
    text = repr(rule.expr)
    return "'ct'" in text or "'mark'" in text


def _passable(rule: Rule) -> bool:
    """A rule the ct-state accept may move ahead of: it accepts, with matches only, none
    on connection state or marks."""
    return rule.verdict == "accept" and _plain(rule.expr) and not _touches_state(rule)


def _ct_first(chain: Chain, rules: list[Rule]) -> tuple[list[Rule], Change] | None:
    if chain.hook not in _FILTER_HOOKS or chain.type != "filter":
        return None
    for k, rule in enumerate(rules):
        if not _is_ct_established(rule):
            continue
        to = k
        while to > 0 and _passable(rules[to - 1]):
            to -= 1
        if to == k:
            return None
        passed = rules[to:k]
        moved = [*rules[:to], rule, *passed, *rules[k + 1 :]]
        where = "first" if to == 0 else f"ahead of the {len(passed)} accept rules before it"
        change = Change(
            "ct-first",
            span([*passed, rule]),
            len(passed) + 1,
            f"{chain.family} {chain.table} {chain.name}: `{rule.text}` ({rule.ref.where()}) "
            f"moved {where}",
        )
        return moved, change
    return None


def _hot_first(
    chain: Chain, rules: list[Rule], hot: Mapping[str, float]
) -> tuple[list[Rule], list[Change]]:
    """Each hot accept moved ahead of the rules before it that it cannot overlap."""
    changes: list[Change] = []
    for rule in sorted(rules, key=lambda r: -hot.get(r.ref.key(), 0.0)):
        share = hot.get(rule.ref.key(), 0.0)
        if share < HOT_SHARE or rule.verdict != "accept" or not _plain(rule.expr):
            continue
        k = rules.index(rule)
        to = k
        while (
            to > 0
            and hot.get(rules[to - 1].ref.key(), 0.0) < share
            and disjoint(rule.expr, rules[to - 1].expr)
        ):
            to -= 1
        passed = rules[to:k]
        if not passed:
            continue
        rules = [*rules[:to], rule, *passed, *rules[k + 1 :]]
        changes.append(
            Change(
                "hot-first",
                span([rule]),
                len(passed) + 1,
                f"{chain.family} {chain.table} {chain.name}: `{rule.text}` "
                f"({rule.ref.where()}, {share:.0%} of the traffic) moved ahead of the "
                f"{len(passed)} rule(s) before it ({span(passed)}) that match none of its "
                "packets",
            )
        )
    return rules, changes


def hot_shares(rs: RuleSet, flows: Sequence[Flow]) -> dict[str, float]:
    """The share of the flows' weight each rule decides, by `RuleRef.key()`: in each
    chain, the first rule whose matches cover the flow (secperf.rulesets.flows.covers)."""
    total = sum(f.weight for f in flows) or 1.0
    out: dict[str, float] = {}
    for chain in rs.chains:
        read = [(r, matches.of(r, rs)) for r in chain.rules]
        for f in flows:
            for r, m in read:
                if covers(m, f):
                    out[r.ref.key()] = out.get(r.ref.key(), 0.0) + f.weight / total
                    break
    return out


def _runs(chain: Chain, rules: list[Rule]) -> tuple[list[Rule | list[Any]], list[Change]]:
    """The chain with each run merged (a merged rule as its new expression list)."""
    out: list[Rule | list[Any]] = []
    changes: list[Change] = []
    k = 0
    while k < len(rules):
        found = _run_at(rules, k)
        if found is not None:
            end, i = found
            run = rules[k:end]
            same = all(r.expr[-1] == run[0].expr[-1] for r in run)
            if same or _vmap_ok(run):
                expr, pattern = _merged(run, i)
                out.append(expr)
                what = "a set" if pattern == "set" else "a verdict map"
                changes.append(
                    Change(
                        pattern,
                        span(run),
                        len(run),
                        f"{chain.family} {chain.table} {chain.name}: {len(run)} rules that "
                        f"differ only in one value -> one rule with {what}",
                    )
                )
                k = end
                continue
        out.append(rules[k])
        k += 1
    return out, changes


def _rule_item(chain: Chain, expr: list[Any], like: dict[str, Any] | None) -> dict[str, Any]:
    item = {"family": chain.family, "table": chain.table, "chain": chain.name, "expr": expr}
    if like is not None and "comment" in like:
        item["comment"] = like["comment"]
    return {"rule": item}


def suggest(rs: RuleSet, hot: Mapping[str, float] | None = None) -> Suggestion:
    """The rewritten rule set (nft only: an iptables file is never rewritten); `hot`,
    each rule's share of the traffic (`hot_shares`), enables the hot-first pattern."""
    if rs.format != "nft":
        return Suggestion({"nftables": []}, ())
    raw_rules: dict[tuple[str, str, int], dict[str, Any]] = {}
    for item in rs.raw:
        if "rule" in item:
            r = item["rule"]
            raw_rules[(r["family"], r["table"], r.get("handle", -1))] = r
    changes: list[Change] = []
    new: dict[ChainKey, list[dict[str, Any]]] = {}
    for chain in rs.chains:
        rules = list(chain.rules)
        moved = _ct_first(chain, rules)
        if moved is not None:
            rules, change = moved
            changes.append(change)
        if hot:
            rules, hot_moves = _hot_first(chain, rules, hot)
            changes += hot_moves
        merged, found = _runs(chain, rules)
        changes += found
        items: list[dict[str, Any]] = []
        for entry in merged:
            if isinstance(entry, Rule):
                like = raw_rules.get((entry.ref.family, entry.ref.table, entry.ref.handle or -1))
                items.append(_rule_item(chain, copy.deepcopy(list(entry.expr)), like))
            else:
                items.append(_rule_item(chain, entry, None))
        new[(chain.family, chain.table, chain.name)] = items
    document: list[dict[str, Any]] = []
    done: set[ChainKey] = set()
    for item in rs.raw:
        if "metainfo" in item:
            continue
        if "rule" in item:
            r = item["rule"]
            key = (r["family"], r["table"], r["chain"])
            if key not in done:
                done.add(key)
                document += new.get(key, [])
            continue
        document.append(_unhandled(item))
    return Suggestion({"nftables": document}, tuple(changes))


def _unhandled(item: dict[str, Any]) -> dict[str, Any]:
    """An object as listed, without its handle (nft gives the loaded one its own)."""
    out = copy.deepcopy(item)
    for body in out.values():
        if isinstance(body, dict):
            body.pop("handle", None)
    return out
