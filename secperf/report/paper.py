"""The verdicts against the source paper (summary.json "paper", built by
secperf.results.paper), as lines under the report's tables, a count per figure, and a
Markdown table for docs/studies/ (`secperf report RUN --paper-markdown`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from secperf.results.paper import AGREES, DIFFERS, EXPLAINED, UNMEASURED, UNRESOLVED

Verdict = Mapping[str, Any]
UNPAIRED_NOTE = (
    "unpaired: a change against another variant in a kept run without its rounds "
    "(records.jsonl), from the two rows' means alone: each mean's interval at half the "
    "error rate, the ratio's range over both (Bonferroni), wider than a paired interval"
)


def verdicts(summary: Mapping[str, Any]) -> list[Verdict]:
    return [v for v in summary.get("paper") or [] if isinstance(v, Mapping)]


def _row_text(v: Verdict) -> str:
    label = str(v.get("label") or "")
    row = str(v.get("row"))
    # a row that addresses several points gets a line per point: say which
    return f"{row} ({label})" if label and label not in row else row


def _where(v: Verdict) -> str:
    return f"{v.get('figure')}, {_row_text(v)}"


def outcome(v: Verdict) -> str:
    """The verdict in words: "agrees", "differs because …; shown by X: +3 %", …"""
    kind = v.get("verdict")
    why = str(v.get("why") or "")
    if kind == AGREES:
        return f"agrees (within {v.get('tolerance')})"
    if kind == EXPLAINED:
        return (
            f"differs because {v.get('because')}; shown by {v.get('shown_by')}: "
            f"{v.get('shown')}, {why}"
        )
    if kind == DIFFERS:
        if v.get("because"):
            shown = f" by {v.get('shown_by')}: {v.get('shown')}" if v.get("shown") else ""
            tail = f"; not shown{shown}: {why}" if why else ", not shown by a row of this run"
            return f'differs, unexplained: "{v.get("because")}" is asserted{tail}'
        return f"differs, unexplained{f': {why}' if why else ''}"
    if kind == UNRESOLVED:
        remedy = f" ({v.get('remedy')})" if v.get("remedy") else ""
        if v.get("by_cause"):  # the row differs; its cause cannot be judged
            shown = f": {v.get('shown')}" if v.get("shown") else ""
            return (
                f'not resolved: differs, "{v.get("because")}" not judged by '
                f"{v.get('shown_by')}{shown}: {why}{remedy}"
            )
        return f"not resolved: {why}{remedy}"
    return f"not measured: {why or 'no figure'}"


def line(v: Verdict) -> str:
    ours = v.get("ours")
    figures = f"paper {v.get('paper')}" + (f", ours {ours}" if ours else "")
    note = f" [{v.get('note')}]" if v.get("note") else ""
    return f"{_where(v)}: {figures} — {outcome(v)}{note}"


def lines_under(summary: Mapping[str, Any], tables: Sequence[tuple[str, str]]) -> list[list[str]]:
    """For each (workload, metric) table of the report, the verdict lines printed under
    it: those on its workload and metric, and under a workload's last table those on a
    metric no table of it shows."""
    items = verdicts(summary)
    placed = set(tables)
    last = {w: i for i, (w, _) in enumerate(tables)}
    out: list[list[str]] = []
    for i, (workload, metric) in enumerate(tables):
        mine = [
            line(v)
            for v in items
            if v.get("workload") == workload
            and (
                v.get("metric") == metric
                or (last[workload] == i and (workload, str(v.get("metric"))) not in placed)
            )
        ]
        out.append(list(dict.fromkeys(mine)) if (workload, metric) not in tables[:i] else [])
    return out


def unplaced(summary: Mapping[str, Any], tables: Sequence[tuple[str, str]]) -> list[str]:
    """Lines of verdicts on a workload no table of the report shows."""
    workloads = {w for w, _ in tables}
    return [line(v) for v in verdicts(summary) if str(v.get("workload")) not in workloads]


# a measurement read by several rows counts once, with the least of their verdicts
_LEAST_FIRST = (DIFFERS, UNMEASURED, UNRESOLVED, EXPLAINED, AGREES)


def measurement(v: Verdict) -> tuple[object, ...]:
    """What a verdict reads: the run's row (variant, against, point, metric) and whether
    it is a value or a change; two paper rows with one key read one measurement."""
    return (
        v.get("variant"),
        v.get("against"),
        v.get("point_id") or v.get("workload"),
        v.get("metric"),
        v.get("compares"),
    )


def _measurements(items: Sequence[Verdict]) -> dict[tuple[object, ...], list[Verdict]]:
    groups: dict[tuple[object, ...], list[Verdict]] = {}
    for v in items:
        # a row no run row matched has no measurement of its own: it counts alone
        key = measurement(v) if v.get("verdict") != UNMEASURED else ("row", id(v))
        groups.setdefault(key, []).append(v)
    return groups


def _least(group: Sequence[Verdict]) -> str:
    kinds = {str(v.get("verdict")) for v in group}
    return next((k for k in _LEAST_FIRST if k in kinds), UNMEASURED)


def _count(kinds: Sequence[str]) -> dict[str, int]:
    return {
        k: sum(x == k for x in kinds) for k in (AGREES, EXPLAINED, DIFFERS, UNRESOLVED, UNMEASURED)
    }


def shared(items: Sequence[Verdict]) -> list[str]:
    """ "Windows XP, 56/4 KB = Windows 7, 56/4 KB" per measurement read by several rows."""
    return [
        " = ".join(_row_text(v) for v in g) for g in _measurements(items).values() if len(g) > 1
    ]


def count_line(items: Sequence[Verdict], title: str, *, name_shared: bool = True) -> str:
    """ "Table I: 4 rows; 3 agree, 1 differs with its cause shown (100 % agree or are
    explained)"; rows that read one measurement count once, with the least of their
    verdicts, and the line says which (`name_shared`) or how many."""
    groups = list(_measurements(items).values())
    c = _count([_least(g) for g in groups])
    parts = [f"{c[AGREES]} agree{'s' if c[AGREES] == 1 else ''}"]
    if c[EXPLAINED]:
        parts.append(
            f"{c[EXPLAINED]} differ{'s' if c[EXPLAINED] == 1 else ''} with the cause shown"
        )
    if c[DIFFERS]:
        parts.append(f"{c[DIFFERS]} differ{'s' if c[DIFFERS] == 1 else ''} unexplained")
    if c[UNRESOLVED]:
        parts.append(f"{c[UNRESOLVED]} not resolved")
    if c[UNMEASURED]:
        parts.append(f"{c[UNMEASURED]} not measured")
    share = 100.0 * (c[AGREES] + c[EXPLAINED]) / len(groups) if groups else 0.0
    rows = f"{len(items)} row{'' if len(items) == 1 else 's'}"
    copies = ""
    if len(groups) < len(items):
        rows += f" reading {len(groups)} measurement{'' if len(groups) == 1 else 's'}"
        listed = "; ".join(shared(items))
        copies = (
            f" [one measurement, counted once with the least verdict: {listed}]"
            if name_shared
            else " [rows reading one measurement count once, with the least verdict]"
        )
    what = "measurements" if len(groups) < len(items) else "rows"
    return (
        f"{title}: {rows}; {', '.join(parts)} ({share:.0f} % of {what} agree or are "
        f"explained){copies}"
    )


def figure_counts(summary: Mapping[str, Any]) -> list[str]:
    """A count per figure of the paper, then one for all of them."""
    items = verdicts(summary)
    if not items:
        return []
    figures = list(dict.fromkeys(str(v.get("figure")) for v in items))
    out = [count_line([v for v in items if str(v.get("figure")) == f], f) for f in figures]
    return [*out, count_line(items, "Against the paper, all rows", name_shared=False)]


def _cell(text: object) -> str:
    return str(text or "").replace("|", "\\|")


def markdown(summary: Mapping[str, Any]) -> str:
    """The verdicts as the side-by-side table of docs/studies/, with the counts."""
    items = verdicts(summary)
    if not items:
        return "(this run's scenario has no [[paper]] rows)\n"
    out = ["| Paper | Row | Paper's | Ours | Verdict |", "|---|---|---|---|---|"]
    for v in items:
        out.append(
            f"| {_cell(v.get('figure'))} | {_cell(_row_text(v))} | "
            f"{_cell(v.get('paper'))} | {_cell(v.get('ours') or '—')} | {_cell(outcome(v))} |"
        )
    out.append("")
    out += [f"- {c}" for c in figure_counts(summary)]
    if any(" unpaired" in str(v.get("ours") or "") + str(v.get("shown") or "") for v in items):
        out.append(f"- {UNPAIRED_NOTE}")
    return "\n".join(out) + "\n"
