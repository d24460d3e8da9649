"""Confidence intervals, paired degradation, unpaired differences, the stopping rule.

Every figure secperf prints carries a Student-t interval. Degradation pairs a
variant's repetition i with the baseline's repetition i (they ran back to back,
interleaved), so drift on a shared machine cancels. Outliers are flagged with
Tukey's fences and reported, never removed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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


def degradation(
    baseline: Sequence[float],
    variant: Sequence[float],
    *,
    higher_is_better: bool,
    confidence: float,
) -> Summary:
    """Paired degradation in %: positive = the variant is worse.

    d_i = (b_i - v_i) / b_i * 100 when higher is better (throughput),
    d_i = (v_i - b_i) / b_i * 100 when lower is better (latency, CPU).
    The Summary is over d_i; its halfwidth_pct is the CI half width in
    percentage points (not relative to the mean degradation)."""
    if len(baseline) != len(variant):
        raise ValueError(
            f"paired samples differ in length: {len(baseline)} baseline vs {len(variant)} variant"
        )
    if any(b == 0 for b in baseline):
        raise ValueError("a baseline value is 0: degradation in % is undefined")
    sign = 1.0 if higher_is_better else -1.0
    d = [sign * (b - v) / b * 100.0 for b, v in zip(baseline, variant, strict=True)]
    s = summarize(d, confidence)
    halfwidth = (s.ci_high - s.ci_low) / 2 if s.n >= 2 else INF
    return Summary(s.n, s.mean, s.stddev, s.ci_low, s.ci_high, halfwidth, s.outliers)


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
) -> bool | None:
    """Is the paired degradation's interval as narrow as asked (± halfwidth_pp points)?

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
    d = degradation(b, v, higher_is_better=higher_is_better, confidence=confidence)
    return d.halfwidth_pct <= halfwidth_pp


def targets_met(
    values: RoundValues,
    primary: Mapping[str, bool],
    *,
    baseline: str,
    confidence: float,
    halfwidth_pct: float,
    degradation_pp: float | None = None,
) -> bool | None:
    """Are the point's asked intervals met, over the rounds so far?

    With variants: every variant's paired degradation of every primary metric has a
    half width ≤ `degradation_pp` percentage points. With the baseline alone: its own
    interval is within `halfwidth_pct` % of its mean. A metric that no round has paired
    yet does not hold the point back; None when nothing at all could be paired.
    `degradation_pp` None: `halfwidth_pct` (the single target of older scenarios)."""
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
    )
    if met is None:
        return "unpaired"
    return "ci_met" if met else None
