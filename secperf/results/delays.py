"""Delay distributions of latency workloads (document 004's Fig. 4 and 8), as data.

A `result` record with delay histograms (the latency kind's) carries, per direction,
a linear histogram of its one-way delays (`{unit, bucket_us, first_us, counts,
overflow}`, from the minimum to p99.9; `overflow` counts the rest). Each repetition
has its own geometry, so the repetitions of one variant are merged (summed when the
geometry is the same, re-binned otherwise). The merged histograms go into
summary.json (`distributions`), so that a kept run (summary and run.json only)
still draws them; secperf/report/distributions.py draws them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from secperf.results.records import RecordLine, as_line
from secperf.tables import BASELINE

DIRECTIONS = (("c2s", "client → server"), ("s2c", "server → client"))


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


def collect(lines: Iterable[Mapping[str, Any] | RecordLine]) -> list[PointDelays]:
    """Result records with delay histograms grouped by point and variant, repetitions
    merged."""
    # (workload, point_id) -> label, and (point, variant, direction) -> rep -> record part
    labels: dict[tuple[str, str], str] = {}
    parts: dict[tuple[str, str, str, str], dict[object, Mapping[str, object]]] = {}
    for n, raw in enumerate(lines):
        line = as_line(raw)
        record = line.record
        if line.rtype != "result":
            continue
        workload, pid, variant = line.workload, line.point_id, line.variant
        labels.setdefault((workload, pid), line.label or workload or pid)
        key_rep: object = line.rep if line.rep is not None else f"line{n}"
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


def to_json(points: Sequence[PointDelays]) -> list[dict[str, Any]]:
    """The merged distributions as summary.json rows, one per point, direction and
    variant (docs/data-format.md `distributions`)."""
    out: list[dict[str, Any]] = []
    for p in points:
        for direction, dists in p.directions.items():
            for variant, d in dists.items():
                out.append(
                    {
                        "workload": p.workload,
                        "point_id": p.point_id,
                        "label": p.label,
                        "direction": direction,
                        "variant": variant,
                        "reps": d.reps,
                        "mean_us": d.mean_us,
                        "stddev_us": d.stddev_us,
                        "histogram": {
                            "unit": "us",
                            "bucket_us": d.hist.bucket_us,
                            "first_us": d.hist.first_us,
                            "counts": list(d.hist.counts),
                            "overflow": d.hist.overflow,
                        },
                    }
                )
    return out


def from_json(rows: object) -> list[PointDelays]:
    """summary.json's `distributions` back as points (rows that do not parse are left
    out), in the order they were written."""
    points: dict[tuple[str, str], PointDelays] = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, Mapping):
            continue
        hist = parse(row.get("histogram"))
        direction = row.get("direction")
        if hist is None or direction not in dict(DIRECTIONS):
            continue
        workload, pid = str(row.get("workload", "")), str(row.get("point_id", ""))
        point = points.setdefault(
            (workload, pid), PointDelays(workload, pid, str(row.get("label") or pid), {})
        )
        mean, std, reps = row.get("mean_us"), row.get("stddev_us"), row.get("reps")
        point.directions.setdefault(str(direction), {})[str(row.get("variant"))] = Distribution(
            str(row.get("variant")),
            hist,
            float(cast(float, mean)) if _number(mean) else None,
            float(cast(float, std)) if _number(std) else None,
            reps if isinstance(reps, int) else 0,
        )
    return list(points.values())
