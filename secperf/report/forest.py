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


def forest_chart(title: str, rows: Sequence[Verdict], x: float) -> bytes:
    variants = list(dict.fromkeys(v.variant for v in rows))
    per = {name: [v for v in rows if v.variant == name] for name in variants}
    height = 0.8 + 0.22 * len(rows) + 0.3 * len(variants)
    fig = new_figure(7.2, height)
    grid = fig.add_gridspec(len(variants), 1, height_ratios=[len(per[n]) + 0.6 for n in variants])
    lows = [v.low if v.low is not None else v.pct for v in rows]
    highs = [v.high if v.high is not None else v.pct for v in rows]
    left = min(-x, *(lo for lo in lows if lo is not None))
    right = max(x, *(hi for hi in highs if hi is not None))
    pad = (right - left) * 0.04
    axes: list[Any] = []
    for k, name in enumerate(variants):
        ax = fig.add_subplot(grid[k, 0], sharex=axes[0] if axes else None)
        axes.append(ax)
        mine = per[name]
        ys = list(range(len(mine)))[::-1]
        ax.axvspan(-x, x, color="0.92", zorder=0)
        ax.axvline(0, color="0.2", linewidth=1.0, zorder=1)
        for y, v in zip(ys, mine, strict=True):
            color = _COLORS.get(v.outcome, "0.3")
            if v.low is not None and v.high is not None:
                ax.plot([v.low, v.high], [y, y], color=color, linewidth=2.0, zorder=2)
            ax.plot([v.pct or 0.0], [y], marker="D", color=color, markersize=5, zorder=3)
        ax.set_yticks(ys, [f"{v.where} · {v.metric_label}" for v in mine], fontsize=8)
        ax.set_ylim(-0.7, len(mine) - 0.3)
        ax.set_title(name, fontsize=9, loc="left", fontweight="bold")
        ax.tick_params(axis="x", labelsize=8, labelbottom=k == len(variants) - 1)
        ax.grid(axis="x", color="0.85", linewidth=0.6)
        # the numbers beside the plot, as a forest plot's table column
        right_labels = ax.secondary_yaxis("right")
        right_labels.set_yticks(ys, [_short(v) for v in mine], fontsize=8)
        right_labels.tick_params(length=0)
    axes[0].set_xlim(left - pad, right + pad)
    axes[-1].set_xlabel(f"degradation % (positive = worse); shaded: |Δ| < {x:g} %", fontsize=8)
    fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    return figure_bytes(fig)


def _short(v: Verdict) -> str:
    if v.outcome == NONE:
        return f"none {v.interval}"
    if v.low is None:
        return f"{fmt_pct(v.pct)} (no interval)"
    return f"{fmt_pct(v.pct)} {v.interval}"
