"""The verdict of each `[[paper]]` row: the paper's number beside the run's, and whether
they agree within the table's tolerance, differ with the cause shown by a row of the
same run (the cause rule: secperf.results.cause), differ unexplained, or cannot be told.

The verdicts go into summary.json ("paper", docs/data-format.md); the report prints them
under the tables (secperf.report.paper). A kept run that holds no records is judged again
from its summary rows alone (`rederive`): what needs its rounds (a pairing against another
variant) is "not resolved" with that reason, never a verdict stored under an older rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from secperf import stats
from secperf.results.bracketed import censored_bound
from secperf.results.cause import Effect, judge, same_limit
from secperf.results.metrics import ratio_scale
from secperf.scenario.expect import BASELINE
from secperf.scenario.paper import (
    PaperRow,
    PaperTable,
    Selector,
    Tolerance,
    parse_selector,
    tolerances,
)

AGREES = "agrees"
EXPLAINED = "explained"
DIFFERS = "differs"
UNMEASURED = "not measured"
UNRESOLVED = "not resolved"

# (workload, point_id, variant) -> metric -> round -> value; None: the run kept no rounds
Values = Mapping[tuple[str, str, str], Mapping[str, Mapping[int, float]]]
NO_ROUNDS = "the kept run holds no records.jsonl, so no round can pair it with {}"
KEEP_RECORDS = "a run that keeps its records"
# a kept run's change against another variant, from the two summary rows (no rounds)
UNPAIRED = "unpaired"
MORE_ROUNDS = "more rounds or a quieter machine"


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


def _unpaired(
    row: Mapping[str, Any], against: str, rows: Sequence[Mapping[str, Any]], confidence: float
) -> tuple[float | None, float | None, float | None, str]:
    """A kept run without its rounds: the change against `against` from the two summary
    rows alone, its interval conservative and unpaired (stats.unpaired_ratio); UNPAIRED
    in place of a reason says so."""
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

    def triple(r: Mapping[str, Any]) -> tuple[float, float, int] | None:
        m, s, n = _finite(r.get("mean")), _finite(r.get("stddev")), r.get("n")
        return (m, s, int(n)) if m is not None and s is not None and isinstance(n, int) else None

    mine, ref = triple(row), (triple(other) if other is not None else None)
    got = stats.unpaired_ratio(mine, ref, confidence) if mine and ref else None
    if got is None:
        return None, None, None, NO_ROUNDS.format(against)
    r, lo, hi = got
    return (r - 1) * 100.0, (lo - 1) * 100.0, (hi - 1) * 100.0, UNPAIRED


def _change(
    row: Mapping[str, Any],
    against: str | None,
    values: Values | None,
    confidence: float,
    rows: Sequence[Mapping[str, Any]] | None = None,
) -> tuple[float | None, float | None, float | None, str]:
    """The row's change of value in % (signed as the value moves, not as 'worse'), with
    its interval, against the baseline or another variant paired by round (`values`
    None: a kept run without its rounds, which can pair nothing but the summary's own)."""
    better_up = bool(row.get("higher_is_better"))
    if against is None or against == BASELINE:
        d, lo, hi = (
            _finite(row.get(k))
            for k in ("degradation_pct", "degradation_ci_low", "degradation_ci_high")
        )
        if d is None:
            return None, None, None, "no round paired it with the baseline"
    elif values is None:
        return _unpaired(row, against, rows or (), confidence)
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
    if p.direction is not None:
        return f"{p.direction} (no number)"
    assert p.change is not None
    return f"{p.change:+g} %"


def _limit_of(
    rows: Sequence[Mapping[str, Any]], variant: str, row: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """The bottleneck record of `variant` at `row`'s point (None: none kept)."""
    for other in rows:
        if (
            other.get("variant") == variant
            and other.get("point_id") == row.get("point_id")
            and other.get("metric") == row.get("metric")
        ):
            limit = other.get("bottleneck")
            return limit if isinstance(limit, Mapping) else None
    return None


def _cause(
    p: PaperRow,
    row: Mapping[str, Any],
    gap: float,
    rows: Sequence[Mapping[str, Any]],
    values: Values | None,
    confidence: float,
) -> dict[str, Any]:
    """The cause rule (secperf.results.cause) for one row: the verdict fields."""
    assert p.shown_by is not None
    sel: Selector = parse_selector(p.shown_by, {str(r.get("metric")) for r in rows})
    workload = sel.workload or str(row.get("point_id") or row.get("workload"))
    metric = sel.metric or str(row.get("metric"))
    found = [r for r in rows if _matches(r, sel.variant, workload, None, metric)]
    if not found:  # asserted, not shown
        return {"verdict": DIFFERS, "why": f"{p.shown_by} was not measured in this run"}
    other = found[0]
    c, lo, hi, why = _change(other, sel.against, values, confidence, rows)
    if c is None:
        kind, remedy = (UNRESOLVED, KEEP_RECORDS) if values is None else (DIFFERS, "")
        why = why if values is None else f"the cause's row, {p.shown_by}: {why}"
        return {"verdict": kind, "why": why, "remedy": remedy, "by_cause": True}
    shown = change_text(c, lo, hi, p.ratio is not None) + (" unpaired" if why == UNPAIRED else "")
    baseline = _limit_of(rows, p.against or BASELINE, row)
    cause_limit = other.get("bottleneck")
    comparison = other.get("comparison") if sel.against in (None, BASELINE) else None
    if sel.against not in (None, BASELINE):  # its own reference: the other variant
        ref = _limit_of(rows, sel.against, other)
        if isinstance(cause_limit, Mapping) and same_limit(cause_limit, ref):
            comparison = f"it and {sel.against} are both limited by {cause_limit.get('short')}"
    j = judge(
        gap if p.cause_in == "paper" else -gap,
        Effect(c, lo, hi),
        p.explains,
        cause_limit if isinstance(cause_limit, Mapping) else None,
        baseline,
        str(comparison) if comparison else None,
        rate=bool(other.get("primary")),
    )
    fields = {"shown": shown, "why": j.why}
    if j.explained:
        return {**fields, "verdict": EXPLAINED}
    if j.resolved:
        return {**fields, "verdict": DIFFERS}
    return {
        **fields,
        "verdict": UNRESOLVED,
        "remedy": "a run that keeps its bottleneck records",
        "by_cause": True,
    }


def _bounded(
    p: PaperRow, tol: Tolerance, row: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
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
    paper = p.paper_change or 0.0
    ends = [tol.holds(x, None, None, paper) for x in (low, high)]
    fields: dict[str, Any] = {"ours": ours, "ours_low": low, "ours_high": _finite(high)}
    if all(ends):
        return {**fields, "verdict": AGREES}
    if not any(ends) and not low <= paper <= high:
        return {**fields, "verdict": DIFFERS, "why": f"the bound lies outside {tol}"}
    why = f"the bound reaches both inside and outside {tol}"
    return {**fields, "verdict": UNRESOLVED, "why": why, "remedy": MORE_ROUNDS}


def _gap(p: PaperRow, ours: float, paper_number: float) -> float:
    """The paper's number minus ours, in points of change (a value's: in % of ours)."""
    if p.value is not None:
        return (paper_number - ours) / abs(ours) * 100.0 if ours else math.inf
    return paper_number - ours


def verdict(
    p: PaperRow,
    tol: Tolerance,
    rows: Sequence[Mapping[str, Any]],
    values: Values | None,
    confidence: float,
) -> list[dict[str, Any]]:
    """One verdict per summary row the paper row addresses (one, or one per point),
    judged by its table's tolerance `tol`; `values` None: the run kept no rounds."""
    found = [r for r in rows if _matches(r, p.variant, p.workload, p.point, p.metric)]
    base: dict[str, Any] = {
        "figure": p.figure,
        "row": p.row,
        "variant": p.variant,
        "against": p.against,
        "workload": p.workload,
        "metric": p.metric,
        "compares": "value" if p.value is not None else "change",
        "tolerance": str(tol),
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
            ours, low, high, why = _change(row, p.against, values, confidence, rows)
            paper_number = p.paper_change or 0.0
        if ours is None:
            bounded = _bounded(p, tol, row, rows) if p.value is None else None
            if bounded is None and values is None and why == NO_ROUNDS.format(p.against):
                bounded = {"ours": None, "verdict": UNRESOLVED, "why": why, "remedy": KEEP_RECORDS}
            out.append({**entry, **(bounded or {"ours": None, "verdict": UNMEASURED, "why": why})})
            continue
        text = (
            _value_text(ours, low, high, unit)
            if p.value is not None
            else change_text(ours, low, high, p.ratio is not None)
        )
        if why == UNPAIRED:  # a kept run's: no rounds to pair, a wider interval
            text += " unpaired"
        entry |= {"ours": text, "ours_mean": ours, "ours_low": low, "ours_high": high}
        unresolved = _unresolved(tol, low, high, p.value is not None, paper_number)
        unresolved = unresolved or (
            "" if p.value is not None else tol.sign_unresolved(ours, low, high, paper_number)
        )
        if unresolved:
            out.append({**entry, "verdict": UNRESOLVED, "why": unresolved, "remedy": MORE_ROUNDS})
            continue
        if tol.holds(ours, low, high, paper_number):
            out.append({**entry, "verdict": AGREES})
            continue
        if p.shown_by is None:
            out.append({**entry, "verdict": DIFFERS, "why": ""})
            continue
        gap = _gap(p, ours, paper_number)
        out.append({**entry, **_cause(p, row, gap, rows, values, confidence)})
    return out


def paper_verdicts(
    scenario: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    values: Values | None,
    confidence: float,
) -> list[dict[str, Any]]:
    """Every [[paper]] row of `scenario` (run.json's, or a scenario file's as JSON) with
    its verdict(s), each judged by its table's tolerance ([[paper_table]])."""
    out: list[dict[str, Any]] = []
    try:
        tables = [PaperTable.model_validate(t) for t in scenario.get("paper_table") or []]
    except ValueError as exc:
        tables, broken = [], str(exc)
    else:
        broken = ""
    parsed: list[PaperRow] = []
    for raw in scenario.get("paper") or []:
        try:
            parsed.append(PaperRow.model_validate(raw))
        except ValueError as exc:  # a run.json written by another version
            out.append(
                {
                    "figure": str(raw.get("figure", "?")) if isinstance(raw, Mapping) else "?",
                    "row": str(raw.get("row", "?")) if isinstance(raw, Mapping) else "?",
                    "verdict": UNMEASURED,
                    "why": f"unreadable paper row: {exc}",
                }
            )
    for p, tol in zip(parsed, tolerances(parsed, tables), strict=True):
        if tol is None:
            why = broken or f"no [[paper_table]] declares the tolerance of {p.figure!r}"
            out.append({"figure": p.figure, "row": p.row, "verdict": UNMEASURED, "why": why})
            continue
        out.extend(verdict(p, tol, rows, values, confidence))
    return out


def rederive(summary: Mapping[str, Any], scenario: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The verdicts of `scenario`'s [[paper]] rows judged again, with today's rules, from
    a run's summary.json alone (a kept run without records.jsonl): what needs the
    run's rounds is "not resolved", saying so."""
    rows = [r for r in summary.get("rows") or [] if isinstance(r, Mapping)]
    return paper_verdicts(scenario, rows, None, float(summary.get("confidence") or 0.95))
