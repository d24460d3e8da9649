"""Confidence intervals, paired degradation, unpaired differences, the stopping rule.

Every figure secperf prints carries a Student-t interval. Degradation pairs a
variant's repetition i with the baseline's repetition i (they ran back to back,
interleaved), so drift on a shared machine cancels; a rate's or a service demand's
on the ratio scale (the log of the paired ratio), anything else's as the arithmetic
difference, and fewer than MIN_PAIRS_FOR_INTERVAL pairs give no interval. A search
that found no value bounds a ratio instead (`ratio_range`). Outliers are flagged
with Tukey's fences and reported, never removed.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

INF = math.inf


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    stddev: float  # sample standard deviation (n - 1); 0 when n == 1
    ci_low: float  # -inf when n < 2: one value gives no interval
    ci_high: float  # +inf when n < 2
    halfwidth_pct: float  # CI half width as % of |mean| (inf if n < 2 or mean == 0)
    outliers: tuple[int, ...]  # indices outside Tukey's fences (1.5 IQR), reported only


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (got {confidence})")


def _t(confidence: float, df: float) -> float:
    """Two-sided Student-t quantile."""
    # scipy.stats takes half a second to import: only when an interval is computed.
    from scipy import stats as sps

    return float(sps.t.ppf((1 + confidence) / 2, df))


def t_quantile(confidence: float, df: float) -> float:
    """The two-sided Student-t quantile an interval of `df` degrees of freedom uses."""
    _check_confidence(confidence)
    return _t(confidence, df)


def tukey_outliers(values: Sequence[float]) -> tuple[int, ...]:
    """Indices of values outside [Q1 - 1.5 IQR, Q3 + 1.5 IQR]; none below 4 values."""
    if len(values) < 4:
        return ()
    q1, q3 = np.percentile(np.asarray(values, dtype=float), [25, 75])
    low, high = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return tuple(i for i, v in enumerate(values) if v < low or v > high)


def _halfwidth_pct(halfwidth: float, mean: float) -> float:
    if mean == 0 or not math.isfinite(halfwidth):
        return INF
    return halfwidth / abs(mean) * 100.0


def summarize(values: Sequence[float], confidence: float) -> Summary:
    """Mean, sample stddev and the two-sided t interval of the mean."""
    _check_confidence(confidence)
    n = len(values)
    if n == 0:
        raise ValueError("cannot summarize no values")
    data = np.asarray(values, dtype=float)
    mean = float(data.mean())
    if n < 2:
        return Summary(1, mean, 0.0, -INF, INF, INF, ())
    stddev = float(data.std(ddof=1))
    halfwidth = _t(confidence, n - 1) * stddev / math.sqrt(n)
    return Summary(
        n=n,
        mean=mean,
        stddev=stddev,
        ci_low=mean - halfwidth,
        ci_high=mean + halfwidth,
        halfwidth_pct=_halfwidth_pct(halfwidth, mean),
        outliers=tukey_outliers(values),
    )


def ci_met(values: Sequence[float], confidence: float, halfwidth_pct: float) -> bool:
    """Is the interval as narrow as asked (half width ≤ halfwidth_pct % of the mean)?

    Identical values (a pass/fail check, a count that cannot vary) have a zero-width
    interval even when their mean is 0, where a relative width is undefined.
    """
    if len(values) < 2:
        return False
    if max(values) == min(values):
        return True
    return summarize(values, confidence).halfwidth_pct <= halfwidth_pct


# Paired rounds below which a degradation has no interval: two pairs give a t interval
# with one degree of freedom (t = 12.7 at 95 %), whose width says nothing (±85 points
# on a 2-round run); the answer says "2 rounds: no interval" instead.
MIN_PAIRS_FOR_INTERVAL = 3


def degradation(
    baseline: Sequence[float],
    variant: Sequence[float],
    *,
    higher_is_better: bool,
    confidence: float,
    ratio: bool = False,
) -> Summary:
    """Paired degradation in %: positive = the variant is worse.

    `ratio` False (a loss %, a delay where 0 is possible): the arithmetic paired
    difference, d_i = (b_i - v_i) / b_i * 100 when higher is better (throughput),
    (v_i - b_i) / b_i * 100 when lower is better; the mean of d_i with its t interval.

    `ratio` True (rates, service demands): the ratio scale. r_i = v_i / b_i; the t
    interval of mean(log r_i), back-transformed; the estimate is the geometric mean
    of the paired ratios as a % change, (1 - g) * 100 when higher is better, (g - 1)
    * 100 otherwise. A rate's loss then never passes 100 %, and the interval is not
    symmetric around a skewed ratio. A value of 0 (a denied stream) has no log: that
    series falls back to the arithmetic difference, its interval clipped to what a
    quantity that cannot go below 0 allows (a loss of at most 100 %, a gain of a
    lower-is-better one of at most 100 %).

    Fewer than MIN_PAIRS_FOR_INTERVAL pairs: the estimate without an interval
    (ci_low -inf, ci_high +inf). `halfwidth_pct` is the larger side of the interval
    in percentage points (the stopping rule's half width; the two are equal on the
    arithmetic scale); `stddev` is that of d_i, or of 100 * log r_i on the ratio scale."""
    if len(baseline) != len(variant):
        raise ValueError(
            f"paired samples differ in length: {len(baseline)} baseline vs {len(variant)} variant"
        )
    if any(b == 0 for b in baseline):
        raise ValueError("a baseline value is 0: degradation in % is undefined")
    _check_confidence(confidence)
    pairs = list(zip(baseline, variant, strict=True))
    if ratio and all(b > 0 and v > 0 for b, v in pairs):
        return _ratio_degradation(pairs, higher_is_better, confidence)
    sign = 1.0 if higher_is_better else -1.0
    d = [sign * (b - v) / b * 100.0 for b, v in pairs]
    s = summarize(d, confidence)
    if s.n < MIN_PAIRS_FOR_INTERVAL:
        return Summary(s.n, s.mean, s.stddev, -INF, INF, INF, s.outliers)
    low, high = s.ci_low, s.ci_high
    if ratio:  # a quantity that cannot go below 0: the ratio v/b is at least 0
        low, high = (low, min(high, 100.0)) if higher_is_better else (max(low, -100.0), high)
    return Summary(s.n, s.mean, s.stddev, low, high, halfwidth_pp(s.mean, low, high), s.outliers)


def delta_definition(ratio: bool) -> str:
    """What a paired degradation's Δ % is (`degradation`), in one line for a table's
    notes: on the ratio scale (rates and service demand alike) the geometric mean of
    the paired rounds' ratios, which the ratio of two means (each over its own rounds,
    by the arithmetic mean) need not equal."""
    if ratio:
        return (
            "Δ% = the geometric mean of the paired rounds' ratios variant / baseline, − 1 "
            "(a rate's loss: 1 − it), not the ratio of the two means, each over its own rounds"
        )
    return "Δ% = the mean of the paired rounds' differences, in % of the baseline's value"


def halfwidth_pp(mean: float, low: float, high: float) -> float:
    """A degradation interval's half width against its target: the larger of its two
    sides around the estimate (an interval on the ratio scale is not symmetric)."""
    return max(high - mean, mean - low)


def _from_log_ratio(log_r: float, higher_is_better: bool) -> float:
    """log(v / b) -> the degradation in % (positive = worse)."""
    g = math.exp(log_r)
    return (1.0 - g) * 100.0 if higher_is_better else (g - 1.0) * 100.0


def _ratio_degradation(
    pairs: Sequence[tuple[float, float]], higher_is_better: bool, confidence: float
) -> Summary:
    logs = [math.log(v / b) for b, v in pairs]
    s = summarize(logs, confidence)
    mean = _from_log_ratio(s.mean, higher_is_better)
    sd = s.stddev * 100.0
    outliers = tukey_outliers(logs)
    if s.n < MIN_PAIRS_FOR_INTERVAL:
        return Summary(s.n, mean, sd, -INF, INF, INF, outliers)
    ends = sorted(_from_log_ratio(x, higher_is_better) for x in (s.ci_low, s.ci_high))
    return Summary(s.n, mean, sd, ends[0], ends[1], halfwidth_pp(mean, ends[0], ends[1]), outliers)


def rounds_to_target(n: int, halfwidth: float, target: float) -> int:
    """About how many more paired rounds bring a half width of `halfwidth` after `n`
    rounds down to `target`: it shrinks as 1 / sqrt(n), so about n (h / t)^2 in all
    (the t quantile's own shrinking is left out: the estimate errs long). 0 when met."""
    if target <= 0 or n < 1:
        raise ValueError("a target above 0 and at least one round are needed")
    if halfwidth <= target:
        return 0
    return max(1, math.ceil(n * (halfwidth / target) ** 2) - n)


def bracketed_interval(
    lows: Sequence[float], highs: Sequence[float], confidence: float
) -> tuple[float, float]:
    """The interval of a mean of quantities each known only to lie in [lo_i, hi_i]:
    [mean(lo) - h, mean(hi) + h], h the larger t half width of the two series (a
    search's bracket: docs/methodology.md, "Searches"). Callers pass logs of ratios
    for an interval on the ratio scale."""
    if len(lows) != len(highs) or not lows:
        raise ValueError("a bracketed interval needs as many lows as highs, at least one")
    h = 0.0
    if len(lows) >= 2:
        h = max(
            summarize(lows, confidence).ci_high - sum(lows) / len(lows),
            summarize(highs, confidence).ci_high - sum(highs) / len(highs),
        )
    return sum(lows) / len(lows) - h, sum(highs) / len(highs) + h


def ratio_range(
    variant: tuple[float, float], baseline: tuple[float, float]
) -> tuple[float, float] | None:
    """What v / b can be when v lies in [v_lo, v_hi] and b in [b_lo, b_hi], each end
    possibly open (0 below, inf above: a censored search, "at least" or "below"), as
    [v_lo / b_hi, v_hi / b_lo]. None when nothing is known (0 to inf) or b may be 0."""
    (vl, vh), (bl, bh) = variant, baseline
    if bl <= 0 or vl < 0 or vh < vl or bh < bl:
        return None
    low = 0.0 if math.isinf(bh) else vl / bh
    high = INF if math.isinf(vh) else vh / bl
    if low == 0 and math.isinf(high):
        return None
    return low, high


def unpaired_ratio(
    variant: tuple[float, float, int], other: tuple[float, float, int], confidence: float
) -> tuple[float, float, float] | None:
    """mean_v / mean_o with a conservative interval from two (mean, stddev, n) alone, when
    the rounds that would pair them are gone: each mean's t interval at 1 - (1 - c) / 2
    (Bonferroni: both hold together with probability at least c) and the ratio's range
    over them. Wider than the paired interval, never narrower. None below 2 rounds a
    side or when the other's interval reaches 0."""
    _check_confidence(confidence)
    (mv, sv, nv), (mo, so, no) = variant, other
    if nv < 2 or no < 2 or mo <= 0:
        return None
    each = 1 - (1 - confidence) / 2
    hv = _t(each, nv - 1) * sv / math.sqrt(nv)
    ho = _t(each, no - 1) * so / math.sqrt(no)
    ends = ratio_range((max(mv - hv, 0.0), mv + hv), (mo - ho, mo + ho))
    if ends is None or math.isinf(ends[1]):
        return None
    return mv / mo, ends[0], ends[1]


def degradation_range(
    ratios: tuple[float, float], *, higher_is_better: bool
) -> tuple[float, float]:
    """A range of v / b as a degradation range in % (positive = worse), ordered."""
    ends = sorted((1.0 - r) * 100.0 if higher_is_better else (r - 1.0) * 100.0 for r in ratios)
    return ends[0], ends[1]


def difference(a: Sequence[float], b: Sequence[float], confidence: float) -> Summary:
    """Unpaired (Welch) difference mean(b) - mean(a), in % of mean(a), with its CI.

    For comparing two runs (`secperf compare`), whose repetitions are not
    paired. The CI treats mean(a) as exact when scaling to %. `n` is
    len(a) + len(b); `stddev` is the standard error of the difference in %;
    `halfwidth_pct` is the CI half width in percentage points."""
    _check_confidence(confidence)
    na, nb = len(a), len(b)
    if na == 0 or nb == 0:
        raise ValueError("cannot compare an empty sample")
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    mean_a, mean_b = float(xa.mean()), float(xb.mean())
    if mean_a == 0:
        raise ValueError("mean of the reference sample is 0: a difference in % is undefined")
    scale = 100.0 / abs(mean_a)
    diff = (mean_b - mean_a) * scale
    if na < 2 or nb < 2:
        return Summary(na + nb, diff, 0.0, -INF, INF, INF, ())
    va, vb = float(xa.var(ddof=1)) / na, float(xb.var(ddof=1)) / nb
    se = math.sqrt(va + vb)
    if se == 0:
        halfwidth = 0.0
    else:
        # Welch–Satterthwaite degrees of freedom
        df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
        halfwidth = _t(confidence, df) * se * scale
    return Summary(
        n=na + nb,
        mean=diff,
        stddev=se * scale,
        ci_low=diff - halfwidth,
        ci_high=diff + halfwidth,
        halfwidth_pct=halfwidth,
        outliers=(),
    )


def significant(summary: Summary) -> bool:
    """Does the interval exclude 0?"""
    return summary.ci_low > 0 or summary.ci_high < 0


# ---------------------------------------------------------------- stopping rule

# Rounds before an interval may stop a point: two values give a t interval with one
# degree of freedom, whose width says little about the next round.
MIN_ROUNDS_TO_STOP = 3

# variant -> metric -> round (`rep`) -> value; a round where a metric is absent (a
# search bracket without a value, a metric the record lacks) is simply not there.
RoundValues = Mapping[str, Mapping[str, Mapping[int, float]]]


def _own_ci_met(series: Mapping[int, float], confidence: float, halfwidth_pct: float) -> bool:
    return ci_met([series[r] for r in sorted(series)], confidence, halfwidth_pct)


def paired_ci_met(
    baseline: Mapping[int, float],
    variant: Mapping[int, float],
    *,
    higher_is_better: bool,
    confidence: float,
    halfwidth_pp: float,
    ratio: bool = False,
) -> bool | None:
    """Is the paired degradation's interval as narrow as asked (± halfwidth_pp points)?

    On the ratio scale (`ratio`, see `degradation`) the larger side of the interval
    is compared with the target.

    Rounds are paired by their number; a round missing on either side is not paired.
    None when no round pairs at all (nothing to narrow yet). Where a baseline value is
    0 the degradation in % is undefined, as in the summary: then identical pairs pass,
    and otherwise both sides' own intervals must meet the target.
    """
    paired = sorted(set(baseline) & set(variant))
    if not paired:
        return None
    b = [baseline[r] for r in paired]
    v = [variant[r] for r in paired]
    if len(paired) < 2:
        return False
    if any(x == 0 for x in b):
        if b == v:
            return True
        return _own_ci_met(baseline, confidence, halfwidth_pp) and _own_ci_met(
            variant, confidence, halfwidth_pp
        )
    d = degradation(b, v, higher_is_better=higher_is_better, confidence=confidence, ratio=ratio)
    return d.halfwidth_pct <= halfwidth_pp


def targets_met(
    values: RoundValues,
    primary: Mapping[str, bool],
    *,
    baseline: str,
    confidence: float,
    halfwidth_pct: float,
    degradation_pp: float | None = None,
    ratio: Collection[str] = (),
) -> bool | None:
    """Are the point's asked intervals met, over the rounds so far?

    With variants: every variant's paired degradation of every primary metric has a
    half width ≤ `degradation_pp` percentage points. With the baseline alone: its own
    interval is within `halfwidth_pct` % of its mean. A metric that no round has paired
    yet does not hold the point back; None when nothing at all could be paired.
    `degradation_pp` None: `halfwidth_pct` (the single target of older scenarios).
    `ratio`: the metrics whose degradation is on the ratio scale (Metric.ratio_scale)."""
    pp = halfwidth_pct if degradation_pp is None else degradation_pp
    base = values.get(baseline, {})
    variants = [name for name in values if name != baseline]
    verdicts: list[bool] = []
    for metric, higher_is_better in primary.items():
        base_series = base.get(metric, {})
        if not variants:
            if base_series:
                verdicts.append(_own_ci_met(base_series, confidence, halfwidth_pct))
            continue
        for name in variants:
            met = paired_ci_met(
                base_series,
                values[name].get(metric, {}),
                higher_is_better=higher_is_better,
                confidence=confidence,
                halfwidth_pp=pp,
                ratio=metric in ratio,
            )
            if met is not None:
                verdicts.append(met)
    if not verdicts:
        return None
    return all(verdicts)


def stop_reason(
    values: RoundValues,
    primary: Mapping[str, bool],
    *,
    rounds: int,
    baseline: str,
    min_rounds: int,
    max_rounds: int,
    confidence: float,
    halfwidth_pct: float,
    degradation_pp: float | None = None,
    ratio: Collection[str] = (),
) -> str | None:
    """Why a workload point stops after `rounds` rounds, or None to run another
    (without a budget: the runner adds that, secperf.run.budget).

    `primary` maps each primary metric to higher_is_better. The point stops
    (`ci_met`) once `targets_met`; never before max(3, min_rounds) rounds; at
    `max_rounds` it stops (`max_reached`); if nothing at all could be paired the
    reason is `unpaired`.
    """
    if rounds >= max_rounds:
        return "max_reached"
    if rounds < max(MIN_ROUNDS_TO_STOP, min_rounds):
        return None
    met = targets_met(
        values,
        primary,
        baseline=baseline,
        confidence=confidence,
        halfwidth_pct=halfwidth_pct,
        degradation_pp=degradation_pp,
        ratio=ratio,
    )
    if met is None:
        return "unpaired"
    return "ci_met" if met else None
