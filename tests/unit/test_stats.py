"""Statistics against values worked out by hand."""

from __future__ import annotations

import math
from typing import Any

import pytest
from scipy import stats as sps

from secperf.stats import (
    ci_met,
    degradation,
    difference,
    paired_ci_met,
    ratio_range,
    rounds_to_target,
    significant,
    stop_reason,
    summarize,
)


def test_summarize_textbook_t_interval() -> None:
    # mean 14, s = sqrt(40/4) = sqrt(10); t(0.975, df=4) = 2.776445 (tables)
    s = summarize([10, 12, 14, 16, 18], 0.95)
    halfwidth = 2.776445 * math.sqrt(10) / math.sqrt(5)
    assert s.n == 5
    assert s.mean == pytest.approx(14.0)
    assert s.stddev == pytest.approx(math.sqrt(10))
    assert s.ci_low == pytest.approx(14 - halfwidth, rel=1e-6)
    assert s.ci_high == pytest.approx(14 + halfwidth, rel=1e-6)
    assert s.halfwidth_pct == pytest.approx(halfwidth / 14 * 100, rel=1e-6)
    assert s.outliers == ()


def test_summarize_99_percent_is_wider() -> None:
    # t(0.995, df=4) = 4.604095
    s = summarize([10, 12, 14, 16, 18], 0.99)
    assert s.ci_high - 14 == pytest.approx(4.604095 * math.sqrt(2), rel=1e-6)


def test_one_value_has_no_interval() -> None:
    s = summarize([42.0], 0.95)
    assert (s.n, s.mean, s.stddev) == (1, 42.0, 0.0)
    assert s.ci_low == -math.inf and s.ci_high == math.inf
    assert s.halfwidth_pct == math.inf
    assert not ci_met([42.0], 0.95, 50.0)


def test_zero_mean_has_infinite_relative_halfwidth() -> None:
    s = summarize([0.0, 0.0, 0.0], 0.95)
    assert s.mean == 0 and s.stddev == 0 and s.halfwidth_pct == math.inf
    s = summarize([-1.0, 1.0], 0.95)
    assert s.halfwidth_pct == math.inf


def test_constant_values_have_zero_width() -> None:
    s = summarize([5.0, 5.0, 5.0], 0.95)
    assert (s.ci_low, s.ci_high, s.halfwidth_pct) == (5.0, 5.0, 0.0)


def test_summarize_rejects_nothing_and_bad_confidence() -> None:
    with pytest.raises(ValueError):
        summarize([], 0.95)
    with pytest.raises(ValueError):
        summarize([1.0, 2.0], 1.0)


def test_outliers_are_flagged_not_removed() -> None:
    values = [10.0, 10.0, 11.0, 10.0, 50.0]
    s = summarize(values, 0.95)
    assert s.outliers == (4,)
    assert s.mean == pytest.approx(18.2)  # the outlier still counts
    assert summarize([1.0, 2.0, 100.0], 0.95).outliers == ()  # too few for quartiles


def test_ci_met() -> None:
    values = [100.0, 101.0, 99.0, 100.0]
    # s = sqrt(2/3), t(0.975, 3) = 3.182446 -> half width 1.2993 = 1.30 % of 100
    assert ci_met(values, 0.95, 1.5)
    assert not ci_met(values, 0.95, 1.2)


def test_degradation_paired_higher_is_better() -> None:
    # d = [10, 5, 15, 10]: mean 10, s = sqrt(50/3), t(0.975, 3) = 3.182446
    d = degradation(
        [100.0, 100.0, 100.0, 100.0],
        [90.0, 95.0, 85.0, 90.0],
        higher_is_better=True,
        confidence=0.95,
    )
    halfwidth = 3.182446 * math.sqrt(50 / 3) / 2
    assert d.n == 4 and d.mean == pytest.approx(10.0)
    assert d.stddev == pytest.approx(math.sqrt(50 / 3))
    assert d.ci_low == pytest.approx(10 - halfwidth, rel=1e-6)
    assert d.halfwidth_pct == pytest.approx(halfwidth, rel=1e-6)  # percentage points
    assert significant(d)


def test_degradation_pairs_by_index_so_drift_cancels() -> None:
    # The machine slows down over the run; each pair loses exactly 10 %.
    base = [100.0, 200.0, 50.0]
    variant = [90.0, 180.0, 45.0]
    d = degradation(base, variant, higher_is_better=True, confidence=0.95)
    assert d.mean == pytest.approx(10.0) and d.stddev == pytest.approx(0.0, abs=1e-12)
    assert d.ci_low == pytest.approx(10.0) and d.ci_high == pytest.approx(10.0)


def test_degradation_lower_is_better() -> None:
    d = degradation([10.0, 20.0], [11.0, 22.0], higher_is_better=False, confidence=0.95)
    assert d.mean == pytest.approx(10.0)  # latency up 10 % = 10 % worse
    better = degradation([10.0, 20.0], [9.0, 18.0], higher_is_better=False, confidence=0.95)
    assert better.mean == pytest.approx(-10.0)


def test_degradation_edge_cases() -> None:
    with pytest.raises(ValueError, match="length"):
        degradation([1.0, 2.0], [1.0], higher_is_better=True, confidence=0.95)
    with pytest.raises(ValueError, match="0"):
        degradation([0.0, 1.0], [1.0, 1.0], higher_is_better=True, confidence=0.95)
    one = degradation([100.0], [80.0], higher_is_better=True, confidence=0.95)
    assert one.mean == pytest.approx(20.0) and one.halfwidth_pct == math.inf
    assert not significant(one)


def test_difference_welch_by_hand() -> None:
    a = [20.0, 22.0, 24.0]  # mean 22, var 4
    b = [30.0, 36.0, 42.0]  # mean 36, var 36
    va, vb = 4 / 3, 36 / 3
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    assert df == pytest.approx(2.439, rel=1e-3)
    halfwidth = float(sps.t.ppf(0.975, df)) * math.sqrt(va + vb)
    d = difference(a, b, 0.95)
    assert d.mean == pytest.approx((36 - 22) / 22 * 100)
    assert d.ci_low == pytest.approx((14 - halfwidth) / 22 * 100)
    assert d.ci_high == pytest.approx((14 + halfwidth) / 22 * 100)
    assert d.n == 6


def test_difference_matches_scipy_welch_interval() -> None:
    a = [5.1, 4.9, 5.3, 5.0, 5.2]
    b = [5.6, 5.8, 5.5, 6.0]
    ref = sps.ttest_ind(b, a, equal_var=False).confidence_interval(0.9)
    d = difference(a, b, 0.9)
    mean_a = sum(a) / len(a)
    assert d.ci_low == pytest.approx(ref.low / mean_a * 100)
    assert d.ci_high == pytest.approx(ref.high / mean_a * 100)
    assert significant(d)


def test_difference_not_significant_and_edges() -> None:
    d = difference([10.0, 11.0, 9.0], [10.5, 9.5, 10.0], 0.95)
    assert d.ci_low < 0 < d.ci_high and not significant(d)
    same = difference([3.0, 3.0], [3.0, 3.0], 0.95)
    assert (same.mean, same.ci_low, same.ci_high) == (0.0, 0.0, 0.0)
    single = difference([10.0], [12.0, 12.0], 0.95)
    assert single.mean == pytest.approx(20.0) and single.ci_high == math.inf
    with pytest.raises(ValueError):
        difference([0.0, 0.0], [1.0, 2.0], 0.95)
    with pytest.raises(ValueError):
        difference([], [1.0], 0.95)


def test_identical_values_meet_any_target_even_at_zero() -> None:
    # a fail-closed check that fails every round (0, 0, 0) is settled, not noisy
    assert ci_met([0.0, 0.0, 0.0], 0.95, 0.5)
    assert ci_met([1.0, 1.0], 0.99, 0.1)
    assert not ci_met([0.0, 0.0, 1.0], 0.95, 50.0)
    assert not ci_met([0.0], 0.95, 50.0)


# ---------------------------------------------------------------- the stopping rule


def _rounds(values: list[float]) -> dict[int, float]:
    return dict(enumerate(values))


def _stop(values: dict[str, dict[str, dict[int, float]]], rounds: int, **kw: float) -> str | None:
    args: dict[str, Any] = {
        "rounds": rounds,
        "baseline": "baseline",
        "min_rounds": 3,
        "max_rounds": 10,
        "confidence": 0.95,
        "halfwidth_pct": 2.0,
        **kw,
    }
    return stop_reason(values, {"tps": True}, **args)


def test_stops_on_a_narrow_paired_degradation_although_each_mean_is_wide() -> None:
    # Drift moves both sides alike: each mean's interval is ±25 %, the cost is 10 % every round.
    base = [100.0, 120.0, 80.0, 110.0]
    var = [90.0, 108.0, 72.0, 99.0]
    # the old rule (each side's own interval) would have gone on
    assert not ci_met(base, 0.95, 2.0) and not ci_met(var, 0.95, 2.0)
    values = {"baseline": {"tps": _rounds(base)}, "acl": {"tps": _rounds(var)}}
    assert _stop(values, 4) == "ci_met"


def test_goes_on_while_the_paired_degradation_is_wide_although_each_mean_is_narrow() -> None:
    base = [100.0, 99.0, 100.5, 98.5]
    var = [95.0, 96.0, 95.5, 96.5]
    # the old rule would have stopped: both means are within ±2 %
    assert ci_met(base, 0.95, 2.0) and ci_met(var, 0.95, 2.0)
    d = degradation(base, var, higher_is_better=True, confidence=0.95)
    assert d.halfwidth_pct > 2.0  # percentage points
    values = {"baseline": {"tps": _rounds(base)}, "acl": {"tps": _rounds(var)}}
    assert _stop(values, 4) is None
    assert _stop(values, 4, halfwidth_pct=d.halfwidth_pct + 0.01) == "ci_met"


def test_every_variant_must_be_narrow() -> None:
    base = _rounds([100.0, 120.0, 80.0])
    values = {
        "baseline": {"tps": base},
        "good": {"tps": _rounds([90.0, 108.0, 72.0])},
        "bad": {"tps": _rounds([90.0, 80.0, 76.0])},
    }
    assert _stop(values, 3) is None
    del values["bad"]
    assert _stop(values, 3) == "ci_met"


def test_never_before_three_rounds_nor_min_and_always_at_max() -> None:
    same = {"baseline": {"tps": _rounds([100.0, 100.0])}, "acl": {"tps": _rounds([90.0, 90.0])}}
    assert _stop(same, 2, min_rounds=2) is None  # two rounds are not enough to stop early
    assert _stop(same, 2, min_rounds=2, max_rounds=2) == "max_reached"
    three = {
        "baseline": {"tps": _rounds([100.0] * 3)},
        "acl": {"tps": _rounds([90.0] * 3)},
    }
    assert _stop(three, 3) == "ci_met"
    assert _stop(three, 3, min_rounds=5) is None


def test_a_round_missing_on_one_side_is_not_paired() -> None:
    # round 1's variant value is absent (a search that found no value): rounds 0, 2, 3 pair
    base = {0: 100.0, 1: 50.0, 2: 120.0, 3: 80.0}
    var = {0: 90.0, 2: 108.0, 3: 72.0}
    values = {"baseline": {"tps": base}, "acl": {"tps": var}}
    assert _stop(values, 4) == "ci_met"
    # only one round pairs: no interval yet
    values = {"baseline": {"tps": base}, "acl": {"tps": {1: 45.0}}}
    assert _stop(values, 4) is None
    # nothing pairs in any round: nothing to narrow
    values = {"baseline": {"tps": base}, "acl": {"tps": {}}}
    assert _stop(values, 4) == "unpaired"


def test_baseline_alone_uses_its_own_interval() -> None:
    assert _stop({"baseline": {"tps": _rounds([100.0, 101.0, 100.5])}}, 3) == "ci_met"
    assert _stop({"baseline": {"tps": _rounds([100.0, 120.0, 80.0])}}, 3) is None


def test_a_zero_baseline_falls_back_to_both_sides_own_intervals() -> None:
    values = {"baseline": {"tps": _rounds([0.0, 0.0, 0.0])}, "v": {"tps": _rounds([0.0] * 3)}}
    assert _stop(values, 3) == "ci_met"
    values = {"baseline": {"tps": _rounds([0.0, 0.0, 0.0])}, "v": {"tps": _rounds([1.0, 5.0, 9.0])}}
    assert _stop(values, 3) is None
    assert (
        paired_ci_met({}, {0: 1.0}, higher_is_better=True, confidence=0.95, halfwidth_pp=2.0)
        is None
    )


# -- the ratio scale (issue 42 item 4) -----------------------------------------------

# A throughput nearly denied in every round, as seed002-flood-tolerance-quick's EFW
# under a flood: the arithmetic interval passed 100 % ("+93.4 % [+55.6, +131.1]").
FLOODED_BASE = [88.0, 90.0, 86.0]
FLOODED = [0.9, 4.5, 12.0]


def test_a_throughput_loss_on_the_ratio_scale_never_passes_100_pct() -> None:
    plain = degradation(FLOODED_BASE, FLOODED, higher_is_better=True, confidence=0.95)
    assert plain.ci_high > 100.0  # more than all of it: what cannot be
    d = degradation(FLOODED_BASE, FLOODED, higher_is_better=True, confidence=0.95, ratio=True)
    assert d.ci_high < 100.0 and d.ci_low < d.mean < d.ci_high
    # the estimate is the geometric mean of the paired ratios, as a % change
    g = math.exp(sum(math.log(v / b) for b, v in zip(FLOODED_BASE, FLOODED, strict=True)) / 3)
    assert d.mean == pytest.approx((1 - g) * 100)
    # the interval is the t interval of the logs, back-transformed
    logs = [math.log(v / b) for b, v in zip(FLOODED_BASE, FLOODED, strict=True)]
    s = summarize(logs, 0.95)
    assert d.ci_low == pytest.approx((1 - math.exp(s.ci_high)) * 100)
    assert d.ci_high == pytest.approx((1 - math.exp(s.ci_low)) * 100)


def test_a_service_demand_interval_is_asymmetric_on_skewed_ratios() -> None:
    # CPU per unit of work ×1.5, ×3 and ×20 the baseline's: a skewed ratio
    base = [10.0, 10.0, 10.0]
    sd = [15.0, 30.0, 200.0]
    d = degradation(base, sd, higher_is_better=False, confidence=0.95, ratio=True)
    up, down = d.ci_high - d.mean, d.mean - d.ci_low
    assert up > 3 * down  # not symmetric around the estimate
    assert d.ci_low > -100.0  # CPU per unit cannot fall below 0
    assert d.halfwidth_pct == pytest.approx(up)  # the stopping rule sees the larger side
    plain = degradation(base, sd, higher_is_better=False, confidence=0.95)
    assert plain.ci_high - plain.mean == pytest.approx(plain.mean - plain.ci_low)
    assert plain.ci_low < -100.0  # a symmetric interval around a skewed mean


def test_a_zero_rate_falls_back_to_the_difference_clipped_to_what_can_be() -> None:
    d = degradation(
        FLOODED_BASE, [0.0, 4.5, 12.0], higher_is_better=True, confidence=0.95, ratio=True
    )
    assert d.mean == pytest.approx(
        sum((b - v) / b * 100 for b, v in zip(FLOODED_BASE, [0.0, 4.5, 12.0], strict=True)) / 3
    )
    assert d.ci_high == 100.0


def test_two_pairs_give_no_interval_on_either_scale() -> None:
    for ratio in (False, True):
        d = degradation(
            [100.0, 98.0], [50.0, 80.0], higher_is_better=True, confidence=0.95, ratio=ratio
        )
        assert math.isinf(d.ci_low) and math.isinf(d.ci_high) and d.halfwidth_pct == math.inf
        assert not significant(d)


def test_the_stopping_rule_compares_the_larger_side_on_the_ratio_scale() -> None:
    base = {0: 100.0, 1: 100.0, 2: 100.0}
    var = {0: 60.0, 1: 70.0, 2: 90.0}
    d = degradation(
        list(base.values()), list(var.values()), higher_is_better=True, confidence=0.95, ratio=True
    )
    symmetric = (d.ci_high - d.ci_low) / 2
    assert d.halfwidth_pct > symmetric
    between = (d.halfwidth_pct + symmetric) / 2
    args = {"higher_is_better": True, "confidence": 0.95, "halfwidth_pp": between}
    assert paired_ci_met(base, var, ratio=True, **args) is False
    assert paired_ci_met(base, var, ratio=True, **{**args, "halfwidth_pp": d.halfwidth_pct}) is True


def test_rounds_to_target_scales_as_one_over_sqrt_n() -> None:
    assert rounds_to_target(12, 5.3, 2.0) == 73  # 12 * (5.3 / 2)^2 = 84.3: 85 in all
    assert rounds_to_target(10, 2.0, 2.0) == 0
    assert rounds_to_target(4, 2.1, 2.0) == 1


def test_a_ratio_range_is_open_where_a_search_was_censored() -> None:
    # found 14,200 against "not denied up to 71,681": at most 0.20 ×
    found = ratio_range((14_200.0, 14_200.0), (71_681.0, math.inf))
    assert found is not None
    lo, hi = found
    assert lo == 0.0 and hi == pytest.approx(0.198, abs=1e-3)
    assert ratio_range((500.0, math.inf), (8_000.0, math.inf)) is None  # both "at least"
