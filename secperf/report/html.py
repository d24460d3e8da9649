"""report.html: one self-contained file (inline CSS, inline PNG charts, no JS).

Everything that comes from the scenario or the records is escaped.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from secperf.report.checks import check_tables
from secperf.report.distributions import delay_charts
from secperf.report.plots import charts, variant_sweep_charts
from secperf.report.terminal import build_tables, header_lines, paper_layouts
from secperf.report.topology_svg import render_topology_svg
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.tables import Chart, ReportTable

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 80em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0 0.3em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; }
th { background: #eee; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.sig { font-weight: bold; color: #a00; } td.missed { background: #fff4d6; }
p.note { font-size: 0.85em; color: #555; margin: 0.1em 0; }
.header p { margin: 0.2em 0; } figure { margin: 1em 0; }
figcaption { font-size: 0.85em; color: #555; } pre { background: #f6f6f6; padding: 1em;
overflow-x: auto; font-size: 0.8em; }
"""


def _table_html(table: ReportTable) -> str:
    out = [f"<h3>{escape(table.title)}</h3>", "<table>", "<tr>"]
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


def render_html(
    summary: Mapping[str, Any],
    run_meta: Mapping[str, Any],
    distributions: Sequence[Chart] = (),
) -> str:
    """The whole report as one HTML document; `distributions` are the delay
    distribution charts, drawn from the records (see write_html)."""
    scenario: Mapping[str, Any] = run_meta.get("scenario") or {}
    name = str(scenario.get("name") or summary.get("scenario") or "run")
    head = header_lines(summary, run_meta)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>secperf — {escape(name)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{escape(head[0])}</h1>",
        '<div class="header">',
        *(f"<p>{escape(line)}</p>" for line in head[1:]),
        "</div>",
    ]
    graph = render_topology_svg(run_meta.get("topology") or {}, run_meta.get("placements") or {})
    if graph:
        parts += [
            "<h2>Testbed</h2>",
            '<p class="note">Hosts by hop distance from the first client; heavy borders '
            "forward (DUT, gateways); link labels give shaped rates; green lines name the "
            "mechanisms a host carries, with their variant.</p>",
            f'<div class="topology">{graph}</div>',
        ]
    parts.append("<h2>Results</h2>")
    tables = build_tables(summary, paper_layouts(run_meta))
    if not tables:
        parts.append("<p>No result records: nothing to report.</p>")
    parts += [_table_html(t) for t in tables]
    checks = check_tables(summary)
    if checks:
        parts.append("<h2>Checks</h2>")
        parts += [_table_html(t) for t in checks]
    figures = charts(summary) + variant_sweep_charts(summary, run_meta.get("variant_sweeps") or {})
    if figures:
        parts.append("<h2>Charts</h2>")
        parts.append(
            '<p class="note">Whiskers: confidence interval of the mean (a search\'s is '
            "widened by its brackets; with one repetition, it is that search's bracket).</p>"
        )
    parts += [_figure_html(chart) for chart in figures]
    if distributions:
        parts.append("<h2>Delay distributions</h2>")
        parts.append(
            '<p class="note">Every probe of every repetition, per direction; each line is '
            "one variant, as a fraction of all its probes (the legend gives mean ± standard "
            "deviation over the probes). Bins are common to the variants of a chart.</p>"
        )
        parts += [_figure_html(chart) for chart in distributions]
    if summary.get("errors"):
        parts.append("<h2>Engine errors</h2><ul>")
        for err in summary["errors"]:
            record = err.get("error") or {}
            text = (
                f"{err.get('workload')} {err.get('point_id')} {err.get('variant')} "
                f"rep {err.get('rep')}: {record.get('kind')}: {record.get('message')}"
            )
            parts.append(f"<li>{escape(text)}</li>")
        parts.append("</ul>")
    parts += _metadata_html(run_meta)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _metadata_html(run_meta: Mapping[str, Any]) -> list[str]:
    """The scenario as run and the host's state, for whoever reads this later."""
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
    host = run_meta.get("host")
    if host:
        out.append("<h3>Host</h3>")
        out.append(f"<pre>{escape(json.dumps(host, indent=2, ensure_ascii=False))}</pre>")
    return out


def write_html(run: RunDir) -> Path:
    """Write run/report.html from the run directory alone and return its path.

    Uses summary.json when present, else derives it from the records.
    """
    meta = run.read_run_json()
    summary = run.read_summary() if run.has_summary() else build_summary(run)
    path = run.report_html_path
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_html(summary, meta, delay_charts(run.iter_records())), encoding="utf-8")
    tmp.replace(path)
    return path
