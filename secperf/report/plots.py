"""Charts of a run's summary, as SVG (or PNG where that is smaller), drawn by
matplotlib without a display.

Per workload and metric: a bar chart (one group per workload point, a bar per
variant, CI whiskers) and, where one numeric parameter was swept, a line per
variant against the swept value.
"""

from __future__ import annotations

import io
import itertools
import math
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING, Any

from secperf.report.layouts import layout_of
from secperf.tables import BASELINE, Chart

# matplotlib takes a few tenths of a second to import: it is imported where a chart
# is drawn, so that `secperf --version` or `check` do not pay for it.
if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.ticker import Formatter

__all__ = ["BASELINE", "DRAWING", "Chart", "PlainTicks", "charts", "figure_bytes"]

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?)([bB]?)(it)?\s*$")
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


@cache
def _plain_ticks_class() -> type[Formatter]:
    from matplotlib.ticker import Formatter

    class PlainTicks(Formatter):
        """Tick labels with as many decimals as the tick spacing needs (0.25, 0.5, 0.75 —
        not 0, 0, 1), thousands grouped, never an exponent or an offset."""

        def __init__(self) -> None:
            self.decimals = 0

        def set_locs(self, locs: list[float]) -> None:
            super().set_locs(locs)
            finite = sorted(float(x) for x in locs if math.isfinite(x))
            steps = [b - a for a, b in itertools.pairwise(finite) if b - a > 0]
            step = min(steps) if steps else (abs(finite[0]) if finite and finite[0] else 1.0)
            self.decimals = max(0, min(9, -math.floor(math.log10(step) + 1e-9)))
            # a step like 0.25 needs one more digit than its order of magnitude says
            while self.decimals < 9 and any(
                abs(round(x, self.decimals) - x) > step * 1e-6 for x in finite
            ):
                self.decimals += 1

        def __call__(self, x: float, pos: int | None = None) -> str:
            text = f"{x:,.{self.decimals}f}"
            return "0" if text.strip("-0.,") == "" else text

    return PlainTicks


def PlainTicks() -> Formatter:
    """Tick labels with as many decimals as the tick spacing needs (0.25, 0.5, 0.75 —
    not 0, 0, 1), thousands grouped, never an exponent or an offset."""
    return _plain_ticks_class()()


_SALT = itertools.count()
_PNG_ONLY: list[bool] = []  # set within png_only(): every figure as PNG


@contextmanager
def png_only() -> Iterator[None]:
    """Within it, figure_bytes returns PNG whatever the sizes (`secperf report --png`)."""
    _PNG_ONLY.append(True)
    try:
        yield
    finally:
        _PNG_ONLY.pop()


def figure_bytes(fig: Figure) -> bytes:
    """The figure as SVG (text as text: crisp, searchable), or as PNG when that is
    smaller; legends outside the axes are kept (tight bounding box)."""
    if _PNG_ONLY:
        return png_bytes(fig)
    import matplotlib
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    salt = f"secperf-{next(_SALT)}"  # unique ids when several SVGs share one page
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        FigureCanvasSVG(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
        svg = buf.getvalue()
    png = png_bytes(fig)
    return png if len(png) < len(svg) else svg


def outside_legend(ax: Any, *args: Any, **kwargs: Any) -> None:
    """A legend beside the plot, never over bars or lines."""
    ax.legend(*args, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kwargs)


def bound_marks(
    ax: Any, marks: Sequence[tuple[float, float]], marker: str, color: str, label: str | None
) -> None:
    """Open triangles at searches' bounds (x, bound): "^" the value is at least there,
    "v" below it."""
    ax.plot(
        [m[0] for m in marks],
        [m[1] for m in marks],
        linestyle="none",
        marker=marker,
        markerfacecolor="none",
        markersize=9,
        color=color,
        label=label,
    )


def bound_key(ax: Any, label: str) -> None:
    """The legend's entry for bound_marks."""
    ax.plot([], [], linestyle="none", marker="^", markerfacecolor="none", color="0.4", label=label)


class _Drawing:
    """What a kind's layout draws its charts with (secperf.tables.Drawing)."""

    def figure(self, width: float, height: float) -> Figure:
        return new_figure(width, height)

    def plain_ticks(self) -> Formatter:
        return PlainTicks()

    def legend(self, ax: Any, **kwargs: Any) -> None:
        outside_legend(ax, **kwargs)

    def image(self, fig: Figure) -> bytes:
        return figure_bytes(fig)

    def bound_marks(
        self,
        ax: Any,
        marks: Sequence[tuple[float, float]],
        marker: str,
        color: str,
        label: str | None,
    ) -> None:
        bound_marks(ax, marks, marker, color, label)

    def bound_key(self, ax: Any, label: str) -> None:
        bound_key(ax, label)


DRAWING = _Drawing()


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


def new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def png_bytes(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    # no Software metadata: keeps the file free of URLs
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None}, bbox_inches="tight")
    return buf.getvalue()


def _err(row: Mapping[str, Any]) -> tuple[float, float]:
    """Whiskers: the confidence interval; a single search's own bracket without one."""
    mean, lo, hi = row.get("mean"), row.get("ci_low"), row.get("ci_high")
    search: Mapping[str, Any] = row.get("search") or {}
    if (lo is None or hi is None) and search:
        lo, hi = search.get("bracket_low"), search.get("bracket_high")
    if mean is None or lo is None or hi is None:
        return 0.0, 0.0
    return max(mean - lo, 0.0), max(hi - mean, 0.0)


def _censored(row: Mapping[str, Any] | None) -> tuple[str, float] | None:
    """A search that found no value in any repetition: ("≥", bound) when its highest
    rate passed, ("<", bound) when its lowest already failed; else None."""
    if row is None or not row.get("censored_n") or row.get("mean") is not None:
        return None
    search: Mapping[str, Any] = row.get("search") or {}
    for outcome, sign in (("at_least", "≥"), ("below", "<")):
        bound = search.get(f"{outcome}_bound")
        if search.get(f"{outcome}_n") and isinstance(bound, int | float):
            return sign, float(bound)
    return None


def bar_chart(title: str, unit: str, rows: Sequence[Mapping[str, Any]]) -> bytes:
    """Grouped bars: x = workload points, one bar per variant, CI whiskers. A search
    that found nothing is a hatched, unfilled bar up to its bound, marked ≥ (the value
    is at least it) or < (below it)."""
    points = list(dict.fromkeys(str(r["point_id"]) for r in rows))
    labels = {str(r["point_id"]): str(r.get("label") or r["point_id"]) for r in rows}
    variants = list(dict.fromkeys(str(r["variant"]) for r in rows))
    by_key = {(str(r["point_id"]), str(r["variant"])): r for r in rows}
    # narrow enough to stand beside its table; a censored bar's legend needs more room
    least = 5.0 if any(_censored(r) is not None for r in rows) else 3.8
    fig = new_figure(min(14.0, max(least, 1.5 + 0.5 * len(points) * len(variants))), 3.2)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(variants))
    any_censored = False
    labelled: set[str] = set()  # variants whose hatched bar carries the legend entry

    for j, variant in enumerate(variants):
        xs: list[float] = []
        heights: list[float] = []
        lows: list[float] = []
        highs: list[float] = []
        color = f"C{j % 10}"
        # a variant with no measured bar gets its legend entry from a hatched one
        only_censored = not any(
            (r := by_key.get((p, variant))) is not None and r.get("mean") is not None
            for p in points
        )
        for i, pid in enumerate(points):
            row = by_key.get((pid, variant))
            x = i - 0.4 + width * (j + 0.5)
            censored = _censored(row)
            if censored is not None:
                sign, bound = censored
                name = variant if only_censored and variant not in labelled else None
                ax.bar(x, bound, width, fill=False, hatch="//", edgecolor=color, label=name)
                labelled.add(variant)
                ax.annotate(sign, (x, bound), ha="center", va="bottom", fontsize=8)
                any_censored = True
                continue
            if row is None or row.get("mean") is None:
                continue
            xs.append(x)
            heights.append(float(row["mean"]))
            lo, hi = _err(row)
            lows.append(lo)
            highs.append(hi)
        if xs:
            ax.bar(xs, heights, width, yerr=[lows, highs], capsize=3, label=variant, color=color)
    ax.set_xticks(range(len(points)), [labels[p] for p in points], rotation=20, ha="right")
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    handles, names = ax.get_legend_handles_labels()
    if any_censored:
        from matplotlib.patches import Patch

        handles.append(Patch(fill=False, hatch="//", edgecolor="0.4"))
        names.append("search found no value: ≥ or < the bar's top")
    ax.yaxis.set_major_formatter(PlainTicks())
    outside_legend(ax, handles, names, fontsize=8)
    fig.tight_layout()
    return figure_bytes(fig)


def sweep_chart(
    title: str,
    unit: str,
    parameter: str,
    rows: Sequence[Mapping[str, Any]],
    references: Sequence[tuple[str, float]] = (),
) -> bytes:
    """A line per variant against the swept parameter, with CI error bars.

    `references` are horizontal dashed lines (label, value), e.g. the baseline's
    value where the variants, not the workload, were swept. A point whose search
    found nothing is an open triangle at its bound, pointing to where the value lies.
    """
    variants = list(dict.fromkeys(str(r["variant"]) for r in rows))
    fig = new_figure(6.4, 3.8)
    ax = fig.add_subplot()
    all_x: list[float] = []
    any_censored = False
    for j, variant in enumerate(variants):
        color = f"C{j % 10}"
        series = []
        bounds: dict[str, list[tuple[float, float]]] = {"≥": [], "<": []}
        for r in rows:
            x = numeric((r.get("point") or {}).get(parameter))
            if r["variant"] != variant or x is None:
                continue
            censored = _censored(r)
            if censored is not None:
                bounds[censored[0]].append((x, censored[1]))
            elif r.get("mean") is not None:
                series.append((x, float(r["mean"]), *_err(r)))
        series.sort()
        all_x += [s[0] for s in series] + [b[0] for bs in bounds.values() for b in bs]
        if series:
            ax.errorbar(
                [s[0] for s in series],
                [s[1] for s in series],
                yerr=[[s[2] for s in series], [s[3] for s in series]],
                marker="o",
                capsize=3,
                label=variant,
                color=color,
            )
        labelled = bool(series)
        for sign, marker in (("≥", "^"), ("<", "v")):
            if not bounds[sign]:
                continue
            any_censored = True
            bound_marks(ax, bounds[sign], marker, color, None if labelled else variant)
            labelled = True
    for k, (label, value) in enumerate(_merge_references(references)):
        color = f"C{(len(variants) + k) % 10}"
        ax.axhline(value, linestyle="--", linewidth=1.2, color=color, label=label)
    positive = [x for x in all_x if x > 0]
    if positive and len(positive) == len(all_x) and max(positive) / min(positive) >= 4:
        # sweeps usually double or multiply: equal steps on a log axis
        ticks = sorted(set(all_x))
        ax.set_xscale("log", base=10 if max(positive) / min(positive) > 1000 else 2)
        ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
        ax.minorticks_off()
    if any_censored:
        # from 0: a bound alone would otherwise zoom the axis onto one value
        ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.15)
        bound_key(ax, "search found no value: at least here (△) / below here (▽)")
    ax.yaxis.set_major_formatter(PlainTicks())
    ax.set_xlabel(parameter)
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    outside_legend(ax, fontsize=8)
    fig.tight_layout()
    return figure_bytes(fig)


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
        layout = layout_of(wrows)
        if layout is not None:  # the kind's own report: its charts (if any), not per metric
            drawn = layout.charts(workload, wrows, DRAWING) if layout.charts else []
            out += [replace(c, workload=c.workload or workload) for c in drawn]
            continue
        for metric in _chart_metrics(wrows):
            mrows = [r for r in wrows if r["metric"] == metric]
            unit = str(mrows[0].get("unit", ""))
            label = str(mrows[0].get("metric_label") or metric)
            title = f"{workload}: {label}"
            out.append(Chart(title, bar_chart(title, unit, mrows), workload, metric))
            points: dict[str, Mapping[str, Any]] = {}
            for r in mrows:
                points.setdefault(str(r["point_id"]), r.get("point") or {})
            parameter = swept_parameter(list(points.values()))
            if parameter is not None:
                stitle = f"{workload}: {label} against {parameter}"
                chart = sweep_chart(stitle, unit, parameter, mrows)
                out.append(Chart(stitle, chart, workload, metric))
    return out


def _merge_references(references: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Reference lines at the same value drawn once, their labels joined."""
    merged: dict[float, list[str]] = {}
    for label, value in references:
        merged.setdefault(value, []).append(label)
    out = []
    for value, labels in merged.items():
        heads = [label.partition(": ")[0] for label in labels]
        tails = {label.partition(": ")[2] for label in labels}
        # "baseline · a & baseline · b: none found" -> "baseline · a & b: none found"
        names = [heads[0], *(h.removeprefix(f"{BASELINE} · ") for h in heads[1:])]
        tail = f": {tails.pop()}" if len(tails) == 1 and "" not in tails else ""
        out.append((" & ".join(names) + tail, value))
    return out


MAX_LINES = 6  # more lines than this on one variant-sweep chart: one chart per point


def variant_sweep_charts(
    summary: Mapping[str, Any], sweeps: Mapping[str, Mapping[str, Any]]
) -> list[Chart]:
    """Variants expanded from a list (rules = [1, 10, ...]): a line per family against
    the swept value, the baseline as a dashed horizontal line, per primary metric.

    Points that share a metric share a chart (a line per family and point, as
    document 002's Fig. 3b draws allowed and denied floods together) while that
    stays readable; else a chart per point, for workloads of at most 3 points (a
    longer workload sweep has its own chart against its parameter).
    """
    if not sweeps:
        return []
    rows: list[Mapping[str, Any]] = [r for r in summary.get("rows") or [] if r.get("primary")]
    out: list[Chart] = []
    for metric in dict.fromkeys(str(r["metric"]) for r in rows):
        mrows = [r for r in rows if r["metric"] == metric]
        swept = [r for r in mrows if sweeps.get(str(r["variant"]))]
        if not swept:
            continue
        points = list(dict.fromkeys(str(r["point_id"]) for r in swept))
        families = list(dict.fromkeys(str(sweeps[str(r["variant"])]["family"]) for r in swept))
        if len(points) * len(families) <= MAX_LINES:
            out.append(_family_chart(mrows, sweeps, points))
            continue
        workload_of = {str(r["point_id"]): str(r["workload"]) for r in mrows}
        size = Counter(workload_of.values())
        out += [_family_chart(mrows, sweeps, [p]) for p in points if size[workload_of[p]] <= 3]
    return out


def _family_chart(
    mrows: Sequence[Mapping[str, Any]],
    sweeps: Mapping[str, Mapping[str, Any]],
    points: Sequence[str],
) -> Chart:
    """One chart of the given points: a line per (family, point), baselines dashed."""
    several = len(points) > 1
    series: list[Mapping[str, Any]] = []
    references: list[tuple[str, float]] = []
    parameter = ""
    for r in mrows:
        if str(r["point_id"]) not in points:
            continue
        where = str(r.get("label") or r.get("workload"))
        info = sweeps.get(str(r["variant"]))
        if not info:
            name = f"{BASELINE} · {where}" if several else BASELINE
            censored = _censored(r)
            if r["variant"] == BASELINE and r.get("mean") is not None:
                references.append((name, float(r["mean"])))
            elif r["variant"] == BASELINE and censored is not None:
                sign, bound = censored
                words = "none found up to here" if sign == "≥" else "below here"
                references.append((f"{name}: {words}", bound))
            continue
        parameter = next(k for k in info if k != "family")
        line = f"{info['family']} · {where}" if several else str(info["family"])
        # the family is the line; the swept value is x (reusing sweep_chart)
        series.append({**r, "variant": line, "point": {parameter: info[parameter]}})
    first = series[0]
    what = first.get("metric_label") or first.get("metric")
    label = "" if several else f"{first.get('label') or first.get('workload')}: "
    title = f"{label}{what} against {parameter}"
    unit = str(first.get("unit", ""))
    chart = sweep_chart(title, unit, parameter, series, references)
    return Chart(title, chart, str(first.get("workload", "")), str(first.get("metric", "")))
