"""What the report says beyond the figures: each row's bottleneck, the comparisons
that cannot show the mechanism's cost, the targets met or not, the placement and the
machine's noise, and the kernel's softirq time of the traced round.

The standard tables (secperf.report.terminal) take a "limited by" column and notes
from here; a kind's own layout gets the same as notes under its tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from secperf.tables import BASELINE, Cell, ReportTable, fmt_value

# the header line that says what the placement means for the numbers
PLACEMENT_PREFIX = "placement:"

CANNOT = "‼"  # marks a comparison whose two sides hit the same non-DUT limit


def limit_cell(rows: Sequence[Mapping[str, Any] | None]) -> Cell:
    """One table row's limits: one name when every configuration hit the same, else
    each configuration's ("baseline: one CPU; acl: link client-dut")."""
    named = [
        (str(r.get("variant")), str((r.get("bottleneck") or {}).get("short") or "?"))
        for r in rows
        if r is not None and r.get("bottleneck")
    ]
    if not named:
        return Cell("–", numeric=False)
    flagged = any(r is not None and r.get("comparison") for r in rows)
    shorts = list(dict.fromkeys(s for _, s in named))
    text = shorts[0] if len(shorts) == 1 else "; ".join(f"{v}: {s}" for v, s in named)
    return Cell(text + (f" {CANNOT}" if flagged else ""), numeric=False, missed=flagged)


def limit_notes(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each distinct limit in full, and each comparison that cannot show the cost."""
    notes: list[str] = []
    seen: set[str] = set()
    for r in rows:
        b = r.get("bottleneck") or {}
        text = b.get("text")
        if not text or b.get("kind") in seen:
            continue
        seen.add(str(b.get("kind")))
        notes.append(f"limited by {b.get('short')}: {text} (e.g. {_where(r)})")
    flagged: dict[str, list[str]] = {}
    for r in rows:
        if r.get("comparison") and r.get("primary", True):
            flagged.setdefault(str(r["comparison"]), []).append(_where(r))
    for text, where in flagged.items():
        notes.append(f"{CANNOT} {', '.join(dict.fromkeys(where))}: {text}")
    return notes


def _where(r: Mapping[str, Any]) -> str:
    return f"{r.get('variant')} @ {r.get('label') or r.get('point_id')}"


def limits_for_layout(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Notes for a kind's own tables: each point's and configuration's limit."""
    primary = [r for r in rows if r.get("primary")] or list(rows)
    by_key: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in primary:
        by_key.setdefault((str(r.get("point_id")), str(r.get("variant"))), r)
    cells = [
        f"{_where(r)}: {(r.get('bottleneck') or {}).get('short', '–')}" for r in by_key.values()
    ]
    return (["limited by — " + "; ".join(cells)] if cells else []) + limit_notes(primary)


def target_note(summary: Mapping[str, Any]) -> str:
    """The asked targets, as every table's note says them."""
    conf = float(summary.get("confidence", 0.95)) * 100
    value = summary.get("halfwidth_target_pct")
    pp = summary.get("degradation_target_pp", value)
    parts = []
    if isinstance(pp, int | float):
        parts.append(f"each Δ% ±{pp:g} points")
    if isinstance(value, int | float):
        parts.append(f"each value ±{value:g} %")
    return f"targets at {conf:g} %: " + ", ".join(parts)


# -- the header -----------------------------------------------------------------------


def placement_lines(summary: Mapping[str, Any], run_meta: Mapping[str, Any]) -> list[str]:
    """Where the testbed's processes ran and what that means for the numbers; the
    budget; the machine's noise over the rounds kept."""
    lines: list[str] = []
    p: Mapping[str, Any] = summary.get("placement") or run_meta.get("placement") or {}
    if p:
        cpus = ",".join(str(c) for c in p.get("testbed_cpus") or [])
        mine = p.get("secperf_cpus")
        where = f" (testbed on CPU {cpus}" + (
            f", secperf and the rest of the machine on {','.join(str(c) for c in mine)})"
            if mine
            else ")"
        )
        lines.append(
            f"{PLACEMENT_PREFIX} {p.get('mode')}{where if cpus else ''}: {p.get('meaning', '')}"
        )
    budget = summary.get("budget_s")
    if isinstance(budget, int | float):
        lines.append(
            f"rounds: until every target is met or the {budget:g} s budget is spent; "
            + target_note(summary)
        )
    noise: list[Mapping[str, Any]] = list(summary.get("noise") or [])
    if noise:
        others = [n["others_pct_mean"] for n in noise if n.get("others_pct_mean") is not None]
        loads = [n["load_max"] for n in noise if n.get("load_max") is not None]
        disturbed = sum(int(n.get("disturbed_n") or 0) for n in noise)
        tests = sum(int(n.get("n") or 0) for n in noise)
        threshold = noise[0].get("disturbed_pct")
        text = (
            f"machine: other processes used {fmt_value(min(others))}–{fmt_value(max(others))} "
            "% of the testbed's CPUs"
            if others
            else "machine: other processes' CPU not measured"
        )
        if loads:
            text += f", load average up to {max(loads):.2f}"
        if disturbed:
            text += (
                f"; {disturbed} of {tests} tests kept although disturbed (others above "
                f"{threshold:g} % of a CPU; measured again first, until retrying could not "
                "find a quiet moment): compare with care"
            )
        else:
            text += "; no test disturbed"
        lines.append(text)
    for pid, o in sorted((summary.get("offered") or {}).items()):
        lines.append(
            f"open loop: {pid} offered {fmt_value(o.get('rate'))}/s, {o.get('load', 0) * 100:g} "
            f"% of the baseline's closed-loop {o.get('metric')} "
            f"({fmt_value(o.get('closed_loop_mean'))}, measured first)"
        )
    note = summary.get("softirq_note")
    if note:
        lines.append(f"kernel softirq time: not measured ({note})")
    return lines


# -- the traced round ----------------------------------------------------------------------


def softirq_table(workload: str, rows: Sequence[Mapping[str, Any]]) -> ReportTable:
    """The kernel's softirq time per unit of work (the traced round) and each
    variant's own cost beyond the baseline."""
    unit = str(rows[0].get("unit", "unit"))
    columns = [
        "point",
        "variant",
        "NET_RX",
        "all softirq",
        "DUT processes",
        "own cost",
        "limited by",
        "n",
    ]
    body: list[list[Cell]] = []
    for r in rows:
        per = r.get("per_unit_us") or {}
        own = r.get("own_us")
        body.append(
            [
                Cell(str(r.get("label") or r.get("point_id")), numeric=False),
                Cell(str(r.get("variant")), numeric=False),
                Cell(fmt_value(per.get("net_rx"))),
                Cell(fmt_value(per.get("total"))),
                Cell(fmt_value(r.get("dut_processes_us"))),
                Cell("–" if r.get("variant") == BASELINE or own is None else fmt_value(own)),
                limit_cell([r]),
                Cell(str(r.get("n", 1))),
            ]
        )
    notes = [
        f"CPU µs per {unit}, from one traced round per configuration after the measured "
        "ones: every softirq timed by the kernel's irq:softirq_entry/exit tracepoints "
        "(BPF, bpftrace), exact where /proc/stat's softirq column is tick-sampled; "
        "tracing slows the path, so that round's rates are not used",
        "NET_RX = receive processing (forwarding, netfilter, veth); DUT processes = the "
        "DUT's cgroup in the measured rounds (a user-space mechanism's daemons); own cost "
        "= the variant's softirq and DUT processes beyond the baseline's",
        "one round: no interval; read it as the size of the kernel's share, not to a digit",
        "limited by: the measured rounds' limit (the traced round's rates are in no figure)",
    ]
    title = f"{workload} — the mechanism's own cost (CPU µs/{unit}, lower is better)"
    return ReportTable(workload, "softirq", title, columns, body, notes)
