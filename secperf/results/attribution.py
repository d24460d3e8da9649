"""Where the cost goes: the attribution round's rule counts and CPU profiles, read.

The attribution round (secperf.run.attribution) keeps two records per configuration:
`rule_counts` (every rule's packets and bytes on a counted copy of the live rule set,
and how many packets entered each chain) and `profile` (the share of the CPU samples
each function took, `perf record -e cpu-clock`). This module turns them into what the
report shows, with no I/O:

- per rule: packets matched, bytes, its share of the packets that entered its chain;
- per chain: the mean number of rules a packet walks. A packet that enters a chain
  walks its rules until one sends it out: rule i is walked by
  walked(i) = entering - sum over j < i of left(j), where left(j) is what left the
  chain at rule j (a terminal verdict: accept, drop, reject, queue, goto, return, a
  NAT statement; a jump sends back what its chain does not decide). The mean is
  sum walked(i) / entering;
- the differential profile: the functions whose share of the samples grew against
  the baseline's (plain forwarding), with both shares and the difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from secperf.plan import BASELINE
from secperf.results.records import RecordLine, as_line

# The verdicts that send a packet out of the chain it is in (a jump is not one: the
# packet comes back unless the chain it jumped to decided it).
LEAVES = frozenset(
    {"accept", "drop", "reject", "queue", "goto", "return"}
    | {"dnat", "snat", "masquerade", "redirect"}
)
# What ends a packet's evaluation altogether (a jump's chain deciding it): not return.
DECIDES = LEAVES - {"return", "goto"}
ATTRIBUTED = ("profile", "rule_counts")  # the attribution round's record types
HOT_RULES = 10  # rules per table, by packets
TOP_FUNCTIONS = 10  # functions that grew, by the difference of their shares


def _num(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def chain_key(chain: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(chain.get("family")), str(chain.get("table")), str(chain.get("chain")))


def _decided(
    chain: Mapping[str, Any],
    chains: Mapping[tuple[str, str, str], Mapping[str, Any]],
    seen: frozenset[tuple[str, str, str]],
) -> int:
    """Packets `chain` decided (a verdict that ends evaluation), its jumps' included."""
    total = 0
    for rule in chain.get("rules") or []:
        verdict = rule.get("verdict")
        if verdict in DECIDES or verdict == "goto":
            total += _num(rule.get("packets"))
        elif verdict == "jump":
            total += _left_by_jump(chain, rule, chains, seen)
    return total


def _left_by_jump(
    chain: Mapping[str, Any],
    rule: Mapping[str, Any],
    chains: Mapping[tuple[str, str, str], Mapping[str, Any]],
    seen: frozenset[tuple[str, str, str]],
) -> int:
    """What a jump rule's packets did not come back with: the share its target chain
    decided (the target's entering packets may come from several jumps: pro rata)."""
    key = (str(chain.get("family")), str(chain.get("table")), str(rule.get("target")))
    target = chains.get(key)
    jumped = _num(rule.get("packets"))
    if target is None or key in seen or not jumped:
        return 0
    entering = _num(target.get("entering"))
    if not entering:
        return 0
    decided = _decided(target, chains, seen | {key})
    return min(jumped, round(jumped * min(decided, entering) / entering))


def left_at(
    chain: Mapping[str, Any], chains: Mapping[tuple[str, str, str], Mapping[str, Any]]
) -> list[int]:
    """Per rule of `chain`, the packets that left the chain at that rule."""
    out = []
    for rule in chain.get("rules") or []:
        verdict = rule.get("verdict")
        if verdict in LEAVES:
            out.append(_num(rule.get("packets")))
        elif verdict == "jump":
            out.append(_left_by_jump(chain, rule, chains, frozenset({chain_key(chain)})))
        else:
            out.append(0)
    return out


def mean_walked(entering: int, left: Sequence[int]) -> float | None:
    """The mean number of rules a packet entering the chain walks: rule i is walked by
    the packets that entered and did not leave at a rule before it. None: nothing
    entered."""
    if entering <= 0:
        return None
    walked, gone = 0, 0
    for n in left:
        walked += max(entering - gone, 0)
        gone += n
    return walked / entering


def walks(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each chain of a `rule_counts` record: entering packets, rules, the mean walked."""
    chains = {chain_key(c): c for c in record.get("chains") or []}
    out = []
    for key, chain in chains.items():
        entering = _num(chain.get("entering"))
        rules = chain.get("rules") or []
        mean = None
        if record.get("walk", True):
            mean = mean_walked(entering, left_at(chain, chains))
        out.append(
            {
                "family": key[0],
                "table": key[1],
                "chain": key[2],
                "hook": chain.get("hook"),
                "rules": len(rules),
                "entering": entering if record.get("walk", True) else None,
                "mean_walked": mean,
            }
        )
    return out


def hot_rules(record: Mapping[str, Any], top: int = HOT_RULES) -> list[dict[str, Any]]:
    """The rules that matched most packets, with their share of their chain's
    entering packets (None where the chain's entering count is unknown)."""
    rows = []
    for chain in record.get("chains") or []:
        entering = _num(chain.get("entering"))
        for rule in chain.get("rules") or []:
            packets = _num(rule.get("packets"))
            if not packets:
                continue
            rows.append(
                {
                    "family": chain.get("family"),
                    "table": chain.get("table"),
                    "chain": chain.get("chain"),
                    "index": rule.get("index"),
                    "handle": rule.get("handle"),
                    "rule": rule.get("where") or rule.get("text") or f"rule {rule.get('index')}",
                    "where": rule.get("where"),
                    "packets": packets,
                    "bytes": _num(rule.get("bytes")),
                    "share": packets / entering if entering else None,
                }
            )
    rows.sort(key=lambda r: -int(r["packets"]))
    return rows[:top]


# -- the CPU profile ------------------------------------------------------------------


def differential(
    base: Mapping[str, float], variant: Mapping[str, float], top: int = TOP_FUNCTIONS
) -> list[dict[str, Any]]:
    """The functions whose share of the samples grew from `base` to `variant` (shares
    as fractions), the largest growth first: function, both shares, the difference."""
    grew = sorted(
        ((share - base.get(fn, 0.0), fn, share) for fn, share in variant.items()),
        key=lambda g: (-g[0], g[1]),
    )
    return [
        {"function": fn, "base_share": base.get(fn, 0.0), "share": share, "delta": delta}
        for delta, fn, share in grew[:top]
        if delta > 0
    ]


def _profile_by(lines: Sequence[RecordLine]) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {(ln.point_id, ln.variant): ln.record for ln in lines if ln.rtype == "profile"}


def summarise(given: Sequence[Mapping[str, Any] | RecordLine]) -> list[dict[str, Any]]:
    """The summary's `attribution` rows, one per (point, configuration) the attribution
    round measured: its hot rules and chain walks (`rules`, by host), its profile or
    why there is none, and the functions that grew against the point's baseline."""
    lines = [as_line(ln) for ln in given]
    profiles = _profile_by(lines)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for line in lines:
        rec = line.record
        if line.rtype not in ATTRIBUTED:
            continue
        key = (line.point_id, line.variant)
        row = rows.setdefault(
            key,
            {
                "workload": line.workload,
                "point_id": key[0],
                "label": line.label,
                "variant": key[1],
                "rules": [],
                "profile": None,
            },
        )
        if rec.get("type") == "rule_counts":
            row["rules"].append(
                {
                    "host": rec.get("host"),
                    "source": rec.get("source"),
                    "walk": rec.get("walk", True),
                    "restored": rec.get("restored"),
                    "chains": walks(rec),
                    "hot": hot_rules(rec),
                }
            )
        elif rec.get("type") == "profile":
            base = profiles.get((key[0], BASELINE))
            prof: dict[str, Any] = {
                "profiled": bool(rec.get("profiled")),
                "why": rec.get("why"),
                "samples": rec.get("samples"),
                "cpus": rec.get("cpus"),
                "by_comm": rec.get("by_comm") or {},
            }
            if rec.get("profiled") and key[1] != BASELINE:
                if base is not None and base.get("profiled"):
                    prof["grew"] = differential(base.get("self") or {}, rec.get("self") or {})
                else:
                    prof["grew"] = None
                    prof["why_no_differential"] = (base or {}).get(
                        "why"
                    ) or "the baseline was not profiled"
            row["profile"] = prof
    return list(rows.values())
