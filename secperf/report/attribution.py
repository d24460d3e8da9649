"""Where the cost goes, as tables: per configuration its hot rules, the rules a packet
walks per chain, and the functions whose share of the CPU grew against the baseline.

Built from the summary's `attribution` rows (secperf.results.attribution); the
terminal (`--details`) and the HTML report draw them beside the workload's tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from secperf.tables import BASELINE, Cell, ReportTable, fmt_value

ROUND_NOTE = (
    "from the attribution round, after the measured ones (its rates are in no figure): "
    "one test with the rule set counted (a counter on every rule of a copy of the live "
    "rule set, the original restored after), one profiled (perf cpu-clock sampling)"
)


def _pct(x: object) -> str:
    return f"{float(x) * 100:.1f}%" if isinstance(x, int | float) else "–"


def _text(value: object) -> Cell:
    return Cell(str(value) if value is not None else "–", numeric=False)


def _chain(r: Mapping[str, Any]) -> str:
    return f"{r.get('family')} {r.get('table')} {r.get('chain')}"


def rules_tables(workload: str, row: Mapping[str, Any]) -> list[ReportTable]:
    """The hot rules and the walk per chain of one configuration at one point."""
    point, variant = str(row.get("label") or row.get("point_id")), str(row.get("variant"))
    hot: list[list[Cell]] = []
    walk: list[list[Cell]] = []
    for part in row.get("rules") or []:
        host = str(part.get("host"))
        for r in part.get("hot") or []:
            hot.append(
                [
                    _text(host),
                    _text(_chain(r)),
                    _text(r.get("rule")),
                    Cell(str(r.get("packets"))),
                    Cell(_pct(r.get("share"))),
                ]
            )
        for c in part.get("chains") or []:
            if not c.get("rules"):
                continue
            walk.append(
                [
                    _text(host),
                    _text(_chain(c)),
                    _text(c.get("hook") or "(jumped to)"),
                    Cell(str(c.get("rules"))),
                    Cell("–" if c.get("entering") is None else str(c.get("entering"))),
                    Cell(fmt_value(c.get("mean_walked"))),
                ]
            )
    if not hot and not walk:
        return []
    tables = [
        ReportTable(
            workload,
            "hot_rules",
            f"{workload} — {variant}'s hot rules ({point})",
            ["host", "chain", "rule (file:line where known)", "packets", "of entering"],
            hot,
            [
                ROUND_NOTE,
                "of entering = the rule's packets over the packets that entered its chain",
            ],
        )
    ]
    if walk:
        tables.append(
            ReportTable(
                workload,
                "rules_walked",
                f"{workload} — {variant}: rules a packet walks ({point})",
                ["host", "chain", "hook", "rules", "entering", "mean walked"],
                walk,
                [
                    "mean walked = the rules a packet entering the chain evaluates before "
                    "one sends it out (accept, drop, reject, a NAT statement, goto, return; "
                    "a jump's chain counts in its own row); legacy iptables counts no "
                    "entering packets, so no walk"
                ],
            )
        )
    return tables


def functions_table(workload: str, row: Mapping[str, Any]) -> ReportTable | None:
    """The functions whose share of the samples grew most against the baseline."""
    prof = row.get("profile")
    if not isinstance(prof, Mapping) or row.get("variant") == BASELINE:
        return None
    point, variant = str(row.get("label") or row.get("point_id")), str(row.get("variant"))
    title = f"{workload} — where {variant}'s CPU goes, against the baseline ({point})"
    columns = ["function", "baseline", variant, "grew by"]
    if not prof.get("profiled") or prof.get("grew") is None:
        why = prof.get("why") or prof.get("why_no_differential") or "not profiled"
        return ReportTable(workload, "profile", title, columns, [], [str(why)])
    body = [
        [
            _text(g.get("function")),
            Cell(_pct(g.get("base_share"))),
            Cell(_pct(g.get("share"))),
            Cell(f"+{float(g.get('delta') or 0) * 100:.1f} pp"),
        ]
        for g in prof.get("grew") or []
    ]
    cpus = prof.get("cpus")
    notes = [
        "shares of the CPU samples (perf record -e cpu-clock -g, the leaf function of each "
        f"sample) on {'CPUs ' + ','.join(map(str, cpus)) if cpus else 'every CPU'}, "
        f"{prof.get('samples')} samples; the functions whose share grew most against "
        "plain forwarding's, kernel and user space",
    ]
    comms = prof.get("by_comm") or {}
    if comms:
        top = ", ".join(f"{c} {_pct(v)}" for c, v in list(comms.items())[:5])
        notes.append(
            f"{variant}'s samples by process (softirq work counts in the task it "
            f"interrupted; others here are the machine's noise): {top}"
        )
    return ReportTable(workload, "profile", title, columns, body, notes)


def attribution_tables(workload: str, rows: Sequence[Mapping[str, Any]]) -> list[ReportTable]:
    """Every configuration's attribution tables for one workload, in summary order."""
    out: list[ReportTable] = []
    for row in rows:
        if row.get("workload") != workload:
            continue
        out += rules_tables(workload, row)
        table = functions_table(workload, row)
        if table is not None:
            out.append(table)
    return out


def cost_lines(summary: Mapping[str, Any]) -> list[str]:
    """One line per configuration and point beside the verdicts: its hottest rule,
    the longest walk, the functions that grew most (the attribution tables' gist)."""
    out: list[str] = []
    for row in summary.get("attribution") or []:
        if row.get("variant") == BASELINE:
            continue
        said: list[str] = []
        parts = row.get("rules") or []
        hot = [h for p in parts for h in p.get("hot") or []]
        if hot:
            top = max(hot, key=lambda h: int(h.get("packets") or 0))
            share = f", {_pct(top.get('share'))} of its chain" if top.get("share") else ""
            said.append(f"hottest rule {top.get('rule')}{share}")
        walked = [c for p in parts for c in p.get("chains") or [] if c.get("mean_walked")]
        if walked:
            most = max(walked, key=lambda c: float(c["mean_walked"]))
            said.append(f"{fmt_value(most['mean_walked'])} rules walked a packet in {_chain(most)}")
        prof = row.get("profile") or {}
        grew = prof.get("grew") or []
        if grew:
            fns = ", ".join(f"{g['function']} +{float(g['delta']) * 100:.1f} pp" for g in grew[:3])
            said.append(f"CPU grew most in {fns}")
        elif prof and not prof.get("profiled"):
            said.append(str(prof.get("why") or "not profiled"))
        if said:
            where = str(row.get("label") or row.get("workload") or row.get("point_id"))
            out.append(f"{row.get('variant')} ({where}): " + "; ".join(said))
    return out
