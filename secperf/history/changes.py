"""A scenario's history as series of paired degradations, one per (variant, workload,
point, metric), and the change points in each (docs/history.md, "The detection rule").

Candidates come from PELT (ruptures; MongoDB's E-divisive package pins numpy < 2 and
Python < 3.12, docs/history.md); a candidate counts only when the step
is larger than the runs' own intervals: the segment means before and after differ by
more than the two segments' mean half-widths together. A machine fingerprint change
splits a series: it is marked, never called a step."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from secperf.tables import BASELINE

MIN_SIZE = 2  # runs on each side of a change point
Z95 = 1.959963984540054


@dataclass
class Point:
    """One run's figure in a series."""

    run_id: int
    started: str
    run_dir: str
    labels: dict[str, str]
    fingerprint: str
    mean: float
    low: float
    high: float
    n: int | None
    verdict: str | None
    other_machine: bool = False  # not the newest run's machine (shown with --all-machines)
    scenario_hash: str | None = None  # the scenario file's text as run

    @property
    def half(self) -> float:
        return max(0.0, (self.high - self.low) / 2)

    def who(self) -> str:
        """The run in words: its start, run directory and labels."""
        labels = " ".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        return f"{self.started} {self.run_dir}" + (f" ({labels})" if labels else "")


@dataclass
class Step:
    """A change point: the series moved by `size` points at `point` (the first run of the
    new level), with the step's interval."""

    index: int
    point: Point
    before: float
    after: float
    low: float
    high: float
    runs_before: int
    runs_after: int

    @property
    def size(self) -> float:
        return self.after - self.before

    def to_json(self) -> dict[str, Any]:
        p = self.point
        return {
            "index": self.index,
            "run_id": p.run_id,
            "started": p.started,
            "run_dir": p.run_dir,
            "labels": p.labels,
            "before": self.before,
            "after": self.after,
            "step": self.size,
            "step_low": self.low,
            "step_high": self.high,
        }


@dataclass
class Series:
    variant: str
    workload: str
    label: str
    metric: str
    unit: str | None
    points: list[Point] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.variant, self.workload, self.label, self.metric)

    @property
    def title(self) -> str:
        where = self.workload if self.label == self.workload else f"{self.workload} {self.label}"
        return f"{self.variant} · {where} · {self.metric}"

    def machine_changes(self) -> list[int]:
        """Indices where the machine fingerprint differs from the run before."""
        return [
            i
            for i in range(1, len(self.points))
            if self.points[i].fingerprint != self.points[i - 1].fingerprint
        ]

    def scenario_changes(self) -> list[int]:
        """Indices where the scenario's text differs from the run before (both known)."""
        return [
            i
            for i in range(1, len(self.points))
            if None not in (self.points[i].scenario_hash, self.points[i - 1].scenario_hash)
            and self.points[i].scenario_hash != self.points[i - 1].scenario_hash
        ]


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def build_series(rows: Iterable[Mapping[str, Any]], *, all_machines: bool = False) -> list[Series]:
    """Store rows (Store.series_rows, oldest run first) as series of paired degradations.
    Runs on another machine than the newest run's are left out unless `all_machines`
    (then kept and marked)."""
    rows = [r for r in rows if r.get("variant") != BASELINE]
    newest = max(rows, key=lambda r: (r["started"] or "", r["run_id"]), default=None)
    here = newest["fingerprint"] if newest else None
    out: dict[tuple[str, str, str, str], Series] = {}
    for r in rows:
        mean = _finite(r.get("degradation_pct"))
        lo, hi = _finite(r.get("degradation_ci_low")), _finite(r.get("degradation_ci_high"))
        if mean is None:
            continue
        other = r["fingerprint"] != here
        if other and not all_machines:
            continue
        key = (r["variant"], r["workload"], r["label"], r["metric"])
        s = out.setdefault(key, Series(*key, unit=r.get("unit")))
        s.points.append(
            Point(
                run_id=int(r["run_id"]),
                started=str(r["started"]),
                run_dir=str(r["run_dir"]),
                labels=dict(r.get("labels") or {}),
                fingerprint=str(r["fingerprint"]),
                mean=mean,
                low=mean if lo is None else lo,
                high=mean if hi is None else hi,
                n=r.get("degradation_n") or r.get("n"),
                verdict=r.get("verdict"),
                other_machine=other,
                scenario_hash=r.get("scenario_hash"),
            )
        )
    series = list(out.values())
    for s in series:
        s.steps = change_points(s.points)
    return series


def _side(points: Sequence[Point]) -> tuple[float, float, float]:
    """(mean, mean half-width, standard error of the mean) of a segment of runs."""
    n = len(points)
    means = [p.mean for p in points]
    mean = sum(means) / n
    half = sum(p.half for p in points) / n
    between = sum((m - mean) ** 2 for m in means) / (n - 1) if n > 1 else 0.0
    within = sum((p.half / Z95) ** 2 for p in points) / n
    return mean, half, math.sqrt((between + within) / n)


def step_between(
    before: Sequence[Point], after: Sequence[Point]
) -> tuple[float, float, float, bool]:
    """(before's mean, after's mean, the step's half-width, whether it is a step): a step
    when the means differ by more than the two segments' mean half-widths together."""
    b, hb, sb = _side(before)
    a, ha, sa = _side(after)
    return b, a, Z95 * math.hypot(sb, sa), abs(a - b) > hb + ha


def _candidates(points: Sequence[Point]) -> list[int]:
    """Candidate change points by PELT (ruptures, least squares): the penalty is BIC's,
    2 σ² ln n, σ the larger of the run-to-run noise (the first differences' MAD) and the
    runs' own standard errors."""
    means = [p.mean for p in points]
    n = len(means)
    if n < 2 * MIN_SIZE or max(means) == min(means):
        return []
    import numpy as np
    import ruptures

    diffs = np.abs(np.diff(np.asarray(means)))
    noise = 1.4826 * float(np.median(diffs)) / math.sqrt(2)
    own = sum(p.half for p in points) / n / Z95
    sigma = max(noise, own, 1e-9)
    algo = ruptures.Pelt(model="l2", min_size=MIN_SIZE, jump=1).fit(np.asarray(means))
    found = algo.predict(pen=2 * sigma**2 * math.log(n))
    return sorted(int(i) for i in found if 0 < int(i) < n)


def _segment_steps(points: list[Point], offset: int) -> list[Step]:
    cps = _candidates(points)
    while True:  # drop the weakest non-step until every remaining candidate is a step
        bounds = [0, *cps, len(points)]
        judged = []
        for k in range(1, len(bounds) - 1):
            before, after = points[bounds[k - 1] : bounds[k]], points[bounds[k] : bounds[k + 1]]
            b, a, half, real = step_between(before, after)
            judged.append((real, abs(a - b), bounds[k], b, a, half, len(before), len(after)))
        weak = [j for j in judged if not j[0]]
        if not weak:
            break
        cps.remove(min(weak, key=lambda j: j[1])[2])
    return [
        Step(offset + i, points[i], b, a, a - b - half, a - b + half, nb, na)
        for _, _, i, b, a, half, nb, na in judged
    ]


def change_points(points: list[Point]) -> list[Step]:
    """The series' change points, each run of one machine fingerprint on its own."""
    steps: list[Step] = []
    start = 0
    for i in range(1, len(points) + 1):
        if i == len(points) or points[i].fingerprint != points[start].fingerprint:
            steps += _segment_steps(points[start:i], start)
            start = i
    return steps


def machine_text(fingerprint: str) -> str:
    """A fingerprint in words: "Intel(R) Xeon(R) Processor ×2, 6.18.44, placement one"."""
    fp = json.loads(fingerprint)
    cpu, cpus, kernel = fp.get("cpu_model"), fp.get("cpus"), fp.get("kernel")
    return f"{cpu} ×{cpus}, {kernel}, placement {fp.get('placement')}"
