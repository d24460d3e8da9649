"""A search's degradation: pairs known only to their brackets, and censored comparisons.

A search (secperf/workloads/parts/search.py) gives a value known only to its bracket [lo, hi], or
none: "below" a bound or "at least" one (censored). Two of these compared:

- found with found, round by round: each pair's ratio lies in [vl / bh, vh / bl]; the
  interval of their mean holds those ranges (`pair_interval`), on the ratio scale for
  a rate (the log of the ratio) as every rate's degradation;
- a found value against a censored one, or "below" against "at least": no pair, but a
  bound (`censored_bound`): "denied at 14,200 packets/s, at most 0.20 × the
  baseline's, which was not denied up to 71,681" (docs/methodology.md, "Verdicts").

Both read summary rows' fields only, so a summary written before this reads alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from secperf import stats

Row = Mapping[str, Any]
Bracket = tuple[float, float]


def _pair_ratio(base: Bracket, variant: Bracket) -> Bracket | None:
    """The range of one pair's ratio v / b when both values are only bracketed."""
    (bl, bh), (vl, vh) = base, variant
    if bl <= 0 or bh <= 0 or vl < 0:
        return None
    return vl / bh, vh / bl


def pair_interval(
    bases: Sequence[Bracket],
    variants: Sequence[Bracket],
    *,
    higher_is_better: bool,
    ratio: bool,
    confidence: float,
) -> tuple[float, float] | None:
    """The degradation interval (% points, positive = worse) of paired searches found
    under both sides, each pair known to its brackets only: the bracketed interval
    (stats.bracketed_interval) of their ratios' logs on the ratio scale, of their
    degradations otherwise. None when a pair cannot be bounded (a bracket at 0)."""
    ranges = [_pair_ratio(b, v) for b, v in zip(bases, variants, strict=True)]
    pairs = [r for r in ranges if r is not None]
    if len(pairs) != len(ranges) or not pairs:
        return None
    if ratio and all(lo > 0 for lo, _ in pairs):
        lo, hi = stats.bracketed_interval(
            [math.log(a) for a, _ in pairs], [math.log(b) for _, b in pairs], confidence
        )
        return stats.degradation_range(
            (math.exp(lo), math.exp(hi)), higher_is_better=higher_is_better
        )
    ds = [stats.degradation_range(r, higher_is_better=higher_is_better) for r in pairs]
    lo, hi = stats.bracketed_interval([d[0] for d in ds], [d[1] for d in ds], confidence)
    return lo, hi


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def side_range(row: Row) -> tuple[float, float] | None:
    """Where a search row's value lies: its found values' interval (or their mean
    bracket, or their mean), widened to 0 by a "below" repetition and to infinity by
    an "at least" one. None: not a search row, or nothing found nor bounded."""
    search = row.get("search")
    if not isinstance(search, Mapping):
        return None
    low: float | None = None
    high: float | None = None
    if int(row.get("n") or 0):
        mean = _num(row.get("mean"))
        low = _num(row.get("ci_low"))
        high = _num(row.get("ci_high"))
        if low is None or high is None:
            low, high = _num(search.get("bracket_low")), _num(search.get("bracket_high"))
        if low is None or high is None:
            low = high = mean
    below, above = _num(search.get("below_bound")), _num(search.get("at_least_bound"))
    if int(search.get("below_n") or 0) and below is not None:
        low, high = 0.0, max(high if high is not None else below, below)
    if int(search.get("at_least_n") or 0) and above is not None:
        low, high = min(low if low is not None else above, above), math.inf
    if low is None or high is None:
        return None
    return max(low, 0.0), high


def censored_bound(row: Row, other: Row | None) -> dict[str, Any] | None:
    """A censored comparison's bound, `row` against `other` (the baseline, or the
    variant a paper row compares with), where one side is censored: the range of the
    ratio row / other (`ratio_low`, `ratio_high`; None for infinity) and of the
    degradation in % (`low`, `high`; None where the ratio's end is open, 0 or
    infinity, so that end says nothing: the variant may be 0). None when they are no
    searches, neither is censored, or they bound nothing (both "at least", both
    "below"). The caller decides whether found values paired instead."""
    if other is None:
        return None
    if not (int(row.get("censored_n") or 0) or int(other.get("censored_n") or 0)):
        return None
    mine, theirs = side_range(row), side_range(other)
    if mine is None or theirs is None:
        return None
    ratios = stats.ratio_range(mine, theirs)
    if ratios is None:
        return None
    better_up = bool(row.get("higher_is_better"))
    ends = [None if r == 0 or math.isinf(r) else r for r in ratios]
    degradations = [
        None if r is None else stats.degradation_range((r, r), higher_is_better=better_up)[0]
        for r in ends
    ]
    # higher is better: the ratio's high end gives the degradation's low end
    low, high = degradations[::-1] if better_up else degradations
    return {
        "ratio_low": ratios[0],
        "ratio_high": ends[1],
        "low": low,
        "high": high,
    }
