"""The behaviour section of a rule-set review: flows the variants decide differently,
first, before any cost (secperf.results.behaviour builds it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

SHOWN = 20  # flows listed per part; the rest are counted (every flow is in summary.json)


def _coverage(section: Mapping[str, Any]) -> str:
    parts = [
        f"{v} hits {c['hit']} of {c['accepting_rules']} accepting rules"
        for v, c in section["coverage"].items()
        if c["accepting_rules"]
    ]
    return "; ".join(parts)


def _short(text: str) -> str:
    """Rule files named relative to the working directory, where they lie under it."""
    return text.replace(f"{Path.cwd()}/", "")


def behaviour_lines(section: Mapping[str, Any]) -> list[str]:
    """Plain lines (the terminal and the HTML report share them)."""
    return [_short(line) for line in _lines(section)]


def _lines(section: Mapping[str, Any]) -> list[str]:
    flows, changes = section["flows"], section["changes"]
    cover = _coverage(section)
    out = [
        f"Behaviour — each flow's decision in each variant, traced before any measurement: "
        f"{len(flows)} flows" + (f"; {cover}" if cover else "")
    ]
    if not changes:
        out.append(f"  no behaviour change: every variant decides all {len(flows)} flows alike")
    else:
        out.append(f"  {len(changes)} flow(s) decided differently:")
        for f in changes[:SHOWN]:
            derived = f" (derived for {f['derived_for']})" if f.get("derived_for") else ""
            out.append(f"    {f['flow']}  {f['describe']}{derived}")
            for variant, d in f["variants"].items():
                out.append(f"      {variant:<12} {d['verdict']:<7} {d['decided_by']}")
        if len(changes) > SHOWN:
            out.append(f"    … and {len(changes) - SHOWN} more (summary.json, behaviour)")
    rewrite = section.get("rewrite")
    if rewrite:
        differ, n = rewrite["differ"], rewrite["flows"]
        if differ or rewrite["untraced"]:
            out.append(
                f"  suggested against {rewrite['of']}: NOT equivalent: {len(differ)} of {n} "
                f"flows decided differently ({', '.join(differ[:SHOWN])}), "
                f"{rewrite['untraced']} not traced in both"
            )
        else:
            out.append(
                f"  suggested against {rewrite['of']}: equal on these {n} flows, not a proof"
            )
    for variant, misses in section["misses"].items():
        out.append(
            f"  {variant}: {len(misses)} flow(s) not decided as derived (the traffic did not "
            "exercise their rule as intended):"
        )
        for m in misses[:SHOWN]:
            want = "through" if m["expect"] == "accept" else "denied"
            meant = m["derived_for"] or "policy"
            out.append(
                f"    {m['flow']}  {m['describe']}: meant {want} by {meant}, "
                f"{m['verdict']} by {m['decided_by']}"
            )
        if len(misses) > SHOWN:
            out.append(f"    … and {len(misses) - SHOWN} more")
    never = section.get("unexercised") or []
    if never:
        out.append(f"  {len(never)} rule(s) no coverage flow can exercise (not in the counts):")
        out += [f"    {n}" for n in never[:SHOWN]]
        if len(never) > SHOWN:
            out.append(f"    … and {len(never) - SHOWN} more (run.json, rule_set_map)")
    return out


def behaviour_table(section: Mapping[str, Any]) -> Group:
    lines = behaviour_lines(section)
    grid = Table.grid()
    grid.add_column()
    for line in lines[1:]:
        grid.add_row(Text(line))
    return Group(Text(lines[0], style="bold"), grid)
