"""What each variant decides for each flow of a rule-set review, compared.

Read from run.json's `verdicts` (secperf.run.verdict_probe): for every flow, each
variant's decision and the rule that took it. A review must see behaviour before cost:
`changes` lists every flow that two variants decide differently; `misses` the flows
whose decision is not the one they were derived for (a flow made for an accepting rule
that is denied, a probe for a denying rule that passes, or a flow decided by another
rule than its own: the traffic did not exercise that rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A review's suggested rewrite and the rule set it rewrites (secperf review --suggest).
REWRITE, ORIGINAL = "suggested", "proposed"


def behaviour(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """The summary's `behaviour` section, or None when the run probed no flows."""
    verdicts = meta.get("verdicts")
    if not isinstance(verdicts, Mapping) or not verdicts:
        return None
    variants = list(verdicts)
    flows: dict[str, dict[str, Any]] = {}
    for variant, rows in verdicts.items():
        for row in rows:
            entry = flows.setdefault(
                row["flow"],
                {
                    "flow": row["flow"],
                    "describe": row.get("describe"),
                    "expect": row.get("expect"),
                    "derived_for": row.get("derived_for"),
                    "origin": row.get("origin"),
                    "variants": {},
                },
            )
            entry["variants"][variant] = {
                "verdict": row.get("verdict"),
                "decided_by": row.get("decided_by"),
                "own": row.get("own", True),
                "derived_for": row.get("derived_for"),
                "matched": row.get("matched") or [],
            }
    changes = [
        f
        for f in flows.values()
        if len({v["verdict"] for v in f["variants"].values()}) > 1
        or len(f["variants"]) < len(variants)
    ]
    misses: dict[str, list[dict[str, Any]]] = {}
    coverage: dict[str, dict[str, int]] = {}
    for variant in variants:
        hit = total = 0
        for f in flows.values():
            mine = f["variants"].get(variant)
            if mine is None or f["expect"] is None or not mine.get("own", True):
                continue  # another rule set's flow: a change, if any, is listed above
            derived = mine.get("derived_for", f["derived_for"])
            if f["expect"] == "accept" and derived is not None:
                total += 1
            wrong = (f["expect"] == "accept") != (mine["verdict"] == "accept")
            # it reached its rule: that rule decided it, or matched it on the way (a NAT
            # statement's flow is decided by the filter rule that lets it through)
            reached = mine["decided_by"] == derived or derived in mine.get("matched", [])
            other_rule = derived is not None and not reached
            if f["expect"] == "accept" and derived is not None and not wrong and not other_rule:
                hit += 1
            if wrong or other_rule:
                misses.setdefault(variant, []).append(
                    {
                        "flow": f["flow"],
                        "describe": f["describe"],
                        "expect": f["expect"],
                        "derived_for": derived,
                        **mine,
                    }
                )
        coverage[variant] = {"accepting_rules": total, "hit": hit}
    out = {
        "variants": variants,
        "flows": list(flows.values()),
        "changes": changes,
        "misses": misses,
        "coverage": coverage,
    }
    rmap = meta.get("rule_set_map")
    if isinstance(rmap, Mapping) and rmap.get("unexercised"):
        # rules no coverage flow can exercise, and why (secperf.rulesets.flows' notes)
        out["unexercised"] = list(rmap["unexercised"])
    if REWRITE in variants and ORIGINAL in variants:
        both = [f for f in flows.values() if {REWRITE, ORIGINAL} <= set(f["variants"])]
        differ = [
            f["flow"]
            for f in both
            if f["variants"][REWRITE]["verdict"] != f["variants"][ORIGINAL]["verdict"]
        ]
        missing = len(flows) - len(both)
        out["rewrite"] = {"of": ORIGINAL, "flows": len(both), "differ": differ, "untraced": missing}
    return out
