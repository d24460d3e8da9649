"""The verdict of each `[[paper]]` row: the paper's number beside the run's, and whether
they agree, differ with the cause shown by a row of the same run, or differ unexplained.

The verdicts go into summary.json ("paper", docs/data-format.md); the report prints them
under the tables (secperf.report.paper). A difference counts as explained only when the
row named by `shown_by` was measured in the same run: a cause that is only asserted is
printed as asserted and counted as unexplained (docs/methodology.md, "Against the paper").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from secperf import stats
from secperf.results.bracketed import censored_bound
from secperf.results.metrics import ratio_scale
from secperf.scenario.expect import BASELINE
from secperf.scenario.paper import PaperRow, Selector, Tolerance, parse_selector

AGREES = "agrees"
EXPLAINED = "explained"
DIFFERS = "differs"
UNMEASURED = "not measured"
UNRESOLVED = "not resolved"

# (workload, point_id, variant) -> metric -> round -> value
Values = Mapping[tuple[str, str, str], Mapping[str, Mapping[int, float]]]


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def _matches(
    row: Mapping[str, Any], variant: str, workload: str | None, point: str | None, metric: str
) -> bool:
    name = str(row.get("variant"))
    if name != variant and not name.startswith(f"{variant}["):
        return False
    if workload is not None:
        base, _, index = workload.partition("#")
        if row.get("workload") != base or (index and row.get("point_id") != workload):
            return False
    if point is not None and str(row.get("label") or "") != point:
        return False
    return row.get("metric") == metric


def _change(
    row: Mapping[str, Any], against: str | None, values: Values, confidence: float
) -> tuple[float | None, float | None, float | None, str]:
    """The row's change of value in % (signed as the value moves, not as 'worse'), with
    its interval, against the baseline or another variant paired by round."""
    better_up = bool(row.get("higher_is_better"))
    if against is None or against == BASELINE:
        d, lo, hi = (
            _finite(row.get(k))
            for k in ("degradation_pct", "degradation_ci_low", "degradation_ci_high")
        )
        if d is None:
            return None, None, None, "no round paired it with the baseline"
    else:
        key = (str(row.get("workload")), str(row.get("point_id")))
        metric = str(row.get("metric"))
        mine = values.get((*key, str(row.get("variant"))), {}).get(metric, {})
        ref = values.get((*key, against), {}).get(metric, {})
        paired = sorted(set(mine) & set(ref))
        if not paired or any(ref[r] == 0 for r in paired):
            return None, None, None, f"no round paired it with {against}"
        s = stats.degradation(
            [ref[r] for r in paired],
            [mine[r] for r in paired],
            higher_is_better=better_up,
            confidence=confidence,
            ratio=ratio_scale(str(row.get("metric"))),
        )
        d, lo, hi = _finite(s.mean), _finite(s.ci_low), _finite(s.ci_high)
        if d is None:
            return None, None, None, f"no round paired it with {against}"
    if better_up:  # degradation is positive when worse: a drop of the value
        d = -d
        lo, hi = (-hi if hi is not None else None), (-lo if lo is not None else None)
    return d, lo, hi, ""


def _unresolved(
    tol: Tolerance, low: float | None, high: float | None, value: bool, paper: float
) -> str:
    """Why the run's interval is too wide to compare with the paper ("" when it is not):
    it holds the paper's change and cannot tell it from none (the tolerance says how).
    An interval that excludes the paper's change is resolved, however wide."""
    if value or low is None or high is None or not low <= paper <= high:
        return ""
    return tol.unresolved(low, high)


def _num(x: float) -> str:
    a = abs(x)
    if a >= 100 or a == 0:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}" if a < 1 else f"{x:.2f}"


def change_text(c: float, low: float | None, high: float | None, as_ratio: bool) -> str:
    """ "-54.2 % [-58.0, -50.3]" or "×9.70 [×9.12, ×10.3]"."""
    if as_ratio:
        text = f"×{_num(1 + c / 100)}"
        if low is not None and high is not None:
            text += f" [×{_num(1 + low / 100)}, ×{_num(1 + high / 100)}]"
        return text
    text = f"{c:+.1f} %"
    if low is not None and high is not None:
        text += f" [{low:+.1f}, {high:+.1f}]"
    return text


def _value_text(x: float, low: float | None, high: float | None, unit: str) -> str:
    text = f"{_num(x)} {unit}".rstrip()
    if low is not None and high is not None:
        text += f" [{_num(low)}, {_num(high)}]"
    return text


def _paper_text(p: PaperRow, unit: str) -> str:
    if p.value is not None:
        return f"{_num(p.value)} {unit}".rstrip()
    if p.ratio is not None:
        return f"×{_num(p.ratio)}"
    assert p.change is not None
    return f"{p.change:+g} %"


def _shown(
    p: PaperRow,
    row: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    values: Values,
    confidence: float,
    negligible_pct: float,
) -> tuple[str, bool] | None:
    """The shown_by row's change as text, and whether it shows anything: its interval
    excludes no change (an effect), or lies within ±`negligible_pct` (no effect, the
    answer's "no measurable cost"). An interval that holds 0 and reaches past that shows
    neither. None when the row was not measured."""
    assert p.shown_by is not None
    sel: Selector = parse_selector(p.shown_by, {str(r.get("metric")) for r in rows})
    workload = sel.workload or str(row.get("point_id") or row.get("workload"))
    metric = sel.metric or str(row.get("metric"))
    for other in rows:
        if not _matches(other, sel.variant, workload, None, metric):
            continue
        c, lo, hi, _ = _change(other, sel.against, values, confidence)
        if c is None:
            continue
        if lo is None or hi is None:
            shows = False
        elif lo <= 0 <= hi:
            shows = -negligible_pct <= lo and hi <= negligible_pct
        else:
            shows = True
        return change_text(c, lo, hi, p.ratio is not None), shows
    return None


def _bounded(
    p: PaperRow, row: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """A censored comparison's verdict fields: the run's change known only as a bound
    (a found search against one that found no value), judged by the tolerance at both
    of its ends: both hold: agrees; neither, and the paper's change outside it:
    differs; otherwise not resolved. None when nothing bounds it."""
    against = p.against or BASELINE
    other = next(
        (
            r
            for r in rows
            if r.get("variant") == against
            and r.get("point_id") == row.get("point_id")
            and r.get("metric") == row.get("metric")
        ),
        None,
    )
    b = censored_bound(row, other)
    if b is None:
        return None
    r_low, r_high = float(b["ratio_low"]), b["ratio_high"]
    low, high = (r_low - 1) * 100.0, math.inf if r_high is None else (r_high - 1) * 100.0
    if p.ratio is not None:
        ours = f"≥ ×{_num(r_low)}" if r_high is None else f"≤ ×{_num(r_high)}"
        if r_low > 0 and r_high is not None:
            ours = f"×{_num(r_low)} to ×{_num(r_high)}"
    else:
        ours = f"≥ {low:+.1f} %" if r_high is None else f"≤ {high:+.1f} %"
        if r_low > 0 and r_high is not None:
            ours = f"{low:+.1f} to {high:+.1f} %"
    ours += " (bound)"
    tol, paper = p.tolerance_or_default, p.paper_change or 0.0
    ends = [tol.holds(x, None, None, paper) for x in (low, high)]
    fields: dict[str, Any] = {"ours": ours, "ours_low": low, "ours_high": _finite(high)}
    if all(ends):
        return {**fields, "verdict": AGREES}
    if not any(ends) and not low <= paper <= high:
        return {**fields, "verdict": DIFFERS, "why": f"the bound lies outside {tol}"}
    why = f"the bound reaches both inside and outside {tol}"
    return {**fields, "verdict": UNRESOLVED, "why": why}


def verdict(
    p: PaperRow,
    rows: Sequence[Mapping[str, Any]],
    values: Values,
    confidence: float,
    negligible_pct: float,
) -> list[dict[str, Any]]:
    """One verdict per summary row the paper row addresses (one, or one per point);
    `negligible_pct` is the run's precision target (a cause's row within it shows the
    cause's "no effect")."""
    found = [r for r in rows if _matches(r, p.variant, p.workload, p.point, p.metric)]
    base: dict[str, Any] = {
        "figure": p.figure,
        "row": p.row,
        "variant": p.variant,
        "against": p.against,
        "workload": p.workload,
        "metric": p.metric,
        "tolerance": str(p.tolerance_or_default),
        "because": p.because,
        "shown_by": p.shown_by,
        "note": p.note,
    }
    if not found:
        return [
            {
                **base,
                "paper": _paper_text(p, ""),
                "ours": None,
                "verdict": UNMEASURED,
                "why": "no row of this run matches it",
            }
        ]
    out: list[dict[str, Any]] = []
    for row in found:
        unit = str(row.get("unit") or "")
        entry = {
            **base,
            "workload": row.get("workload"),
            "point_id": row.get("point_id"),
            # the paper row addresses several points: each line names its own
            "label": row.get("label") if len(found) > 1 else None,
            "paper": _paper_text(p, unit),
        }
        if p.value is not None:
            ours = _finite(row.get("mean"))
            low, high, why = _finite(row.get("ci_low")), _finite(row.get("ci_high")), ""
            if ours is None:
                why = "no value measured"
            paper_number = p.value
        else:
            ours, low, high, why = _change(row, p.against, values, confidence)
            paper_number = p.paper_change or 0.0
        if ours is None:
            bounded = _bounded(p, row, rows) if p.value is None else None
            out.append({**entry, **(bounded or {"ours": None, "verdict": UNMEASURED, "why": why})})
            continue
        text = (
            _value_text(ours, low, high, unit)
            if p.value is not None
            else change_text(ours, low, high, p.ratio is not None)
        )
        entry |= {"ours": text, "ours_mean": ours, "ours_low": low, "ours_high": high}
        unresolved = _unresolved(
            p.tolerance_or_default, low, high, p.value is not None, paper_number
        )
        if unresolved:
            out.append({**entry, "verdict": UNRESOLVED, "why": unresolved})
            continue
        if p.tolerance_or_default.holds(ours, low, high, paper_number):
            out.append({**entry, "verdict": AGREES})
            continue
        shown = _shown(p, row, rows, values, confidence, negligible_pct) if p.shown_by else None
        if shown is not None and shown[1]:
            out.append({**entry, "verdict": EXPLAINED, "shown": shown[0]})
        elif shown is not None:
            why = (
                f"the cause's row, {p.shown_by}: {shown[0]}, holds no change and reaches "
                f"past ±{negligible_pct:g} %: it shows neither an effect nor its absence"
            )
            out.append({**entry, "verdict": DIFFERS, "why": why})
        else:
            why = f"{p.shown_by} was not measured in this run" if p.shown_by else ""
            out.append({**entry, "verdict": DIFFERS, "why": why})
    return out


def paper_verdicts(
    scenario: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    values: Values,
    confidence: float,
    negligible_pct: float,
) -> list[dict[str, Any]]:
    """Every [[paper]] row of the run's scenario (run.json) with its verdict(s), judged
    with the run's precision target `negligible_pct` (verdict)."""
    out: list[dict[str, Any]] = []
    for raw in scenario.get("paper") or []:
        try:
            p = PaperRow.model_validate(raw)
        except ValueError as exc:  # a run.json written by another version
            out.append(
                {
                    "figure": str(raw.get("figure", "?")) if isinstance(raw, Mapping) else "?",
                    "row": str(raw.get("row", "?")) if isinstance(raw, Mapping) else "?",
                    "verdict": UNMEASURED,
                    "why": f"unreadable paper row: {exc}",
                }
            )
            continue
        out.extend(verdict(p, rows, values, confidence, negligible_pct))
    return out
