"""A degradation's interval that missed its precision target: by how much, after how
many rounds, why the rounds stopped, and about how much longer would have reached it.

A paired interval's half width shrinks about as 1 / sqrt(n) (stats.rounds_to_target);
the time a round takes is the point's own (run.json `stops[].rounds_s` over its
rounds). Reads summary rows' fields only, so a summary written before this reads alike
(without `stop_rounds_s` the estimate is in rounds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from secperf import stats

# run.json stop reasons, as a shortfall says them
REASONS = {
    "budget_spent": "budget spent",
    "max_reached": "round cap reached",
    "unpaired": "nothing paired",
    "failed": "the point failed",
}


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def shortfall(row: Mapping[str, Any], target_pp: float) -> dict[str, Any] | None:
    """How a variant row's degradation interval missed ±`target_pp` points (None: met,
    no interval, or not a primary metric: the target is the stopping rule's, and a
    service demand is none): `target_pp`, `halfwidth_pp` (the larger side), `rounds`
    (paired), `reason` (why the point stopped, in words), `more_rounds` and `more_s`
    (None when the rounds' time is unknown), and `text`, the line the answer prints."""
    pct = _num(row.get("degradation_pct"))
    low, high = _num(row.get("degradation_ci_low")), _num(row.get("degradation_ci_high"))
    n = int(row.get("degradation_n") or 0)
    if pct is None or low is None or high is None or n < stats.MIN_PAIRS_FOR_INTERVAL:
        return None
    if not row.get("primary"):
        return None
    half = _num(row.get("degradation_halfwidth_pp"))
    if half is None:
        half = stats.halfwidth_pp(pct, low, high)
    if target_pp <= 0 or half <= target_pp:
        return None
    more = stats.rounds_to_target(n, half, target_pp)
    seconds, reps = _num(row.get("stop_rounds_s")), int(row.get("stop_reps") or 0)
    said = REASONS.get(str(row.get("stop_reason") or ""))
    out: dict[str, Any] = {
        "target_pp": target_pp,
        "halfwidth_pp": half,
        "rounds": n,
        "reason": said,
        "more_rounds": more,
        "more_s": more * seconds / reps if seconds is not None and reps > 0 else None,
    }
    out["text"] = shortfall_text(out)
    return out


def duration_text(seconds: float) -> str:
    """ "about 9 min", "about 1.5 h": a rough time, said as rough."""
    minutes = seconds / 60.0
    if minutes < 1.5:
        return "about 1 min"
    if minutes < 90:
        return f"about {round(minutes)} min"
    hours = minutes / 60.0
    return f"about {hours:.1f} h" if hours < 3 else f"about {round(hours)} h"


def shortfall_text(s: Mapping[str, Any]) -> str:
    """ "target ±2 not met: ±5.3 after 12 rounds (budget spent); about 9 min more would
    reach it"."""
    why = f" ({s['reason']})" if s.get("reason") else ""
    head = (
        f"target ±{float(s['target_pp']):g} not met: ±{float(s['halfwidth_pp']):.1f} "
        f"after {int(s['rounds'])} rounds{why}"
    )
    more_s = s.get("more_s")
    if isinstance(more_s, int | float):
        return f"{head}; {duration_text(float(more_s))} more would reach it"
    more = int(s.get("more_rounds") or 0)
    return f"{head}; about {more} more round{'' if more == 1 else 's'} would reach it"


def planned_precision(
    precision: Mapping[str, Any] | None, rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The run's precision plan (run.json `precision`) beside what it reached: the
    forecast said before the first round, each planned point's test duration and why,
    and the widest half width the primary degradations reached (`reached_pp`)."""
    if not isinstance(precision, Mapping) or not isinstance(precision.get("forecast"), Mapping):
        return None
    forecast = dict(precision["forecast"])
    planned = {
        str(p.get("point_id")): p for p in precision.get("points") or [] if isinstance(p, Mapping)
    }
    widths = [
        h
        for r in rows
        if r.get("primary") and r.get("variant") != "baseline" and r.get("point_id") in planned
        for h in [_num(r.get("degradation_halfwidth_pp"))]
        if h is not None
    ]
    reached = max(widths) if widths else None
    said = f"planned before the run: {forecast.get('text')}"
    if reached is not None:
        said += f"; reached ±{reached:.1f}"
    return {
        "forecast": forecast,
        "points": [
            {
                "point_id": pid,
                "duration": p.get("duration"),
                "pinned": p.get("pinned"),
                "why": p.get("why"),
                "source": p.get("source"),
            }
            for pid, p in planned.items()
        ],
        "reached_pp": reached,
        "text": said,
    }
