"""The cause rule: when a row's difference from the paper counts as explained.

A `[[paper]]` row that misses its table's tolerance names a cause (`because`) and the
row of the same run that shows it (`shown_by`), read one of two ways (`cause_in`):
"paper" (the default), the cause row's change is the move the paper's regime makes from
ours (what ours would gain or lose under the paper's conditions), so it must go from
ours toward the paper's number; "ours", it is the effect of a cause present in ours and
not in the paper's setup, so it must account for ours' distance from the paper's. The
change this needs (`needed`, points of change) is the paper's minus ours, or ours minus
the paper's. The difference counts as explained only when that cause row, on its own,
for this row:

(a) shows an effect in the direction needed: its interval excludes no effect and lies
    on the needed side of 0;
(b) of a size that covers the need within its interval: its far end reaches it (or
    the share of it the row states, `explains`), each a change in % of its own metric;
(c) is not limited by the same non-DUT bottleneck as the row's own baseline (a shaped
    link, the generator, the server, a search's bound: secperf.results.bottleneck),
    nor shares such a limit with its own reference (a comparison that cannot show a
    cost shows no cause either); where its metric is the workload's rate: a delay or a
    CPU cost per unit is not masked by a limit on the rate.

A cause row that fails a clause leaves the row "differs, unexplained", with the clause
named; one the run cannot judge (no rounds to pair, no bottleneck record) leaves it
"not resolved", with the reason. One cause row may serve several rows, but each passes
(a)-(c) for its own need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from secperf.results.bottleneck import NOT_THE_MECHANISM, SHORT


@dataclass(frozen=True)
class Effect:
    """The cause row's change in % (signed as the value moves), with its interval."""

    change: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class Judged:
    """The rule's answer: `explained`, else `resolved` says whether the run could judge
    it (False: not resolved), and `why` names the clause or the reason."""

    explained: bool
    resolved: bool
    why: str


def _pts(x: float) -> str:
    return f"{x:+.1f}"


def _limit_name(limit: Mapping[str, Any]) -> str:
    return str(limit.get("short") or SHORT.get(str(limit.get("kind")), limit.get("kind")))


def same_limit(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Both limited by one and the same thing that is not the mechanism."""
    if not a or not b:
        return False
    kind = a.get("kind")
    return kind in NOT_THE_MECHANISM and kind == b.get("kind") and a.get("host") == b.get("host")


def judge(
    needed: float,
    effect: Effect,
    share: float,
    cause_limit: Mapping[str, Any] | None,
    baseline_limit: Mapping[str, Any] | None,
    cause_comparison: str | None,
    rate: bool = True,
) -> Judged:
    """Clauses (a)-(c) for one row: `needed` is the change the cause must show (points,
    see the module), `share` the part of it, the limits are bottleneck records
    (summary rows' "bottleneck") of the cause row and of the row's own baseline, and
    `cause_comparison` the cause row's own "cannot show" note (None: it can); `rate`
    False: the cause row's metric is not the workload's rate (a delay, a CPU cost per
    unit), which a shared limit on the rate does not mask, so (c) holds."""
    failed: list[str] = []
    c, lo, hi = effect.change, effect.low, effect.high
    if lo is None or hi is None:
        failed.append("(a) it has no interval (one round), so no effect is shown")
    elif lo <= 0 <= hi:
        failed.append("(a) its interval holds 0: it shows no effect")
    elif (c > 0) != (needed > 0):
        failed.append(f"(a) it moves the other way from the {_pts(needed)} points needed")
    need = share * needed
    reach = hi if needed > 0 else lo
    if not failed and reach is not None and abs(reach) < abs(need):
        of = "" if share == 1 else f"{share:.0%} of "
        failed.append(
            f"(b) its interval reaches {_pts(reach)} %, short of {of}the "
            f"{_pts(needed)} points needed"
        )
    if not rate:
        pass
    elif cause_comparison:
        failed.append(f"(c) it cannot show a cost: {cause_comparison}")
    elif same_limit(cause_limit, baseline_limit):
        assert cause_limit is not None
        failed.append(
            f"(c) it is limited by the {_limit_name(cause_limit)}, as the row's own "
            "baseline is: not the mechanism"
        )
    if failed:
        return Judged(False, True, "; ".join(failed))
    if rate and (not cause_limit or not baseline_limit):
        which = "the cause's row" if not cause_limit else "the row's baseline"
        return Judged(False, False, f"(c) no bottleneck record for {which}")
    of = "" if share == 1 else f"{share:.0%} of "
    return Judged(True, True, f"which covers {of}the {_pts(needed)} points needed")
