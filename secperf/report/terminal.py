"""Tables of a run's summary, as the source papers print them.

One table per workload and metric: a row per workload point (the sweep label),
then the baseline's value and, for each variant, its value and its degradation
with the confidence interval. `build_tables` is the plain model that both the
terminal (rich) and the HTML report render.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from secperf import stats
from secperf.report import paper
from secperf.report.answer import answer_tables
from secperf.report.attribution import attribution_tables, cost_lines
from secperf.report.behaviour import behaviour_table
from secperf.report.checks import check_tables
from secperf.report.header import header_lines
from secperf.report.layouts import layout_of
from secperf.report.limits import (
    limit_cell,
    limit_notes,
    limits_for_layout,
    softirq_table,
    target_note,
)
from secperf.report.tags import tag_notes, tag_tables, variant_tags
from secperf.results.metrics import censored_words, ratio_scale
from secperf.results.summary import in_variant_order
from secperf.tables import (
    BASELINE,
    MISSED,
    SIGNIFICANT,
    Cell,
    ReportTable,
    Row,
    degradation_cell,
    fmt_value,
    reps,
    value_cell,
)

_STOP_WORDS = {
    "max_reached": "repetition cap reached",
    "budget_spent": "the time budget was spent",
    "interrupted": "run interrupted",
    "failed": "run failed",
    # the runner stops on the primary metrics' paired degradation; a mean may still be wide
    "ci_met": "repetitions stopped when every variant's paired degradation met it",
    "unpaired": "repetitions stopped: no round paired a primary metric",
}


def _metric_rank(row: Mapping[str, Any]) -> int:
    """Primary first, service demand beside it, then latency, loss and the rest."""
    if row.get("primary"):
        return 0
    if str(row.get("metric", "")).startswith("sd_"):
        return 1
    return 2


def _value_cell(row: Row | None) -> Cell:
    """A value cell, a search's censored outcome worded as its metric says."""
    return value_cell(row, censored_words(str(row.get("metric"))) if row is not None else None)


def _ordered_unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def paper_layouts(run_meta: Mapping[str, Any]) -> dict[str, str]:
    """Workload name -> table title, for workloads the scenario asks to print as a paper does."""
    scenario: Mapping[str, Any] = run_meta.get("scenario") or {}
    return {
        str(w.get("name")): str(w["table"])
        for w in scenario.get("workloads") or []
        if isinstance(w, Mapping) and w.get("table")
    }


def build_tables(
    summary: Mapping[str, Any], layouts: Mapping[str, str] | None = None
) -> list[ReportTable]:
    """The report's tables, in workload order, primary metrics first.

    A workload named in `layouts` is laid out as its source paper prints it
    (points as columns, variants and degradations as rows), under that title.
    """
    rows: list[Mapping[str, Any]] = list(summary.get("rows") or [])
    confidence = float(summary.get("confidence", 0.95))
    target = summary.get("halfwidth_target_pct")
    targets = target_note(summary)
    tables: list[ReportTable] = []
    cpu_rows: list[Mapping[str, Any]] = list(summary.get("cpu") or [])
    traced: list[Mapping[str, Any]] = list(summary.get("softirq") or [])
    names = [str(r["workload"]) for r in rows] + [str(c.get("workload")) for c in cpu_rows]
    for workload in _ordered_unique(names):
        wrows = [r for r in rows if r["workload"] == workload]
        layout = layout_of(wrows)
        if layout is not None:
            own = layout.tables(workload, wrows)  # the kind's own, not per metric
            if own:
                own[-1].footnotes.extend(limits_for_layout(wrows))
            tables += own
            continue
        metrics = _ordered_unique([str(r["metric"]) for r in wrows])
        metrics.sort(key=lambda m: _metric_rank(next(r for r in wrows if r["metric"] == m)))
        for metric in metrics:
            mrows = [r for r in wrows if r["metric"] == metric]
            table = _table(workload, metric, mrows, confidence, target, targets)
            if layouts and workload in layouts:
                table = transpose(table, layouts[workload])
            tables.append(table)
        cpu = [c for c in cpu_rows if c.get("workload") == workload]
        if cpu:
            tables.append(cpu_table(workload, cpu))
        mine = [t for t in traced if t.get("workload") == workload]
        if mine:
            tables.append(softirq_table(workload, mine))
        tables += attribution_tables(workload, summary.get("attribution") or [])
    return tables


RECONCILE_FLAG = "⚠"


def _cpu_cell(row: Mapping[str, Any], part: str) -> Cell:
    per = (row.get("per_unit_us") or {}).get(part) or {}
    pct = (row.get("percent") or {}).get(part) or {}
    if per.get("mean") is None:
        return Cell("–")
    text = fmt_value(per["mean"])
    if pct.get("mean") is not None:
        text += f" ({pct['mean']:.0f}%)"
    return Cell(text)


def _host_busy(row: Mapping[str, Any], host: str) -> bool:
    mean = ((row.get("per_unit_us") or {}).get(f"host:{host}") or {}).get("mean")
    return mean is None or mean > 0


def cpu_table(workload: str, rows: Sequence[Mapping[str, Any]]) -> ReportTable:
    """CPU per host: each host's cgroup, softirq, the testbed's sum and the machine,
    per unit of work and as % of one CPU, with the reconciliation of the parts."""
    unit = str(rows[0].get("unit", "unit"))
    every = _ordered_unique([str(h) for r in rows for h in r.get("hosts") or []])
    # A host where secperf started nothing (a switch, an idle server) counts no CPU by
    # construction: named once in a note rather than given a column of zeros.
    hosts = [h for h in every if any(_host_busy(r, h) for r in rows)]
    idle = [h for h in every if h not in hosts]
    columns = [
        "point",
        "variant",
        *hosts,
        "softirq",
        "testbed",
        "machine",
        "accounted",
        "limited by",
        "n",
    ]
    body: list[list[Cell]] = []
    flagged = False
    for r in rows:
        acc = r.get("accounted_pct")
        flag = bool(r.get("reconciliation_flag"))
        flagged |= flag
        acc_text = "–" if acc is None else f"{acc:.0f}%" + (f" {RECONCILE_FLAG}" if flag else "")
        body.append(
            [
                Cell(str(r.get("label") or r.get("point_id")), numeric=False),
                Cell(str(r.get("variant")), numeric=False),
                *(_cpu_cell(r, f"host:{h}") for h in hosts),
                _cpu_cell(r, "softirq"),
                _cpu_cell(r, "testbed"),
                _cpu_cell(r, "machine"),
                Cell(acc_text, missed=flag),
                limit_cell([r]),
                Cell(str(r.get("n", ""))),
            ]
        )
    inside = all(r.get("softirq_in_hosts", True) for r in rows)
    notes = [
        f"CPU µs per {unit} over the measured window (in brackets: % of one CPU); each host "
        "is its cgroup, every process secperf started there",
        "softirq = the kernel's forwarding, netfilter and veth work (and interrupts), "
        + (
            "which this kernel charges to the host that was running: it is inside the "
            "hosts' figures too, and the dut's column holds only its own processes"
            if inside
            else "which this kernel keeps out of the processes: testbed = hosts + softirq"
        ),
        "testbed = the work of the testbed's hosts; machine = "
        + (
            "the busy time of the CPUs the testbed runs on, exact (cpuidle residency "
            "around each test: the testbed's CPU over its share of it, never below the "
            "testbed); accounted = the testbed's share of it (exact: its cgroups and the "
            "kernel's ksoftirqd)"
            if all(r.get("machine_source") == "exact" for r in rows)
            else "the whole machine's busy time from /proc/stat (tick-sampled: it "
            "undercounts softirq-heavy work on this kind of kernel); accounted = testbed / "
            "machine"
        ),
        "softirq is /proc/stat's column (tick-sampled); the traced round's table below "
        "has it exact",
    ]
    if idle:
        notes.append(
            f"no process of secperf's ran on {', '.join(idle)}: their cgroups counted 0 µs"
        )
    if flagged:
        notes.append(
            f"{RECONCILE_FLAG} the parts and the machine total differ by more than 5 % in "
            "some round: other processes used the testbed's CPUs (the header says how "
            "much), or the counts disagree; service demand counts the testbed only"
        )
    notes += limit_notes(rows)
    title = f"{workload} — CPU per host (CPU µs/{unit}, lower is better)"
    return ReportTable(workload, "cpu", title, columns, body, notes)


# Keys that a paper names in this order ("socket 56 / message 4 KB", "request / response").
_KEY_ORDER = ("socket_buffer", "message", "request", "response")


def short_columns(labels: Sequence[str]) -> tuple[str, list[str]]:
    """Point labels "message=4KiB socket_buffer=56KiB" as a corner naming the keys
    ("socket buffer / message") and values as headers ("56KiB / 4KiB"), when every
    label sets the same keys; else ("", labels) unchanged."""
    parsed: list[dict[str, str]] = []
    for label in labels:
        pairs = [part.partition("=") for part in label.split()]
        if not pairs or any(not sep or not key or not value for key, sep, value in pairs):
            return "", list(labels)
        parsed.append({key: value for key, _, value in pairs})
    keys = list(parsed[0])
    if any(list(p) != keys and set(p) != set(keys) for p in parsed):
        return "", list(labels)
    rank = {key: i for i, key in enumerate(_KEY_ORDER)}
    keys.sort(key=lambda k: rank.get(k, len(rank)))
    corner = " / ".join(k.replace("_", " ") for k in keys)
    return corner, [" / ".join(_grouped(p[k]) for k in keys) for p in parsed]


def _grouped(value: str) -> str:
    """160000 -> 160,000; anything else as written."""
    return f"{int(value):,}" if value.isdigit() and len(value) > 4 else value


def transpose(table: ReportTable, paper_title: str) -> ReportTable:
    """Points become columns; baseline, each variant and each degradation become rows."""
    if not table.rows:
        return table
    names = table.columns[1:-1]  # baseline, v1, v1 Δ%, v2, v2 Δ% ...
    corner, heads = short_columns([row[0].text for row in table.rows])
    columns = [corner, *heads]
    rows = [
        [Cell(name, numeric=False), *(row[1 + i] for row in table.rows)]
        for i, name in enumerate(names)
    ]
    counts = [row[-1] for row in table.rows]
    notes = list(table.footnotes)
    if all(len(set(c.text.split("/"))) == 1 for c in counts):
        # every row ran as often: one number per column, not "2/2/2/2/2/2"
        counts = [Cell(c.text.split("/")[0]) for c in counts]
        notes = [n for n in notes if not n.startswith("n = repetitions:")]
        notes.append("n = repetitions of each row")
    rows.append([Cell("n", numeric=False), *counts])
    title = f"{paper_title} — {table.title.split(' — ', 1)[-1]}"
    return ReportTable(table.workload, table.metric, title, columns, rows, notes)


def _table(
    workload: str,
    metric: str,
    mrows: list[Mapping[str, Any]],
    confidence: float,
    target: Any,
    targets: str = "",
) -> ReportTable:
    first = mrows[0]
    unit = str(first.get("unit", ""))
    label = str(first.get("metric_label") or metric)
    better = "higher" if first.get("higher_is_better") else "lower"
    title = f"{workload} — {label} ({unit}, {better} is better)"
    if any(r["variant"] != BASELINE for r in mrows):
        title += "; Δ% = cost, positive = worse"  # at the top, not only in a footnote
    points = _ordered_unique([str(r["point_id"]) for r in mrows])
    variants = _ordered_unique([str(r["variant"]) for r in mrows if r["variant"] != BASELINE])
    by_key = {(str(r["point_id"]), str(r["variant"])): r for r in mrows}
    columns = ["point", BASELINE]
    for v in variants:
        columns += [v, f"{v} Δ% [CI]"]
    columns += ["limited by", "n"]
    body: list[list[Cell]] = []
    stops: set[str] = set()
    outliers: list[str] = []
    any_missed = any_significant = False
    searches = [r["search"] for r in mrows if r.get("search")]
    for pid in points:
        base = by_key.get((pid, BASELINE))
        some = base or next(r for r in mrows if r["point_id"] == pid)
        cells = [Cell(str(some.get("label") or pid), numeric=False), _value_cell(base)]
        counts = [reps(base)]
        for v in variants:
            row = by_key.get((pid, v))
            cells += [_value_cell(row), _degradation_cell(row)]
            counts.append(reps(row))
            if row is not None and row.get("degradation_target_met") is False:
                any_missed = True
                reason = row.get("stop_reason")
                stops.add(_STOP_WORDS.get(str(reason), str(reason)) if reason else "")
        cells.append(limit_cell([base, *(by_key.get((pid, v)) for v in variants)]))
        cells.append(Cell("/".join(counts)))
        body.append(cells)
        for row in [base] + [by_key.get((pid, v)) for v in variants]:
            if row is None:
                continue
            if not row.get("censored_n") and not row.get("ci_target_met", False):
                any_missed = True
                reason = row.get("stop_reason")
                stops.add(_STOP_WORDS.get(str(reason), str(reason)) if reason else "")
                resolution = (row.get("search") or {}).get("resolution_pct")
                if isinstance(target, int | float) and (resolution or 0) / 2 > target:
                    stops.add("a search's resolution is coarser than the target")
            if row.get("significant"):
                any_significant = True
            if row.get("outliers"):
                which = ", ".join(str(x) for x in row["outliers"])
                outliers.append(f"{row['variant']} @ {some.get('label') or pid}: rep {which}")
    pct = f"{confidence * 100:g} %"
    notes = [
        f"Δ% = cost against the baseline, positive = worse; [CI] at {pct} (paired by repetition)"
    ]
    if variants:  # what Δ% is, so that the means above need not be divided by hand
        notes.append(stats.delta_definition(_ratio_scale(first)))
    if any_significant:
        notes.append(f"{SIGNIFICANT} the degradation's CI excludes 0 (significant)")
    if any_missed:
        why = "; ".join(sorted(s for s in stops if s)) or "too few repetitions"
        tgt = (
            f" ({targets})"
            if targets
            else (f" ±{target:g} %" if isinstance(target, int | float) else "")
        )
        notes.append(f"{MISSED} CI target{tgt} not met: {why}")
    elif targets:
        notes.append(f"{targets}: met")
    notes += limit_notes(mrows)
    if searches:
        notes.append(_search_note(searches))
    if outliers:
        notes.append("outliers (kept): " + "; ".join(outliers))
    notes.append("n = repetitions: " + "/".join([BASELINE, *variants]))
    return ReportTable(workload, metric, title, columns, body, notes)


def _ratio_scale(row: Mapping[str, Any]) -> bool:
    """The scale of a row's Δ (the summary's `degradation_scale`, else its metric's)."""
    scale = row.get("degradation_scale")
    return scale == "ratio" if scale is not None else ratio_scale(str(row.get("metric")))


def _degradation_cell(row: Mapping[str, Any] | None) -> Cell:
    """A degradation, marked when its interval is wider than its target."""
    cell = degradation_cell(row)
    if row is not None and row.get("degradation_target_met") is False and cell.text != "–":
        cell.text += MISSED
        cell.missed = not cell.significant
    return cell


def _search_note(searches: Sequence[Mapping[str, Any]]) -> str:
    """What a search table's cells are."""
    if all(s.get("measure") == "count" for s in searches):
        return (
            "a count per repetition, opened until the connections began to fail (the "
            "limit found); one that stopped at a bound of its own first (every asked "
            "connection open, its time, descriptors or source ports) reads 'at least x', "
            "a lower bound in no mean, interval or Δ%"
        )
    resolutions = [s["resolution_pct"] for s in searches if s.get("resolution_pct") is not None]
    res = f" (here up to {max(resolutions):.0f} %)" if resolutions else ""
    measure = (
        "the flood rate achieved"
        if all(s.get("measure") == "achieved" for s in searches)
        else "the value asked, a rate or a connection count (each passing trial "
        "achieved ≥ 95 % of it)"
    )
    return (
        "a search per repetition, placed by "
        f"{measure}: value [interval] = mean of the searches that found a value, its "
        f"interval widened by their brackets, so never narrower than their resolution{res}; "
        "a search whose lowest value already failed reads '< x' (or 'denied already at x'), "
        "one whose highest value passed '≥ x' (or 'not denied up to x'): those are in no "
        "mean, interval or Δ%"
    )


# -- header -------------------------------------------------------------------


def _rich_cell(cell: Cell) -> Text:
    style = ""
    if cell.significant:
        style = "bold red"
    elif cell.missed:
        style = "yellow"
    return Text(cell.text, style=style)


def to_rich(table: ReportTable) -> Table:
    # Text, not markup: variant names such as "acl[rules=10]" must print as written.
    t = Table(
        title=Text(table.title),
        caption=Text("\n".join(table.footnotes)),
        caption_justify="left",
    )
    for i, column in enumerate(table.columns):
        # row names ("appliance Δ% [CI]") stay on one line as well
        t.add_column(Text(column), justify="left" if i == 0 else "right", no_wrap=True)
    for cells in table.rows:
        t.add_row(*(_rich_cell(c) for c in cells))
    return t


def flip(table: ReportTable) -> ReportTable:
    """Columns become rows: a table with many variants reads as one row per variant
    (as the paper-layout tables do) instead of being cut at the terminal's edge."""
    head = table.columns[0] if table.columns else ""
    columns = [f"{head} →" if head else "", *(row[0].text for row in table.rows)]
    rows = [
        [Cell(name, numeric=False), *(row[i] for row in table.rows)]
        for i, name in enumerate(table.columns)
        if i > 0
    ]
    return ReportTable(table.workload, table.metric, table.title, columns, rows, table.footnotes)


def fit(table: ReportTable, width: int | None) -> Table:
    """The table drawn within `width` columns without cutting a number: as it is, else
    transposed, else with cells wrapped (a number may break across lines, never lose
    digits)."""
    drawn = to_rich(table)
    if width is None or _width(drawn) <= width:
        return drawn
    # a paper layout has variants as rows already
    standard = bool(table.columns) and table.columns[0] == "point"
    flipped = to_rich(flip(table)) if standard else drawn
    if _width(flipped) <= width:
        return flipped
    narrower = flipped if _width(flipped) < _width(drawn) else drawn
    for column in narrower.columns:
        column.no_wrap = False
        column.overflow = "fold"
    return narrower


def _width(table: Table) -> int:
    probe = Console(width=100_000, file=io.StringIO())
    return probe.measure(table).maximum


def render_tables(summary: Mapping[str, Any], run_meta: Mapping[str, Any]) -> list[Table]:
    """The report's tables as rich Tables (footnotes in each caption); layouts from the scenario."""
    return [to_rich(t) for t in run_tables(summary, run_meta)]


def run_tables(summary: Mapping[str, Any], run_meta: Mapping[str, Any]) -> list[ReportTable]:
    """A run's tables (`build_tables` in its paper layouts), each variant named with what
    the run recorded about it (a VM's accelerator: `secperf.report.tags`)."""
    tables = build_tables(summary, paper_layouts(run_meta))
    return tag_tables(tables, variant_tags(run_meta), tag_notes(run_meta))


def run_check_tables(summary: Mapping[str, Any], run_meta: Mapping[str, Any]) -> list[ReportTable]:
    """The checks' tables, their variants tagged as in `run_tables`."""
    return tag_tables(check_tables(summary), variant_tags(run_meta), tag_notes(run_meta))


def in_order(summary: Mapping[str, Any], run_meta: Mapping[str, Any]) -> dict[str, Any]:
    """The summary with a sweep's variants in order, whenever its summary.json was
    written."""
    return {**summary, "rows": in_variant_order(summary.get("rows") or [], run_meta)}


def common_notes(tables: Sequence[ReportTable]) -> tuple[list[str], list[ReportTable]]:
    """Footnotes said once for the whole report (those that tables of more than one
    workload carry, or, with one workload, more than one table), and the tables with
    only their own notes left (an outlier, a stop reason of that workload's rows)."""
    seen = [n for t in tables for n in dict.fromkeys(t.footnotes)]
    workloads: dict[str, set[str]] = {}
    for t in tables:
        for n in t.footnotes:
            workloads.setdefault(n, set()).add(t.workload)
    several = len({t.workload for t in tables}) > 1
    common = [
        n
        for n in dict.fromkeys(seen)
        if seen.count(n) > 1 and (len(workloads[n]) > 1 or not several)
    ]
    kept = [replace(t, footnotes=[n for n in t.footnotes if n not in common]) for t in tables]
    return common, kept


def print_report(
    console: Console,
    summary: Mapping[str, Any],
    run_meta: Mapping[str, Any],
    *,
    details: bool = True,
    header: bool = True,
    lead: Sequence[Any] = (),
) -> None:
    """The header, the answer (a verdict per variant and headline metric) and, with
    `details`, every table (the notes they share said once, before them). A rule-set
    review's behaviour changes come before the answer, and `lead` (its "proposed vs
    current") right after them."""
    summary = in_order(summary, run_meta)
    if header:
        for line in header_lines(summary, run_meta):
            console.print(line, highlight=False, markup=False)
    if summary.get("behaviour"):
        # a rule-set review: what the variants decide differently comes before any cost
        console.print()
        console.print(behaviour_table(summary["behaviour"]), highlight=False)
    for part in [*lead, *answer_tables(summary, run_meta)]:
        console.print()
        console.print(part, highlight=False)
    costs = cost_lines(summary)
    if costs:
        console.print()
        console.print("Where the cost goes (the attribution round):", markup=False)
        for text in costs:
            console.print(f"  {text}", markup=False, highlight=False)
    if not details:
        return
    width = None if console.width >= 100_000 else console.width
    common, tables = common_notes(run_tables(summary, run_meta))
    if not tables:
        console.print("no result records: nothing to report", markup=False)
    if common:
        console.print()
        console.print("Reading the tables:", markup=False)
        for note in common:
            console.print(f"  {note}", markup=False, highlight=False)
    against = paper.lines_under(summary, [(t.workload, t.metric) for t in tables])
    for table, verdict_lines in zip(tables, against, strict=True):
        console.print()
        console.print(fit(table, width))
        for text in verdict_lines:
            console.print(f"  {text}", markup=False, highlight=False)
    _print_paper_counts(
        console, summary, paper.unplaced(summary, [(t.workload, t.metric) for t in tables])
    )
    for check in run_check_tables(summary, run_meta):
        console.print()
        console.print(to_rich(check))


def _print_paper_counts(console: Console, summary: Mapping[str, Any], rest: Sequence[str]) -> None:
    """The count of verdicts against the source paper per figure (and the verdicts on
    workloads that no table shows)."""
    counts = paper.figure_counts(summary)
    if not counts:
        return
    console.print()
    console.print("Against the paper (docs/methodology.md, docs/studies/):", markup=False)
    for text in [*rest, *counts]:
        console.print(f"  {text}", markup=False, highlight=False)
