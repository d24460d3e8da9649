"""report.html: one self-contained file (inline CSS, inline SVG charts, no JS).

The answer comes first: a verdict per variant and headline metric beside the
forest plot of every degradation with its interval, then the scenario's gate (if it
has `[[expect]]` entries); then the evidence: the tables (the notes they share said
once), each beside its charts, every test over time and every round's value, the
delay distributions, the testbed and the machine as tables, the scenario as run.

Everything that comes from the scenario or the records is escaped.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from secperf.report import paper
from secperf.report.answer import (
    BETTER,
    COST,
    NONE,
    UNMEASURED,
    UNRESOLVED,
    baseline_only,
    check_verdicts,
    descriptions,
    precision_line,
    rule_text,
    shared_limit,
    value_text,
    verdicts,
)
from secperf.report.attribution import cost_lines
from secperf.report.behaviour import behaviour_lines
from secperf.report.distributions import delay_charts
from secperf.report.forest import forest_charts
from secperf.report.gate import (
    GateError,
    Outcome,
    check_expectations,
    run_figures,
    summary_lines,
)
from secperf.report.header import header_lines
from secperf.report.host_tables import host_tables
from secperf.report.limits import PLACEMENT_PREFIX
from secperf.report.plots import charts, png_only, variant_sweep_charts
from secperf.report.tags import tag_name, variant_tags
from secperf.report.terminal import (
    common_notes,
    in_order,
    run_check_tables,
    run_tables,
)
from secperf.report.timeseries import rate_labels, round_values, series_parts, strip_charts
from secperf.report.topology_svg import render_topology_svg
from secperf.results.rundir import RunDir, write_atomic
from secperf.results.summary import build_summary
from secperf.scenario.expect import Expect
from secperf.tables import BASELINE, Chart, ReportTable, point_name

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.2em 2em; color: #222; max-width: 90em; }
h1 { font-size: 1.4em; margin: 0.2em 0; } h2 { font-size: 1.15em; margin-top: 1.6em; }
h3 { font-size: 1em; margin: 1em 0 0.3em 0; }
p.lead { margin: 0.2em 0 0.6em 0; color: #333; }
table { border-collapse: collapse; margin: 0.6em 0 0.3em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; }
th { background: #eee; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.sig { font-weight: bold; color: #a00; } td.missed { background: #fff4d6; }
p.note { font-size: 0.85em; color: #555; margin: 0.1em 0; }
p.verdict { font-size: 0.9em; margin: 0.1em 0 0.1em 1em; }
.header p { margin: 0.15em 0; font-size: 0.9em; } figure { margin: 0.6em 0; }
figcaption { font-size: 0.85em; color: #555; } pre { background: #f6f6f6; padding: 1em;
overflow-x: auto; font-size: 0.8em; }
.row { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
.row > * { min-width: 0; }
.row > figure { flex: 1 1 480px; } figure svg, figure img { max-width: 100%; height: auto; }
table.answer { font-size: 0.88em; margin-top: 0.3em; }
table.answer td { border: none; border-bottom: 1px solid #e4e4e4; padding: 0.15em 0.5em; }
table.answer tr.variant td { border-bottom: 1px solid #999; padding-top: 0.5em; }
td.cost { color: #b2182b; font-weight: bold; } td.better { color: #2166ac; font-weight: bold; }
td.unresolved { color: #a65d00; } td.unmeasured { color: #777; } td.none { color: #333; }
td.limit { color: #666; font-size: 0.92em; }
.gate { border: 2px solid #888; padding: 0.4em 0.8em; margin: 0.8em 0; }
.gate.failed { border-color: #b2182b; background: #fff0f0; }
.gate.passed { border-color: #1b7837; background: #f0fff2; }
.gate p { margin: 0.15em 0; font-size: 0.9em; }
details summary { cursor: pointer; font-size: 0.9em; color: #444; }
"""

_OUTCOME_CLASS = {
    COST: "cost",
    BETTER: "better",
    NONE: "none",
    UNRESOLVED: "unresolved",
    UNMEASURED: "unmeasured",
}


@dataclass
class Parts:
    """Everything a report draws from the records, beside the summary."""

    distributions: Sequence[Chart] = ()
    series: Sequence[Chart] = ()
    # (point label, why its series is not drawn): too few interval records
    series_skipped: Sequence[tuple[str, str]] = ()
    strips: Sequence[Chart] = ()
    gate: Sequence[Outcome] = ()
    gate_error: str = ""
    charts: list[Chart] = field(default_factory=list)  # filled by render_html


def _table_html(table: ReportTable, title: bool = True) -> str:
    out = [f"<h3>{escape(table.title)}</h3>"] if title else []
    out += ["<table>", "<tr>"]
    out += [f"<th>{escape(c)}</th>" for c in table.columns]
    out.append("</tr>")
    for cells in table.rows:
        out.append("<tr>")
        for cell in cells:
            classes = [
                name
                for name, on in (
                    ("num", cell.numeric),
                    ("sig", cell.significant),
                    ("missed", cell.missed),
                )
                if on
            ]
            cls = f' class="{" ".join(classes)}"' if classes else ""
            out.append(f"<td{cls}>{escape(cell.text)}</td>")
        out.append("</tr>")
    out.append("</table>")
    out += [f'<p class="note">{escape(n)}</p>' for n in table.footnotes]
    return "\n".join(out)


def _figure_html(chart: Chart) -> str:
    caption = f"<figcaption>{escape(chart.title)}</figcaption></figure>"
    if chart.mime == "image/svg+xml":
        # inline: crisp at any zoom, its text searchable; matplotlib's own markup
        svg = chart.image.decode("utf-8")
        svg = svg[svg.index("<svg") :]
        return f'<figure class="chart" role="img" aria-label="{escape(chart.title)}">{svg}{caption}'
    data = base64.b64encode(chart.image).decode("ascii")
    return f'<figure><img alt="{escape(chart.title)}" src="data:image/png;base64,{data}">{caption}'


def _answer_html(summary: Mapping[str, Any], run_meta: Mapping[str, Any]) -> list[str]:
    """The verdict table: a row per variant, then its lines."""
    found = verdicts(summary)
    checks = check_verdicts(summary)
    alone = baseline_only(summary)
    if not found and not checks and not alone:
        return []
    about = descriptions(run_meta)
    tags = variant_tags(run_meta)
    planned = precision_line(summary)
    out = [f'<p class="precision">{escape(planned)}</p>'] if planned else []
    out.append('<table class="answer" id="verdicts">')
    for variant in dict.fromkeys([*(v.variant for v in found), *(c.variant for c in checks)]):
        what = f" — {escape(about[variant])}" if variant in about else ""
        name = escape(tag_name(variant, tags))
        mine = [v for v in found if v.variant == variant]
        once = shared_limit(mine)
        limit = f' <span class="limit">({escape(once)}: every line)</span>' if once else ""
        out.append(f'<tr class="variant"><td colspan="4"><b>{name}</b>{what}{limit}</td></tr>')
        for v in mine:
            out.append(
                f"<tr><td>{escape(v.where)}</td><td>{escape(v.metric_label)}</td>"
                f'<td class="{_OUTCOME_CLASS[v.outcome]}">{escape(v.text)}</td>'
                f'<td class="limit">{"" if once else escape(v.limited_by)}</td></tr>'
            )
        for c in (c for c in checks if c.variant == variant):
            cls = "none" if c.ok else "cost"
            out.append(
                f"<tr><td>{escape(c.workload)}</td><td>checks</td>"
                f'<td class="{cls}">{escape(c.text)}</td><td></td></tr>'
            )
    if alone:
        out.append(
            '<tr class="variant"><td colspan="4">measured on the baseline alone '
            "(no variant beside it)</td></tr>"
        )
        for r in alone:
            where = point_name(str(r.get("workload")), str(r.get("label") or ""))
            out.append(
                f"<tr><td>{escape(where)}</td>"
                f"<td>{escape(str(r.get('metric_label') or r.get('metric')))}</td>"
                f'<td class="none">{escape(value_text(r))}</td><td></td></tr>'
            )
    out.append("</table>")
    return out


def _gate_html(parts: Parts) -> list[str]:
    if parts.gate_error:
        return [
            '<div class="gate failed"><p><b>Gate: not checked</b></p>',
            f"<p>{escape(parts.gate_error)}</p></div>",
        ]
    if not parts.gate:
        return []
    lines = summary_lines(parts.gate)
    failed = any(o.failed for o in parts.gate)
    cls = "failed" if failed else "passed"
    out = [f'<div class="gate {cls}" id="gate"><p><b>{escape(lines[-1])}</b></p>']
    out += [f"<p>{escape(line)}</p>" for line in lines[:-1]]
    out.append("</div>")
    return out


def _placed(tables: Sequence[ReportTable], figures: Sequence[Chart]) -> list[list[Chart]]:
    """Each table's charts: those of its workload and metric, else (a kind's own
    charts, a sweep's) after the last table of their workload; the rest go last."""
    placed: list[list[Chart]] = [[] for _ in range(len(tables) + 1)]
    for chart in figures:
        exact = [
            i
            for i, t in enumerate(tables)
            if (t.workload, t.metric) == (chart.workload, chart.metric)
        ]
        same = [i for i, t in enumerate(tables) if chart.workload and t.workload == chart.workload]
        at = exact[0] if exact else (same[-1] if same else len(tables))
        placed[at].append(chart)
    return placed


def render_html(
    summary: Mapping[str, Any],
    run_meta: Mapping[str, Any],
    distributions: Sequence[Chart] = (),
    parts: Parts | None = None,
) -> str:
    """The whole report as one HTML document; `parts` are drawn from the records
    (write_html); `distributions` stays for callers that have only those."""
    parts = parts or Parts(distributions=distributions)
    scenario: Mapping[str, Any] = run_meta.get("scenario") or {}
    name = str(scenario.get("name") or summary.get("scenario") or "run")
    head = header_lines(summary, run_meta)
    description = str(scenario.get("description") or "")
    rest = [line for line in head[1:] if line != description]
    # what the placement means for the numbers ("compare ratios, not absolute rates")
    # is read before the answer, not found under it
    placement = [line for line in rest if line.startswith(PLACEMENT_PREFIX)]
    rest = [line for line in rest if not line.startswith(PLACEMENT_PREFIX)]
    body = [
        f"<h1>{escape(head[0])}</h1>",
        *([f'<p class="lead">{escape(description)}</p>'] if description else []),
        *(f'<p class="note placement">{escape(line)}</p>' for line in placement),
    ]
    if summary.get("behaviour"):
        # a rule-set review: what the variants decide differently, before any cost
        lines = behaviour_lines(summary["behaviour"])
        body.append('<h2 id="behaviour">Behaviour</h2>')
        body.append(f'<p class="note">{escape(lines[0])}</p>')
        body.append(f'<pre class="behaviour">{escape(chr(10).join(lines[1:]))}</pre>')
    answer = _answer_html(summary, run_meta)
    forest = forest_charts(summary)
    parts.charts += forest
    if answer or forest:
        body.append('<h2 id="answer">The answer</h2>')
        body.append(f'<p class="note">{escape(rule_text(summary))}.</p>')
    body += _gate_html(parts)  # a change review's pass or fail, above its evidence
    if answer or forest:
        body.append('<div class="row">')
        body += answer
        body += [_figure_html(c) for c in forest]
        body.append("</div>")
    costs = cost_lines(summary)
    if costs:
        body.append('<p class="note">Where the cost goes (the attribution round):</p><ul>')
        body += [f"<li>{escape(text)}</li>" for text in costs]
        body.append("</ul>")
    body += ['<div class="header">', *(f"<p>{escape(line)}</p>" for line in rest), "</div>"]
    body.append('<h2 id="results">Results</h2>')
    common, tables = common_notes(run_tables(summary, run_meta))
    if not tables:
        body.append("<p>No result records: nothing to report.</p>")
    if common:
        body.append('<p class="note"><b>Reading the tables:</b></p>')
        body += [f'<p class="note">{escape(n)}</p>' for n in common]
        body.append(
            '<p class="note">Charts beside a table: bars with whiskers = the confidence '
            "interval of the mean (a search's is widened by its brackets; with one "
            "repetition, that search's bracket); a line against the swept value where a "
            "sweep has one.</p>"
        )
    figures = charts(summary) + variant_sweep_charts(summary, run_meta.get("variant_sweeps") or {})
    parts.charts += figures
    placed = _placed(tables, figures)
    keys = [(t.workload, t.metric) for t in tables]
    against = paper.lines_under(summary, keys)
    for table, beside, verdict_lines in zip(tables, placed, against, strict=False):
        if beside:
            # the title above: the table and its charts side by side under it
            body += [f"<h3>{escape(table.title)}</h3>", '<div class="row"><div>']
            body += [_table_html(table, title=False), "</div>"]
            body += [_figure_html(c) for c in beside]
            body.append("</div>")
        else:
            body.append(_table_html(table))
        body += [f'<p class="verdict">{escape(v)}</p>' for v in verdict_lines]
    body += [_figure_html(c) for c in placed[-1]]
    counts = paper.figure_counts(summary)
    if counts:
        body.append('<h2 id="paper">Against the paper</h2>')
        body += [f"<p>{escape(v)}</p>" for v in [*paper.unplaced(summary, keys), *counts]]
    checks = run_check_tables(summary, run_meta)
    if checks:
        body.append("<h2>Checks</h2>")
        body += [_table_html(t) for t in checks]
    body += _over_time_html(parts)
    if parts.distributions:
        parts.charts += parts.distributions
        body.append("<h2>Delay distributions</h2>")
        body.append(
            '<p class="note">Every probe of every repetition, per direction; each line is '
            "one variant, as a fraction of all its probes (the legend gives mean ± standard "
            "deviation over the probes). Bins are common to the variants of a chart.</p>"
        )
        body += [_figure_html(chart) for chart in parts.distributions]
    if summary.get("errors"):
        body.append("<h2>Errors: tests, or parts of them, not measured</h2><ul>")
        for err in summary["errors"]:
            record = err.get("error") or {}
            text = (
                f"{err.get('workload')} {err.get('point_id')} {err.get('variant')} "
                f"rep {err.get('rep')}: {record.get('kind')}: {record.get('message')}"
            )
            body.append(f"<li>{escape(text)}</li>")
        body.append("</ul>")
    body += _testbed_html(run_meta)
    body += _metadata_html(run_meta)
    return (
        "\n".join(
            [
                "<!DOCTYPE html>",
                '<html lang="en"><head><meta charset="utf-8">',
                f"<title>secperf — {escape(name)}</title>",
                f"<style>{_CSS}</style></head><body>",
                *body,
                "</body></html>",
            ]
        )
        + "\n"
    )


def _over_time_html(parts: Parts) -> list[str]:
    if not parts.series and not parts.strips and not parts.series_skipped:
        return []
    parts.charts += [*parts.series, *parts.strips]
    out = [
        '<h2 id="over-time">Over time, and every round</h2>',
        '<p class="note">Left: each test as the engine saw it, one line per round (the '
        "engine's interval records, plotted at the middle of each interval); the shaded "
        "start is the warm-up, which no figure includes. Right: every round's value of "
        "the headline metrics, the bar at their mean: the noise the intervals come from.</p>",
    ]
    strips = {c.title.split(": every round")[0]: c for c in parts.strips}
    for chart in parts.series:
        where = chart.title.split(": over time")[0]
        beside = strips.pop(where, None)
        out.append('<div class="row">')
        out.append(_figure_html(chart))
        if beside is not None:
            out.append(_figure_html(beside))
        out.append("</div>")
    skipped = dict(parts.series_skipped)
    out += [f'<p class="note">{escape(why)}.</p>' for why in skipped.values()]
    lacking = [name for name in strips if name not in skipped]
    if lacking:
        names = ", ".join(lacking)
        out.append(
            f'<p class="note">No interval records for {escape(names)}: its kind writes none '
            "(a search, a latency or HTTP test), so only each round's value is shown.</p>"
        )
    out += [_figure_html(c) for c in strips.values()]
    return out


def _testbed_html(run_meta: Mapping[str, Any]) -> list[str]:
    out = ['<h2 id="testbed">Testbed and machine</h2>']
    graph = render_topology_svg(run_meta.get("topology") or {}, run_meta.get("placements") or {})
    if graph:
        out += [
            '<p class="note">Hosts by hop distance from the first client; heavy borders '
            "forward (DUT, gateways); link labels give shaped rates; green lines name the "
            "mechanisms a host carries, with their variant.</p>",
            f'<div class="topology">{graph}</div>',
        ]
    tables = host_tables(run_meta)
    out += [_table_html(t) for t in tables]
    host = run_meta.get("host")
    if host:
        out.append("<details><summary>run.json's host, as recorded</summary>")
        out.append(f"<pre>{escape(json.dumps(host, indent=2, ensure_ascii=False))}</pre>")
        out.append("</details>")
    return out if len(out) > 1 else []


def _metadata_html(run_meta: Mapping[str, Any]) -> list[str]:
    """The scenario as run, for whoever reads this later."""
    out = ["<h2>Run metadata</h2>"]
    text = run_meta.get("scenario_text")
    if isinstance(text, str) and text.strip():
        where = run_meta.get("scenario_file") or "scenario"
        out.append(f"<h3>Scenario ({escape(str(where))})</h3>")
        out.append(f"<pre>{escape(text)}</pre>")
    if run_meta.get("notes"):
        out.append("<h3>Notes</h3><ul>")
        out += [f"<li>{escape(str(n))}</li>" for n in run_meta["notes"]]
        out.append("</ul>")
    return out


def variant_order(summary: Mapping[str, Any]) -> list[str]:
    """The report's variants in summary order, the baseline first."""
    names = [str(r.get("variant")) for r in summary.get("rows") or []]
    return [BASELINE, *(v for v in dict.fromkeys(names) if v != BASELINE)]


def scenario_expectations(run_meta: Mapping[str, Any]) -> list[Expect]:
    """The `[[expect]]` entries of the scenario as run; GateError for one that run.json
    holds in a form secperf cannot read (edited by hand, or another version's)."""
    scenario: Mapping[str, Any] = run_meta.get("scenario") or {}
    out = []
    for i, entry in enumerate(scenario.get("expect") or []):
        try:
            out.append(Expect.model_validate(entry))
        except ValidationError as exc:
            why = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
            raise GateError(
                f"run.json's scenario.expect[{i}] cannot be read: {why}",
                fix="correct it in run.json, or pass the threshold with --expect",
            ) from None
    return out


def parts_of(run: RunDir, summary: Mapping[str, Any], meta: Mapping[str, Any]) -> Parts:
    """What the report draws from the records: time series, rounds, distributions, and
    the scenario's gate."""
    order = variant_order(summary)
    series, skipped = series_parts(run.iter_records(), order, rate_labels(summary))
    parts = Parts(
        distributions=delay_charts(run.iter_records(), summary.get("distributions")),
        series=series,
        series_skipped=skipped,
        strips=strip_charts(summary, round_values(run), order),
    )
    try:
        expectations = scenario_expectations(meta)
        if expectations:
            parts.gate = check_expectations(expectations, run_figures(summary, run))
    except GateError as exc:
        parts.gate_error = str(exc)
    return parts


def write_html(run: RunDir) -> Path:
    """Write run/report.html from the run directory alone and return its path.

    Uses summary.json when present, else derives it from the records.
    """
    meta = run.read_run_json()
    summary = in_order(run.read_summary() if run.has_summary() else build_summary(run), meta)
    path = run.report_html_path
    write_atomic(path, render_html(summary, meta, parts=parts_of(run, summary, meta)))
    return path


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower()[:60] or "chart"


def write_pngs(run: RunDir, directory: Path | None = None) -> list[Path]:
    """Every chart of the report as a PNG file (for slides and papers), numbered in
    report order, in `directory` (default: the run's charts/); returns their paths."""
    meta = run.read_run_json()
    summary = in_order(run.read_summary() if run.has_summary() else build_summary(run), meta)
    target = directory or run.path / "charts"
    with png_only():
        parts = parts_of(run, summary, meta)
        render_html(summary, meta, parts=parts)
    target.mkdir(parents=True, exist_ok=True)
    out = []
    for i, chart in enumerate(parts.charts, start=1):
        path = target / f"{i:02d}-{_slug(chart.title)}.png"
        write_atomic(path, chart.image)
        out.append(path)
    return out
