"""Delay distributions of latency workloads (document 004's Fig. 4 and 8).

A `result` record with delay histograms (the latency kind's) carries, per direction,
a linear histogram of its
one-way delays (`{unit, bucket_us, first_us, counts, overflow}`, from the minimum
to p99.9; `overflow` counts the rest). Each repetition has its own geometry, so the
repetitions of one variant are merged (summed when the geometry is the same,
re-binned otherwise) and, for the chart, every variant of a point is re-binned
onto one grid so that the fraction of probes per bin compares across variants.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from secperf.report.plots import figure_bytes, new_figure
from secperf.tables import BASELINE, Chart

DIRECTIONS = (("c2s", "client → server"), ("s2c", "server → client"))
CLIP_QUANTILE = 0.995  # the x axis ends where the slowest variant reaches this
LOG_RATIO = 8.0  # a range wider than this (max/min) gets log-spaced bins
BINS = 120


@dataclass(frozen=True)
class Histogram:
    """Linear buckets of `bucket_us` from `first_us`; `overflow` lies beyond them."""

    bucket_us: float
    first_us: float
    counts: tuple[int, ...]
    overflow: int = 0

    @property
    def total(self) -> int:
        return sum(self.counts) + self.overflow

    def edges(self) -> np.ndarray:
        steps = np.arange(len(self.counts) + 1, dtype=float)
        return steps * self.bucket_us + self.first_us

    def cumulative_at(self, xs: np.ndarray) -> np.ndarray:
        """Probes at or below each x, counts spread evenly within their bucket."""
        cum = np.concatenate([[0.0], np.cumsum(np.asarray(self.counts, dtype=float))])
        return cast(np.ndarray, np.interp(xs, self.edges(), cum, left=0.0, right=float(cum[-1])))

    def quantile(self, q: float) -> float:
        """The delay below which a fraction `q` of all probes (overflow included) lie."""
        cum = np.concatenate([[0.0], np.cumsum(np.asarray(self.counts, dtype=float))])
        target = q * self.total
        if self.total == 0 or target >= cum[-1]:
            return float(self.edges()[-1])
        return float(np.interp(target, cum, self.edges()))


def parse(raw: object) -> Histogram | None:
    """A record's `histogram` object, or None if it is absent or malformed."""
    if not isinstance(raw, Mapping):
        return None
    bucket, first, counts = raw.get("bucket_us"), raw.get("first_us"), raw.get("counts")
    overflow = raw.get("overflow", 0)
    if not (_number(bucket) and _number(first) and isinstance(counts, list)):
        return None
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        return None
    if float(str(bucket)) <= 0 or not counts:
        return None
    return Histogram(
        float(str(bucket)),
        float(str(first)),
        tuple(counts),
        overflow if isinstance(overflow, int) and overflow > 0 else 0,
    )


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def merge(hists: Sequence[Histogram]) -> Histogram:
    """The repetitions' histograms as one: summed bucket by bucket when they share
    bucket width and start, else re-binned onto the widest bucket of them all."""
    if not hists:
        raise ValueError("merge needs at least one histogram")
    overflow = sum(h.overflow for h in hists)
    first = hists[0]
    if all(h.bucket_us == first.bucket_us and h.first_us == first.first_us for h in hists):
        size = max(len(h.counts) for h in hists)
        counts = [sum(h.counts[i] for h in hists if i < len(h.counts)) for i in range(size)]
        return Histogram(first.bucket_us, first.first_us, tuple(counts), overflow)
    bucket = max(h.bucket_us for h in hists)
    start = math.floor(min(h.first_us for h in hists) / bucket) * bucket
    end = max(float(h.edges()[-1]) for h in hists)
    n = max(1, math.ceil((end - start) / bucket - 1e-9))
    edges = start + bucket * np.arange(n + 1)
    cum = sum((h.cumulative_at(edges) for h in hists), np.zeros(n + 1))
    counts = _round_preserving(np.diff(cum))
    return Histogram(bucket, start, tuple(counts), overflow)


def _round_preserving(values: np.ndarray) -> list[int]:
    """Whole counts that keep the exact total (largest remainders get the rest)."""
    floors = np.floor(values + 1e-9).astype(int)
    missing = round(float(values.sum())) - int(floors.sum())
    if missing > 0:
        order = np.argsort(-(values - floors), kind="stable")[:missing]
        floors[order] += 1
    return [int(x) for x in floors]


@dataclass
class Distribution:
    """One variant's merged delays at one point, one direction."""

    variant: str
    hist: Histogram
    mean_us: float | None
    stddev_us: float | None
    reps: int


@dataclass
class PointDelays:
    workload: str
    point_id: str
    label: str
    # direction -> variant -> distribution, baseline first
    directions: dict[str, dict[str, Distribution]]


def collect(lines: Iterable[Mapping[str, object]]) -> list[PointDelays]:
    """Result records with delay histograms grouped by point and variant, repetitions
    merged."""
    # (workload, point_id) -> label, and (point, variant, direction) -> rep -> record part
    labels: dict[tuple[str, str], str] = {}
    parts: dict[tuple[str, str, str, str], dict[object, Mapping[str, object]]] = {}
    for n, line in enumerate(lines):
        record = line.get("record")
        if not isinstance(record, Mapping) or record.get("type") != "result":
            continue
        workload, pid = str(line.get("workload", "")), str(line.get("point_id", ""))
        variant = str(line.get("variant") or BASELINE)
        labels.setdefault((workload, pid), str(line.get("label") or workload or pid))
        rep = line.get("rep")
        key_rep: object = rep if isinstance(rep, int) else f"line{n}"
        for direction, _ in DIRECTIONS:
            part = record.get(direction)
            if isinstance(part, Mapping) and parse(part.get("histogram")) is not None:
                # a repetition kept twice counts once
                parts.setdefault((workload, pid, variant, direction), {})[key_rep] = part
    out: list[PointDelays] = []
    for (workload, pid), label in labels.items():
        point = PointDelays(workload, pid, label, {})
        for direction, _ in DIRECTIONS:
            found = {
                v: reps
                for (w, p, v, d), reps in parts.items()
                if (w, p, d) == (workload, pid, direction)
            }
            ordered = sorted(found, key=lambda v: 0 if v == BASELINE else 1)
            dists = {v: _distribution(v, list(found[v].values())) for v in ordered}
            if dists:
                point.directions[direction] = dists
        if point.directions:
            out.append(point)
    return out


def _distribution(variant: str, parts: Sequence[Mapping[str, object]]) -> Distribution:
    hists = [h for p in parts if (h := parse(p.get("histogram"))) is not None]
    # pooled mean and stddev over every probe of every repetition
    count = mean_sum = sq_sum = 0.0
    for p in parts:
        d = p.get("delay_us")
        if not isinstance(d, Mapping):
            continue
        c, m, s = d.get("count"), d.get("mean"), d.get("stddev")
        if _number(c) and _number(m) and _number(s) and float(str(c)) > 0:
            cf, mf, sf = float(str(c)), float(str(m)), float(str(s))
            count += cf
            mean_sum += cf * mf
            sq_sum += cf * (sf * sf + mf * mf)
    mean = mean_sum / count if count else None
    std = math.sqrt(max(sq_sum / count - mean * mean, 0.0)) if mean is not None else None
    return Distribution(variant, merge(hists), mean, std, len(parts))


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


def delay_charts(lines: Iterable[Mapping[str, object]]) -> list[Chart]:
    """Distribution charts per latency workload point of the run (several when it
    has more than PER_CHART variants)."""
    return [distribution_chart(part) for p in collect(lines) for part in split(p)]
