"""Where the next round goes: how far a point's widest interval is from its target,
and which of its variants are already within theirs (they sit out its later rounds;
every round a variant takes still pairs with that round's own baseline test).

Reads the rounds' values (variant -> metric -> round -> value) and the [repeat]
targets only; the rounds (secperf.run.rounds) decide with secperf.run.budget.priority.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

from secperf import stats
from secperf.scenario.scenario import Repeat

Values = Mapping[str, Mapping[str, Mapping[int, float]]]


def _paired(
    base: Mapping[int, float], mine: Mapping[int, float]
) -> tuple[list[float], list[float]] | None:
    rounds = sorted(set(base) & set(mine))
    if len(rounds) < stats.MIN_PAIRS_FOR_INTERVAL or any(base[r] == 0 for r in rounds):
        return None
    return [base[r] for r in rounds], [mine[r] for r in rounds]


def relative_width(
    values: Values,
    primary: Mapping[str, bool],
    *,
    baseline: str,
    repeat: Repeat,
    ratio: Collection[str] = (),
    leave_out: Collection[str] = (),
) -> float:
    """The widest of the point's asked intervals over its target (1: just met; inf:
    a variant without an interval yet), its variants in `leave_out` aside. Without
    variants: the baseline's own interval over `halfwidth_pct`."""
    base = values.get(baseline, {})
    names = [n for n in values if n != baseline and n not in leave_out]
    worst = 0.0
    for metric, higher in primary.items():
        series = base.get(metric, {})
        if not names:
            if len(series) >= 2:
                own = stats.summarize([series[r] for r in sorted(series)], repeat.confidence)
                worst = max(worst, own.halfwidth_pct / repeat.halfwidth_pct)
            continue
        for name in names:
            pair = _paired(series, values[name].get(metric, {}))
            if pair is None:
                if values[name].get(metric):
                    worst = math.inf
                continue
            d = stats.degradation(
                *pair, higher_is_better=higher, confidence=repeat.confidence, ratio=metric in ratio
            )
            worst = max(worst, d.halfwidth_pct / repeat.degradation_pp)
    return worst


def within_target(
    values: Values,
    primary: Mapping[str, bool],
    *,
    baseline: str,
    repeat: Repeat,
    rounds: int,
    least: int,
    ratio: Collection[str] = (),
) -> list[str]:
    """The variants whose every primary degradation is within its target, once the
    point has run its minimum rounds (and at least MIN_ROUNDS_TO_STOP)."""
    if rounds < max(stats.MIN_ROUNDS_TO_STOP, least):
        return []
    out = []
    for name in values:
        if name == baseline:
            continue
        alone = {baseline: values.get(baseline, {}), name: values[name]}
        met = stats.targets_met(
            alone,
            primary,
            baseline=baseline,
            confidence=repeat.confidence,
            halfwidth_pct=repeat.halfwidth_pct,
            degradation_pp=repeat.degradation_pp,
            ratio=ratio,
        )
        if met:
            out.append(name)
    return out
