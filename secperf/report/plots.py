"""Charts of a run's summary, as PNG bytes (matplotlib, Agg backend, no display).

Per workload and metric: a bar chart (one group per workload point, a bar per
variant, CI whiskers) and, where one numeric parameter was swept, a line per
variant against the swept value.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

BASELINE = "baseline"
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?)([bB]?)(it)?\s*$")
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


@dataclass(frozen=True)
class Chart:
    title: str
    png: bytes


def numeric(value: Any) -> float | None:
    """A parameter value as a number: 1024, 1.5, "16KiB", "100mbit"; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m:
            base = 1024.0 if m.group(3) else 1000.0
            return float(m.group(1)) * base ** _POWERS[m.group(2).lower()]
    return None


def swept_parameter(points: Sequence[Mapping[str, Any]]) -> str | None:
    """The one numeric parameter that differs between points, if there is one."""
    if len(points) < 2:
        return None
    keys = [k for k in points[0] if all(k in p for p in points)]
    varying = [k for k in keys if len({repr(p[k]) for p in points}) > 1]
    if len(varying) != 1:
        return None  # several things change at once: a line would mislead
    key = varying[0]
    return key if all(numeric(p[key]) is not None for p in points) else None


def png_bytes(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    # no Software metadata: keeps the file free of URLs
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def _err(row: Mapping[str, Any]) -> tuple[float, float]:
    mean, lo, hi = row.get("mean"), row.get("ci_low"), row.get("ci_high")
    if mean is None or lo is None or hi is None:
        return 0.0, 0.0
    return max(mean - lo, 0.0), max(hi - mean, 0.0)


def bar_chart(title: str, unit: str, rows: Sequence[Mapping[str, Any]]) -> bytes:
    """Grouped bars: x = workload points, one bar per variant, CI whiskers."""
    points = list(dict.fromkeys(str(r["point_id"]) for r in rows))
    labels = {str(r["point_id"]): str(r.get("label") or r["point_id"]) for r in rows}
    variants = list(dict.fromkeys(str(r["variant"]) for r in rows))
    by_key = {(str(r["point_id"]), str(r["variant"])): r for r in rows}
    fig = Figure(figsize=(min(14.0, max(5.0, 1.5 + 0.5 * len(points) * len(variants))), 3.6))
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(variants))
    for j, variant in enumerate(variants):
        xs: list[float] = []
        heights: list[float] = []
        lows: list[float] = []
        highs: list[float] = []
        for i, pid in enumerate(points):
            row = by_key.get((pid, variant))
            if row is None or row.get("mean") is None:
                continue
            xs.append(i - 0.4 + width * (j + 0.5))
            heights.append(float(row["mean"]))
            lo, hi = _err(row)
            lows.append(lo)
            highs.append(hi)
        ax.bar(xs, heights, width, yerr=[lows, highs], capsize=3, label=variant)
    ax.set_xticks(range(len(points)), [labels[p] for p in points], rotation=20, ha="right")
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


def sweep_chart(title: str, unit: str, parameter: str, rows: Sequence[Mapping[str, Any]]) -> bytes:
    """A line per variant against the swept parameter, with CI error bars."""
    variants = list(dict.fromkeys(str(r["variant"]) for r in rows))
    fig = Figure(figsize=(6.0, 3.6))
    ax = fig.add_subplot()
    all_x: list[float] = []
    for variant in variants:
        series = []
        for r in rows:
            x = numeric((r.get("point") or {}).get(parameter))
            if r["variant"] == variant and x is not None and r.get("mean") is not None:
                series.append((x, float(r["mean"]), *_err(r)))
        series.sort()
        if not series:
            continue
        xs = [s[0] for s in series]
        all_x += xs
        ax.errorbar(
            xs,
            [s[1] for s in series],
            yerr=[[s[2] for s in series], [s[3] for s in series]],
            marker="o",
            capsize=3,
            label=variant,
        )
    positive = [x for x in all_x if x > 0]
    if positive and len(positive) == len(all_x) and max(positive) / min(positive) >= 4:
        # sweeps usually double or multiply: equal steps on a log axis
        ticks = sorted(set(all_x))
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
        ax.minorticks_off()
    ax.set_xlabel(parameter)
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


def _chart_metrics(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Primary metrics and service demand get charts; the tables hold the rest."""
    names = dict.fromkeys(str(r["metric"]) for r in rows)
    primary = [m for m in names if any(r["metric"] == m and r.get("primary") for r in rows)]
    demand = [m for m in names if m.startswith("sd_")]
    return primary + demand


def charts(summary: Mapping[str, Any]) -> list[Chart]:
    """Every chart of the report, in table order."""
    rows: list[Mapping[str, Any]] = list(summary.get("rows") or [])
    out: list[Chart] = []
    for workload in dict.fromkeys(str(r["workload"]) for r in rows):
        wrows = [r for r in rows if r["workload"] == workload]
        for metric in _chart_metrics(wrows):
            mrows = [r for r in wrows if r["metric"] == metric]
            unit = str(mrows[0].get("unit", ""))
            label = str(mrows[0].get("metric_label") or metric)
            title = f"{workload}: {label}"
            out.append(Chart(title, bar_chart(title, unit, mrows)))
            points: dict[str, Mapping[str, Any]] = {}
            for r in mrows:
                points.setdefault(str(r["point_id"]), r.get("point") or {})
            parameter = swept_parameter(list(points.values()))
            if parameter is not None:
                stitle = f"{workload}: {label} against {parameter}"
                out.append(Chart(stitle, sweep_chart(stitle, unit, parameter, mrows)))
    return out


def variant_sweep_charts(
    summary: Mapping[str, Any], sweeps: Mapping[str, Mapping[str, Any]]
) -> list[Chart]:
    """Variants expanded from a list (rules = [1, 10, ...]): a line per family against
    the swept value, one chart per workload point and primary metric."""
    if not sweeps:
        return []
    rows: list[Mapping[str, Any]] = list(summary.get("rows") or [])
    out: list[Chart] = []
    for pid in dict.fromkeys(str(r["point_id"]) for r in rows):
        prows = [r for r in rows if r["point_id"] == pid and r.get("primary")]
        for metric in dict.fromkeys(str(r["metric"]) for r in prows):
            series: list[Mapping[str, Any]] = []
            parameter = ""
            for r in prows:
                info = sweeps.get(str(r["variant"]))
                if r["metric"] != metric or not info:
                    continue
                parameter = next(k for k in info if k != "family")
                # the family is the line; the swept value is x (reusing sweep_chart)
                series.append(
                    {**r, "variant": info["family"], "point": {parameter: info[parameter]}}
                )
            if not series:
                continue
            first = series[0]
            label = str(first.get("label") or first.get("workload"))
            what = first.get("metric_label") or metric
            title = f"{label}: {what} against {parameter}"
            unit = str(first.get("unit", ""))
            out.append(Chart(title, sweep_chart(title, unit, parameter, series)))
    return out
