"""The forest plot: every variant × headline metric's degradation with its interval,
zero marked and the band of "no measurable cost" shaded (secperf.report.answer's
verdicts, drawn)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from secperf.report.answer import (
    BETTER,
    COST,
    NONE,
    UNMEASURED,
    UNRESOLVED,
    Verdict,
    negligible_pct,
    verdicts,
)
from secperf.report.plots import figure_bytes, new_figure
from secperf.tables import Chart, fmt_pct

FOREST_ROWS = 40  # rows of one forest chart; more are split by variant

_COLORS = {COST: "#b2182b", BETTER: "#2166ac", NONE: "#4d4d4d", UNRESOLVED: "#e08214"}


def _plotted(v: Verdict) -> bool:
    return v.outcome != UNMEASURED and v.pct is not None


def forest_charts(summary: Mapping[str, Any]) -> list[Chart]:
    """Every variant × headline metric's degradation with its interval, zero marked and
    the band of "no measurable cost" shaded; variants as panels, at most FOREST_ROWS
    rows a chart."""
    found = [v for v in verdicts(summary) if _plotted(v)]
    if not found:
        return []
    groups: list[list[Verdict]] = []
    for variant in dict.fromkeys(v.variant for v in found):
        rows = [v for v in found if v.variant == variant]
        if groups and len(groups[-1]) + len(rows) <= FOREST_ROWS:
            groups[-1] += rows
        else:
            groups += [rows[i : i + FOREST_ROWS] for i in range(0, len(rows), FOREST_ROWS)]
    x = negligible_pct(summary)
    conf = float(summary.get("confidence", 0.95)) * 100
    out = []
    for i, group in enumerate(groups, start=1):
        part = f" ({i} of {len(groups)})" if len(groups) > 1 else ""
        title = f"What each variant costs: degradation % with its {conf:g} % interval{part}"
        out.append(Chart(title, forest_chart(title, group, x)))
    return out


def _family(v: Verdict) -> str:
    """A panel's metric family: a kind's primary metrics, or its CPU per unit of work
    (a service demand reaches +500 % where a rate loses 5 %: one axis hides the rate)."""
    return "CPU per unit of work" if v.metric.startswith("sd_") else ""


def panels(rows: Sequence[Verdict]) -> list[tuple[str, list[Verdict]]]:
    """(title, rows) per variant and metric family, in the rows' order."""
    out: dict[tuple[str, str], list[Verdict]] = {}
    for v in rows:
        out.setdefault((v.variant, _family(v)), []).append(v)
    return [(f"{name} · {fam}" if fam else name, mine) for (name, fam), mine in out.items()]


def _limits(rows: Sequence[Verdict], x: float) -> tuple[float, float]:
    """A panel's own x range: its intervals, zero and the ±x band, padded."""
    ends = [e for v in rows for e in (v.low, v.high, v.pct) if e is not None]
    left, right = min(-x, *ends), max(x, *ends)
    pad = (right - left) * 0.05
    return left - pad, right + pad


def forest_figure(rows: Sequence[Verdict], x: float) -> Any:
    """The forest plot's figure: a panel per variant and metric family, each on its own
    scale so that the smallest variant's intervals and the shaded band stay readable."""
    groups = panels(rows)
    height = 0.5 + 0.24 * len(rows) + 0.55 * len(groups)
    fig = new_figure(7.2, height)
    grid = fig.add_gridspec(len(groups), 1, height_ratios=[len(g) + 1.2 for _, g in groups])
    axes = []
    for k, (name, mine) in enumerate(groups):
        ax = fig.add_subplot(grid[k, 0])
        axes.append(ax)
        ys = list(range(len(mine)))[::-1]
        ax.axvspan(-x, x, color="0.88", zorder=0)
        ax.axvline(0, color="0.2", linewidth=1.0, zorder=1)
        for y, v in zip(ys, mine, strict=True):
            color = _COLORS.get(v.outcome, "0.3")
            if v.low is not None and v.high is not None:
                ax.plot([v.low, v.high], [y, y], color=color, linewidth=2.0, zorder=2)
            ax.plot([v.pct or 0.0], [y], marker="D", color=color, markersize=5, zorder=3)
        ax.set_yticks(ys, [f"{v.where} · {v.metric_label}" for v in mine], fontsize=8)
        ax.set_ylim(-0.7, len(mine) - 0.3)
        ax.set_xlim(*_limits(mine, x))
        ax.set_title(name, fontsize=9, loc="left", fontweight="bold")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", color="0.85", linewidth=0.6)
        # the numbers beside the plot, as a forest plot's table column
        right_labels = ax.secondary_yaxis("right")
        right_labels.set_yticks(ys, [_short(v) for v in mine], fontsize=8)
        right_labels.tick_params(length=0)
    axes[-1].set_xlabel(
        f"degradation % (positive = worse), each panel on its own scale; shaded: |Δ| < {x:g} %",
        fontsize=8,
    )
    fig.tight_layout()
    return fig


def forest_chart(title: str, rows: Sequence[Verdict], x: float) -> bytes:
    """The forest plot as an image; its title is the report's caption, not drawn twice."""
    del title
    return figure_bytes(forest_figure(rows, x))


def _short(v: Verdict) -> str:
    if v.outcome == NONE:
        return f"none {v.interval}"
    if v.low is None:
        return f"{fmt_pct(v.pct)} (no interval)"
    return f"{fmt_pct(v.pct)} {v.interval}"
