"""The answer first: one verdict per variant and headline metric (the forest plot of
them is secperf.report.forest).

A verdict reads a summary row's paired degradation and its interval by one rule
(docs/methodology.md, "Verdicts"), with x the run's precision target
(`[repeat] halfwidth_pct`):

- the interval excludes 0: the variant **costs** that much (or does **better**);
- it includes 0 and lies within ±x: **no measurable cost** (|Δ| < x %);
- it includes 0 and reaches past ±x: **not resolved** (the interval is too wide to
  tell a cost from none);
- no interval: fewer than three paired rounds ("2 rounds: no interval"), or **not
  measured** (a search that found no value, a baseline of 0), never a 0;
- a found search value against a censored one ("at least", "below"): a **bound**
  ("at most 0.20 × the baseline's, which was not denied up to 71,681"), costing,
  better or not resolved by what the bound excludes.

A row whose interval is wider than its target says so on its line, with its rounds,
why they stopped and about how much longer would reach it (secperf.results.shortfall).

Headline metrics are each kind's primary metrics and its service demand (CPU per
unit of work). A row's `bottleneck` (what limited it), when the summary has one, is
shown beside its verdict; a row without one shows nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from secperf import stats
from secperf.report.limits import CANNOT
from secperf.report.tags import tag_name, variant_tags
from secperf.results.bracketed import censored_bound
from secperf.results.metrics import censored_words
from secperf.results.shortfall import shortfall, shortfall_text
from secperf.tables import (
    BASELINE,
    MISSED,
    Row,
    censored_text,
    failed_text,
    fmt_bound,
    fmt_pct,
    fmt_value,
    noted_count,
    point_name,
    value_cell,
)

COST, BETTER, NONE, UNRESOLVED, UNMEASURED = "cost", "better", "none", "unresolved", "unmeasured"
DEFAULT_NEGLIGIBLE_PCT = 2.0  # the scenario default of [repeat] halfwidth_pct


def headline(row: Row) -> bool:
    """A kind's primary metric, or service demand (CPU per unit of work)."""
    return bool(row.get("primary")) or str(row.get("metric", "")).startswith("sd_")


@dataclass(frozen=True)
class Verdict:
    """What one variant does to one headline metric at one workload point."""

    variant: str
    workload: str
    point_id: str
    where: str  # the workload, and the point's label when the workload is swept
    metric: str
    metric_label: str
    outcome: str  # COST, BETTER, NONE, UNRESOLVED or UNMEASURED
    pct: float | None
    low: float | None
    high: float | None
    pairs: int
    negligible_pct: float
    bottleneck: str | None = None
    why: str = ""  # for UNMEASURED: what is missing
    # SHOULD criteria the variant's or the baseline's rounds missed: the numbers stand,
    # the reader is told (RFC 9411's deviations)
    noted: str = ""
    # a censored comparison: what the bound says ("…, at most 0.20 × the baseline's, …")
    bound: str = ""
    # the interval missed the precision target: by how much and what would reach it
    shortfall: str = ""
    # too few paired rounds for an interval: `why` is the whole verdict
    no_interval: bool = False

    @property
    def interval(self) -> str:
        if self.low is None or self.high is None:
            return ""
        return f"[{fmt_bound(self.low)}, {fmt_bound(self.high)}]"

    @property
    def text(self) -> str:
        """The verdict in words, e.g. "costs +25.0 % [+24.1, +25.9]", and the SHOULD
        criteria its rounds missed, and the precision target it missed."""
        text = f"{self._outcome_text} ({self.noted})" if self.noted else self._outcome_text
        return f"{text}; {self.shortfall}" if self.shortfall else text

    @property
    def _outcome_text(self) -> str:
        if self.bound:
            word = {COST: "costs", BETTER: "better"}.get(self.outcome, "not resolved")
            return f"{word}: {self.bound}"
        if self.outcome == COST:
            return f"costs {fmt_pct(self.pct)} % {self.interval}"
        if self.outcome == BETTER:
            return f"better: Δ {fmt_pct(self.pct)} % {self.interval}"
        if self.outcome == NONE:
            return f"no measurable cost (|Δ| < {self.negligible_pct:g} %) {self.interval}"
        if self.outcome == UNRESOLVED:
            assert self.low is not None and self.high is not None and self.pct is not None
            half = stats.halfwidth_pp(self.pct, self.low, self.high)
            return f"not resolved: {fmt_pct(self.pct)} % ± {half:.1f} points {self.interval}"
        return self.why if self.no_interval else f"not measured: {self.why}"

    @property
    def limited_by(self) -> str:
        if not self.bottleneck:
            return ""
        if self.bottleneck.startswith(NO_LIMIT):
            return self.bottleneck  # "limit not measured", never "limited by not measured"
        return f"limited by {self.bottleneck}"


def negligible_pct(summary: Mapping[str, Any]) -> float:
    """x of the rule: the run's precision target for a degradation, [repeat]
    degradation_pp (a Δ % is judged in its own unit), else (a summary written before
    that target existed) [repeat] halfwidth_pct."""
    for key in ("degradation_target_pp", "halfwidth_target_pct"):
        target = summary.get(key)
        if isinstance(target, int | float) and math.isfinite(target) and target > 0:
            return float(target)
    return DEFAULT_NEGLIGIBLE_PCT


def judge(row: Row, x: float) -> tuple[str, str]:
    """(outcome, why) of one variant row by the rule above."""
    pct, lo, hi = (
        row.get("degradation_pct"),
        row.get("degradation_ci_low"),
        row.get("degradation_ci_high"),
    )
    if pct is None:
        if (failed := failed_text(row)) and not row.get("n"):
            return UNMEASURED, failed  # its validation criteria, not a number
        censored = int(row.get("censored_n") or 0)
        if censored and not row.get("n"):
            return UNMEASURED, "the search found no value (see its table)"
        base = row.get("baseline_mean")
        if base == 0:
            return UNMEASURED, "the baseline measured 0: a cost in % is undefined"
        return UNMEASURED, "no round paired it with the baseline"
    if lo is None or hi is None or not has_interval(row):
        return UNMEASURED, no_interval_text(row)
    if lo > 0:
        return COST, ""
    if hi < 0:
        return BETTER, ""
    if -x < lo and hi < x:
        return NONE, ""
    return UNRESOLVED, ""


def has_interval(row: Row) -> bool:
    """Enough paired rounds for an interval (a summary written before the rule gave one
    to 2 rounds: ±85 points that said nothing)."""
    n = row.get("degradation_n")
    return n is None or int(n) >= stats.MIN_PAIRS_FOR_INTERVAL


def no_interval_text(row: Row) -> str:
    """ "2 rounds: no interval (Δ +3.1 %)"."""
    n = int(row.get("degradation_n") or 1)
    return (
        f"{n} round{'' if n == 1 else 's'}: no interval (Δ {fmt_pct(row.get('degradation_pct'))} %)"
    )


def _ratio(x: float) -> str:
    return f"{x:.2f}" if x < 10 else fmt_value(x)


def bound_verdict(row: Row, base: Row | None) -> tuple[str, str] | None:
    """(outcome, words) of a censored comparison: a found value against a censored one,
    as a bound on the ratio ("9,819 [6,223–9,819] packets/s, at most 0.11 × the
    baseline's, which was not denied up to 87,758"); None when it bounds nothing."""
    b = row.get("degradation_bound")
    if not isinstance(b, Mapping) and row.get("degradation_pct") is None:
        b = censored_bound(row, base)
    if not isinstance(b, Mapping) or base is None:
        return None
    r_low, r_high, low, high = (b.get(k) for k in ("ratio_low", "ratio_high", "low", "high"))
    if r_high is not None and r_low:
        ratio = f"between {_ratio(r_low)} and {_ratio(r_high)} ×"
    elif r_high is not None:
        ratio = f"at most {_ratio(r_high)} ×"
    else:
        ratio = f"at least {_ratio(r_low or 0.0)} ×"
    unit = str(row.get("unit") or "")
    words = f"{_found(row).removesuffix(MISSED)} {unit}".rstrip()
    words += f", {ratio} the baseline's, which was "
    words += (
        f"{_found(base).removesuffix(MISSED)} {unit}".rstrip() if base.get("n") else _found(base)
    )
    outcome = UNRESOLVED
    if low is not None and low > 0:
        outcome = COST
    elif high is not None and high < 0:
        outcome = BETTER
    return outcome, words


def _found(row: Row) -> str:
    """What a search row found in words ("not found down to 500", "at least 8,127"), or
    its value."""
    words = censored_words(str(row.get("metric")))
    if int(row.get("censored_n") or 0) and not row.get("n"):
        return censored_text(row, words)
    return value_cell(row, words).text


def _why(row: Row, why: str, base: Row | None) -> str:
    """`why` with what a search found where it found no value: the variant's bound, and
    the baseline's bound or value, so that an answer without a number still says what
    is known."""
    if base is not None and (failed := failed_text(base)) and not base.get("n"):
        why += f" (baseline {failed})"
    searched = row.get("search") is not None or (base or {}).get("search") is not None
    if not searched:
        return why
    mine = int(row.get("censored_n") or 0) and not row.get("n")
    if mine:
        why = f"the search found no value: {_found(row)}"
    if base is not None and (mine or (int(base.get("censored_n") or 0) and not base.get("n"))):
        why += f" (baseline: {_found(base)})"
    return why


def _noted(row: Row, base: Row | None) -> str:
    """How many rounds of the variant and of the baseline missed a SHOULD criterion,
    in short (the tables say which criterion, by how much)."""
    notes = [noted_count(row)]
    if base is not None and (count := noted_count(base)):
        notes.append(f"baseline {count}")
    return "; ".join(n for n in notes if n)


def _where(row: Row) -> str:
    return point_name(str(row.get("workload", "")), str(row.get("label") or ""))


def verdicts(summary: Mapping[str, Any]) -> list[Verdict]:
    """Every variant's verdicts, in the summary's order (variants as the scenario lists
    them, a sweep's variants by their swept value)."""
    x = negligible_pct(summary)
    rows = [r for r in summary.get("rows") or [] if r.get("variant") != BASELINE and headline(r)]
    order = list(dict.fromkeys(str(r["variant"]) for r in rows))
    bases = {
        (r.get("workload"), r.get("point_id"), r.get("metric")): r
        for r in summary.get("rows") or []
        if r.get("variant") == BASELINE
    }
    out: list[Verdict] = []
    for variant in order:
        for r in (r for r in rows if r["variant"] == variant):
            outcome, why = judge(r, x)
            base = bases.get((r.get("workload"), r.get("point_id"), r.get("metric")))
            bounded = bound_verdict(r, base) if outcome == UNMEASURED else None
            if bounded is not None:
                outcome, bound = bounded
            elif outcome == UNMEASURED:
                why, bound = _why(r, why, base), ""
            else:
                bound = ""
            short = shortfall(r, x) if outcome != UNMEASURED else None
            lacking = outcome == UNMEASURED and r.get("degradation_pct") is not None
            out.append(
                Verdict(
                    variant=variant,
                    workload=str(r.get("workload", "")),
                    point_id=str(r.get("point_id", "")),
                    where=_where(r),
                    metric=str(r.get("metric", "")),
                    metric_label=str(r.get("metric_label") or r.get("metric", "")),
                    outcome=outcome,
                    pct=None if bound else r.get("degradation_pct"),
                    low=None if bound or lacking else r.get("degradation_ci_low"),
                    high=None if bound or lacking else r.get("degradation_ci_high"),
                    pairs=int(r.get("degradation_n") or 0),
                    negligible_pct=x,
                    bottleneck=_limit(r),
                    why=why,
                    noted=_noted(r, base),
                    bound=bound,
                    shortfall=shortfall_text(short) if short else "",
                    no_interval=lacking,
                )
            )
    return out


def with_verdicts(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `summary` whose judged rows carry their verdict: `verdict` (cost, better,
    none, unresolved, unmeasured) and `verdict_text` (the answer's words), for the JSON and
    CSV outputs; other rows (the baseline, non-headline metrics) carry neither."""
    judged = {(v.variant, v.workload, v.point_id, v.metric): v for v in verdicts(summary)}
    rows = []
    for row in summary.get("rows") or []:
        v = judged.get(
            (row.get("variant"), row.get("workload"), row.get("point_id"), row.get("metric"))
        )
        rows.append({**row, "verdict": v.outcome, "verdict_text": v.text} if v else dict(row))
    return {**summary, "rows": rows}


def baseline_only(summary: Mapping[str, Any]) -> list[Row]:
    """Headline rows of points that measured no variant beside the baseline: nothing
    to judge, so the answer gives their value."""
    rows = [r for r in summary.get("rows") or [] if headline(r)]
    judged = {(r["workload"], r["point_id"]) for r in rows if r.get("variant") != BASELINE}
    return [
        r
        for r in rows
        if r.get("variant") == BASELINE and (r["workload"], r["point_id"]) not in judged
    ]


def value_text(row: Row) -> str:
    """A value with its interval and unit: "20,853 [19,100–22,600] trans/s"."""
    mean, lo, hi = row.get("mean"), row.get("ci_low"), row.get("ci_high")
    if mean is None:
        return "not measured"
    interval = f" [{fmt_value(lo)}–{fmt_value(hi)}]" if lo is not None and hi is not None else ""
    return f"{fmt_value(mean)}{interval} {row.get('unit', '')}".rstrip()


def _text(x: Any) -> str | None:
    return str(x) if x not in (None, "") else None


NO_LIMIT = "limit not measured"


def _limit(row: Row) -> str | None:
    """What limited a row, in short (the tables have it in full), marked ‼ when the
    baseline and the variant hit the same limit outside the DUT, so that the
    comparison cannot show the mechanism's cost."""
    b = row.get("bottleneck")
    if isinstance(b, Mapping) and b.get("kind") == "not_measured":
        return NO_LIMIT
    short = _text(b.get("short") or b.get("text")) if isinstance(b, Mapping) else _text(b)
    if short is None:
        return None
    return f"{short} {CANNOT}" if row.get("comparison") else short


@dataclass(frozen=True)
class CheckVerdict:
    variant: str
    workload: str
    passed: int
    rounds: int

    @property
    def ok(self) -> bool:
        return self.rounds > 0 and self.passed == self.rounds

    @property
    def text(self) -> str:
        held = "every check held" if self.ok else "a check FAILED"
        return f"{held}: {self.passed}/{self.rounds} rounds"


def check_verdicts(summary: Mapping[str, Any]) -> list[CheckVerdict]:
    """Pass/fail checks (failclosed, …) per variant and workload."""
    return [
        CheckVerdict(
            str(e.get("variant")),
            str(e.get("workload")),
            int(e.get("passed_rounds") or 0),
            int(e.get("rounds") or 0),
        )
        for e in summary.get("checks") or []
    ]


def precision_line(summary: Mapping[str, Any]) -> str | None:
    """The noise calibration's forecast said again beside what the run reached, and
    each planned test duration with why (None: the run planned nothing)."""
    planned = summary.get("precision")
    if not isinstance(planned, Mapping) or not planned.get("text"):
        return None
    tests = "; ".join(
        f"{p.get('point_id')} {p.get('why')}"
        for p in planned.get("points") or []
        if isinstance(p, Mapping) and p.get("why")
    )
    return f"Precision {planned['text']}" + (f" (tests: {tests})" if tests else "")


def rule_text(summary: Mapping[str, Any]) -> str:
    """The rule, in one sentence, for the head of the answer."""
    conf = float(summary.get("confidence", 0.95)) * 100
    x = negligible_pct(summary)
    baseline = {"forward": "a plain forwarding DUT", "direct": "the direct path"}.get(
        str(summary.get("baseline", "forward")), str(summary.get("baseline"))
    )
    return (
        f"Δ = cost against the baseline ({baseline}), positive = worse, [{conf:g} % interval, "
        f"paired by round]; no measurable cost = the interval holds 0 and lies within "
        f"±{x:g} % (the run's precision target); not resolved = it holds 0 but reaches past it"
        + (
            f"; {CANNOT} = the baseline and the variant hit the same limit outside the DUT, "
            "so the comparison cannot show the mechanism's cost (the tables say what to change)"
            if any(r.get("comparison") for r in summary.get("rows") or [])
            else ""
        )
    )


def descriptions(run_meta: Mapping[str, Any]) -> dict[str, str]:
    """Variant name -> its description; a swept variant takes its family's."""
    scenario: Mapping[str, Any] = run_meta.get("scenario") or {}
    out: dict[str, str] = {}
    for name, variant in (scenario.get("variants") or {}).items():
        if isinstance(variant, Mapping) and variant.get("description"):
            out[str(name)] = str(variant["description"])
    for name, info in (run_meta.get("variant_sweeps") or {}).items():
        family = str((info or {}).get("family", ""))
        if family in out:
            out.setdefault(str(name), out[family])
    return out


# -- the answer in the terminal ------------------------------------------------------------

_STYLES = {
    COST: "bold red",
    BETTER: "bold green",
    NONE: "",
    UNRESOLVED: "yellow",
    UNMEASURED: "dim",
}
COLLAPSE_ABOVE = 30  # verdict lines past this: a sweep's points in one line each metric


def _range_line(group: Sequence[Verdict]) -> str:
    """A metric over a sweep's points in one line: the range of the costs, and how many
    points had each verdict."""
    found = [v.pct for v in group if v.outcome in (COST, BETTER) and v.pct is not None]
    counts: dict[str, int] = {}
    for v in group:
        key = "no interval" if v.no_interval else v.outcome
        counts[key] = counts.get(key, 0) + 1
    words = {
        COST: "cost",
        BETTER: "better",
        NONE: "no measurable cost",
        UNRESOLVED: "not resolved",
        "no interval": "without an interval",
        UNMEASURED: "not measured",
    }
    parts = [f"{counts[k]} {word}" for k, word in words.items() if k in counts]
    span = ""
    if found:
        low, high = fmt_pct(min(found)), fmt_pct(max(found))
        span = f"Δ {low} %; " if low == high else f"Δ from {low} to {high} %; "
    return f"over {len(group)} points: {span}" + ", ".join(parts)


def shared_limit(mine: Sequence[Verdict]) -> str:
    """The limit every verdict of one variant shares ("limited by one CPU"), said once
    beside the variant instead of on each line; "" when they differ or there is one."""
    limits = {v.limited_by for v in mine}
    return next(iter(limits)) if len(mine) > 1 and len(limits) == 1 else ""


def answer_tables(summary: Mapping[str, Any], run_meta: Mapping[str, Any]) -> list[Any]:
    """The answer as rich renderables, one block each: the rule, then per variant its
    verdict lines (a sweep's points collapsed into one line a metric when there are
    many)."""
    found = verdicts(summary)
    checks = check_verdicts(summary)
    alone = baseline_only(summary)
    if not found and not checks and not alone:
        return []
    about = descriptions(run_meta)
    tags = variant_tags(run_meta)
    collapse = len(found) > COLLAPSE_ABOVE
    out: list[Any] = [Text("The answer — " + rule_text(summary), style="bold")] if found else []
    planned = precision_line(summary)
    if planned is not None:
        out.append(Text(planned))
    for variant in dict.fromkeys([*(v.variant for v in found), *(c.variant for c in checks)]):
        grid = Table.grid(padding=(0, 2))
        for _ in range(4):
            grid.add_column(no_wrap=False)
        mine = [v for v in found if v.variant == variant]
        once = shared_limit(mine)
        groups: dict[tuple[str, str], list[Verdict]] = {}
        for v in mine:
            key = (v.workload, v.metric) if collapse else (v.point_id, v.metric)
            groups.setdefault(key, []).append(v)
        for group in groups.values():
            first = group[0]
            if len(group) == 1:
                grid.add_row(
                    Text("  " + first.where),
                    Text(first.metric_label),
                    Text(first.text, style=_STYLES.get(first.outcome, "")),
                    Text("" if once else first.limited_by, style="dim"),
                )
            else:
                named = {v.bottleneck for v in group if v.bottleneck}
                limits = sorted(named - {NO_LIMIT})
                grid.add_row(
                    Text("  " + first.workload),
                    Text(first.metric_label),
                    Text(_range_line(group)),
                    Text(
                        ""
                        if once
                        else (
                            f"limited by {', '.join(limits)}"
                            if limits
                            else (NO_LIMIT if named else "")
                        ),
                        style="dim",
                    ),
                )
        for c in (c for c in checks if c.variant == variant):
            grid.add_row(
                Text("  " + c.workload),
                Text("checks"),
                Text(c.text, style="" if c.ok else "bold red"),
                Text(""),
            )
        what = f": {_first_line(about[variant])}" if variant in about else ""
        name = tag_name(variant, tags)
        head = Text(f"{name}{what}", style="bold")
        if once:
            head.append(f"  ({once}: every line)", style="dim")
        out.append(Group(head, grid))
    if alone:
        grid = Table.grid(padding=(0, 2))
        for r in alone:
            grid.add_row(
                Text("  " + _where(r)),
                Text(str(r.get("metric_label") or r.get("metric"))),
                Text(value_text(r)),
            )
        out.append(Group(Text("measured on the baseline alone (no variant beside it)"), grid))
    return out


def _first_line(text: str, width: int = 100) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"
