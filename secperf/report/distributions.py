"""Delay distributions of latency workloads (document 004's Fig. 4 and 8).

A `result` record with delay histograms (the latency kind's) carries, per direction,
a linear histogram of its
one-way delays (`{unit, bucket_us, first_us, counts, overflow}`, from the minimum
to p99.9; `overflow` counts the rest). Each repetition has its own geometry, so the
repetitions of one variant are merged (summed when the geometry is the same,
re-binned otherwise) and, for the chart, every variant of a point is re-binned
onto one grid so that the fraction of probes per bin compares across variants.

Since a kept run holds summary.json and run.json only, summary.json carries the merged
histograms (`distributions`, secperf/results/delays.py): the charts come from the
records when the run directory has them, else from the summary.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from secperf.report.plots import figure_bytes, new_figure
from secperf.results.delays import (
    DIRECTIONS,
    Distribution,
    Histogram,
    PointDelays,
    collect,
    from_json,
    merge,
    parse,
)
from secperf.tables import BASELINE, Chart

__all__ = ["Histogram", "collect", "merge", "parse"]

CLIP_QUANTILE = 0.995  # the x axis ends where the slowest variant reaches this
LOG_RATIO = 8.0  # a range wider than this (max/min) gets log-spaced bins
BINS = 120


def display_edges(dists: Sequence[Distribution]) -> np.ndarray:
    """One grid for every variant: from the fastest probe to where the slowest variant
    reaches CLIP_QUANTILE; log-spaced when that spans more than LOG_RATIO."""
    lo = min(d.hist.first_us for d in dists)
    hi = max(d.hist.quantile(CLIP_QUANTILE) for d in dists)
    finest = min(d.hist.bucket_us for d in dists)
    # a little room past the slowest variant's tail, so its last step shows
    hi = max(hi + 0.03 * (hi - lo), lo + finest)
    if lo > 0 and hi / lo > LOG_RATIO:
        return np.geomspace(lo, hi, BINS + 1)
    # never finer than the finest recorded bucket: no empty comb of bins
    width = max((hi - lo) / BINS, finest)
    n = max(1, math.ceil((hi - lo) / width))
    return lo + width * np.arange(n + 1)


def fractions(dist: Distribution, edges: np.ndarray) -> np.ndarray:
    """Fraction of all the variant's probes (overflow included) in each bin."""
    total = dist.hist.total
    if total == 0:
        return np.zeros(len(edges) - 1)
    return np.diff(dist.hist.cumulative_at(edges)) / total


def _legend(d: Distribution) -> str:
    if d.mean_us is None:
        return d.variant
    std = f" ± {d.stddev_us:.3g}" if d.stddev_us is not None else ""
    return f"{d.variant}: {d.mean_us:.4g}{std} µs"


def distribution_chart(point: PointDelays) -> Chart:
    """A panel per direction, a step line per variant: fraction of probes against delay."""
    title = f"{point.label}: one-way delay distribution"
    panels = [(d, name) for d, name in DIRECTIONS if d in point.directions]
    from matplotlib.ticker import FuncFormatter, ScalarFormatter

    fig = new_figure(5.0 * len(panels) + 1.0, 3.8)
    for i, (direction, name) in enumerate(panels):
        dists = list(point.directions[direction].values())
        edges = display_edges(dists)
        ax = fig.add_subplot(1, len(panels), i + 1)
        for d in dists:
            ax.stairs(fractions(d, edges) * 100.0, edges, label=_legend(d), linewidth=1.4)
        bins = "equal bins"
        if edges[1] - edges[0] < edges[-1] - edges[-2] - 1e-9:
            ax.set_xscale("log")
            # plain numbers, not 3×10¹, on a log axis
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(FuncFormatter(_minor_label))
            bins = "log-spaced bins"
        ax.set_xlim(float(edges[0]), float(edges[-1]))
        ax.set_xlabel("one-way delay (µs)")
        ax.set_ylabel("probes per bin (%)")
        ax.set_title(f"{name} ({bins})", fontsize=9)
        # below its panel: never over the lines (the panels sit side by side)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    fig.suptitle(f"{title}, up to the {CLIP_QUANTILE * 100:g}th percentile", fontsize=10)
    fig.tight_layout()
    return Chart(title, figure_bytes(fig))


def _minor_label(x: float, _pos: int | None = None) -> str:
    """Label the 2x, 3x and 5x minor ticks of a log axis; the others stay bare."""
    lead = x / 10 ** math.floor(math.log10(x)) if x > 0 else 0.0
    return f"{x:g}" if round(lead) in (2, 3, 5) and abs(lead - round(lead)) < 1e-6 else ""


PER_CHART = 5  # variants beside the baseline in one chart; more is unreadable


def split(point: PointDelays) -> list[PointDelays]:
    """The point as charts of at most PER_CHART variants, each with the baseline."""
    variants = list(dict.fromkeys(v for d in point.directions.values() for v in d if v != BASELINE))
    if len(variants) <= PER_CHART:
        return [point]
    groups = [variants[i : i + PER_CHART] for i in range(0, len(variants), PER_CHART)]
    out = []
    for i, group in enumerate(groups, start=1):
        keep = {BASELINE, *group}
        directions = {
            d: {v: dist for v, dist in dists.items() if v in keep}
            for d, dists in point.directions.items()
        }
        label = f"{point.label} ({i} of {len(groups)})"
        out.append(PointDelays(point.workload, point.point_id, label, directions))
    return out


def delay_charts(lines: Iterable[Mapping[str, object]], kept: object = None) -> list[Chart]:
    """Distribution charts per latency workload point of the run (several when it
    has more than PER_CHART variants): from the records, else from summary.json's
    `distributions` (`kept`: a kept run has no records)."""
    points = collect(lines) or from_json(kept)
    return [distribution_chart(part) for p in points for part in split(p)]
