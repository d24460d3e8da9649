"""The gate of a change review: thresholds checked against intervals, a verdict per
row, an exit code and JUnit XML.

Each expectation (secperf.scenario.expect) matches summary rows by variant (a sweep's
family name matches each of its variants), workload or point, and metric (absent:
every headline metric), and bounds the matched rows' degradation or value. The
**rule** decides with the row's confidence interval (docs/methodology.md, "The
gate"):

- `interval` (the default): a row fails only when its whole interval is past the
  threshold (the breach is measured, not noise); when the interval holds the
  threshold the row is *inconclusive*: it passes, and says so;
- `mean`: a row fails when its mean is past the threshold, whatever the interval.

A matched row with nothing measured (no paired round, a search that found no value,
one round and the interval rule) fails: a gate never passes on a number it does not
have. An expectation that matches no row is an error (GateError), not a pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secperf import stats
from secperf.errors import SecperfError
from secperf.report.answer import headline
from secperf.report.junit import JunitCase, write_junit_file
from secperf.results.metrics import ratio_scale
from secperf.results.rundir import RunDir
from secperf.results.summary import collect
from secperf.scenario.expect import BASELINE, Bound, Expect, Rule
from secperf.tables import fmt_pct, fmt_value, point_name

PASS, FAIL, INCONCLUSIVE, UNMEASURED = "pass", "FAIL", "inconclusive", "not measured"
DEFAULT_RULE: Rule = "interval"
RULE_WORDS = {
    "interval": "a row fails when its whole confidence interval is past the threshold",
    "mean": "a row fails when its mean is past the threshold",
}


class GateError(SecperfError):
    """An expectation that cannot be checked: it names nothing in the run."""


@dataclass(frozen=True)
class Estimate:
    """A figure and its interval; mean None = not measured (`why` says why)."""

    mean: float | None
    low: float | None = None
    high: float | None = None
    why: str = ""


@dataclass(frozen=True)
class Outcome:
    expect: Expect
    rule: Rule
    workload: str
    point: str  # the workload, and the point's label when it is swept
    variant: str
    metric: str
    metric_label: str
    unit: str
    estimate: Estimate
    status: str  # PASS, FAIL, INCONCLUSIVE, UNMEASURED

    def to_json(self) -> dict[str, Any]:
        """The outcome as `--json` prints it."""
        return {
            "expect": self.expect.describe(),
            "rule": self.rule,
            "workload": self.workload,
            "point": self.point,
            "variant": self.variant,
            "metric": self.metric,
            "status": self.status,
            "mean": self.estimate.mean,
            "ci_low": self.estimate.low,
            "ci_high": self.estimate.high,
            "why": self.estimate.why or None,
            "failed": self.failed,
        }

    @property
    def failed(self) -> bool:
        return self.status in (FAIL, UNMEASURED)

    @property
    def subject(self) -> str:
        against = f" vs {self.expect.against}" if self.expect.against else ""
        return f"{self.variant}{against} · {self.point} · {self.metric_label}"

    @property
    def figure(self) -> str:
        e = self.estimate
        if e.mean is None:
            return e.why
        pct = self.expect.degradation is not None
        show = fmt_pct if pct else fmt_value
        unit = " %" if pct else f" {self.unit}"
        text = f"{show(e.mean)}{unit}"
        if e.low is not None and e.high is not None:
            text += f" [{show(e.low)}, {show(e.high)}]"
        return text

    @property
    def what(self) -> str:
        """What is bounded: the degradation, or the metric's value."""
        return "degradation" if self.expect.degradation is not None else self.metric

    @property
    def text(self) -> str:
        line = (
            f"{self.status}: {self.subject}: {self.what} {self.figure}, "
            f"expected {self.expect.bound}"
        )
        if self.status == INCONCLUSIVE:
            line += " (the interval holds the threshold: not a measured breach)"
        return line


def decide(estimate: Estimate, bound: Bound, rule: Rule) -> str:
    """PASS, FAIL, INCONCLUSIVE or UNMEASURED for one figure against one bound."""
    if estimate.mean is None:
        return UNMEASURED
    if rule == "mean":
        return PASS if bound.holds(estimate.mean) else FAIL
    if estimate.low is None or estimate.high is None:
        return UNMEASURED
    inside = [bound.holds(estimate.low), bound.holds(estimate.high)]
    if all(inside):
        return PASS
    if not any(inside):
        return FAIL
    return INCONCLUSIVE


# -- where the figures come from --------------------------------------------------------


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def row_degradation(row: Mapping[str, Any]) -> Estimate:
    mean = _finite(row.get("degradation_pct"))
    if mean is None:
        why = "no degradation: no round paired it with the baseline"
        if row.get("censored_n") and not row.get("n"):
            why = "no degradation: the search found no value"
        return Estimate(None, why=why)
    low, high = _finite(row.get("degradation_ci_low")), _finite(row.get("degradation_ci_high"))
    n = row.get("degradation_n")
    if n is not None and int(n) < stats.MIN_PAIRS_FOR_INTERVAL:
        low = high = None  # a summary written before the rule gave 2 rounds an interval
    if low is None or high is None:
        k = int(n or 1)
        return Estimate(mean, None, None, f"{k} paired round{'' if k == 1 else 's'}, no interval")
    return Estimate(mean, low, high, "")


def row_value(row: Mapping[str, Any]) -> Estimate:
    mean = _finite(row.get("mean"))
    if mean is None:
        return Estimate(None, why="no value measured")
    low, high = _finite(row.get("ci_low")), _finite(row.get("ci_high"))
    return Estimate(mean, low, high, "" if low is not None else "one round, no interval")


@dataclass(frozen=True)
class Figures:
    """What a gate checks against: the rows it matches, and each row's degradation
    (against the baseline, or `against` another variant) and value."""

    rows: Sequence[Mapping[str, Any]]
    degradation: Callable[[Mapping[str, Any], str | None], Estimate]
    value: Callable[[Mapping[str, Any]], Estimate]
    where: str  # the run (or the pair of runs), for messages


def run_figures(
    summary: Mapping[str, Any], run: RunDir | None = None, where: str = "the run"
) -> Figures:
    """A run's summary rows; a degradation against another variant is paired by round
    from the run's records (so it needs `run`)."""
    confidence = float(summary.get("confidence", 0.95))
    values: dict[tuple[str, str, str], Mapping[str, Mapping[int, float]]] = {}

    def degradation(row: Mapping[str, Any], against: str | None) -> Estimate:
        if against is None:
            return row_degradation(row)
        if run is None:
            raise GateError(
                f"{where}: a comparison between two variants needs the run's records",
                fix="check the run directory, not a summary alone",
            )
        if not values:
            values.update({k: g.values for k, g in collect(run).items()})
        key = (str(row["workload"]), str(row["point_id"]))
        mine = values.get((*key, str(row["variant"])), {}).get(str(row["metric"]), {})
        ref = values.get((*key, against), {}).get(str(row["metric"]), {})
        paired = sorted(set(mine) & set(ref))
        if len(paired) < 2 or any(ref[r] == 0 for r in paired):
            return Estimate(None, why=f"{len(paired)} round(s) paired with {against}: no interval")
        d = stats.degradation(
            [ref[r] for r in paired],
            [mine[r] for r in paired],
            higher_is_better=bool(row.get("higher_is_better")),
            confidence=confidence,
            ratio=ratio_scale(str(row.get("metric"))),
        )
        return Estimate(_finite(d.mean), _finite(d.ci_low), _finite(d.ci_high))

    return Figures(list(summary.get("rows") or []), degradation, row_value, where)


def compare_figures(
    rows: Sequence[Mapping[str, Any]],
    summary_b: Mapping[str, Any],
    where: str,
    *,
    allow_different: bool = False,
) -> Figures:
    """A comparison of run B against run A (secperf.report.compare): a row's
    degradation is B's change against A, positive = worse; a value is B's. A row whose
    runs' testbeds differ is refused (not measured) unless `allow_different`."""
    by_key = {
        (r["workload"], r["point_id"], r["variant"], r["metric"]): r
        for r in summary_b.get("rows") or []
    }

    def degradation(row: Mapping[str, Any], against: str | None) -> Estimate:
        if against is not None:
            raise GateError(
                f"{where}: 'vs {against}' compares two variants of one run; a comparison "
                "of two runs compares each row with the same row of run A",
                fix="drop 'vs …', or check it on one run with `secperf report --expect`",
            )
        if row.get("incomparable") and not allow_different:
            return Estimate(None, why=f"not comparable: {row['incomparable']}")
        diff = _finite(row.get("difference_pct"))
        if diff is None:
            return Estimate(None, why="no difference: a mean of 0 in run A")
        sign = -1.0 if row.get("higher_is_better") else 1.0
        lo, hi = _finite(row.get("ci_low")), _finite(row.get("ci_high"))
        if lo is None or hi is None:
            return Estimate(sign * diff, why="fewer than two rounds in a run, no interval")
        low, high = sorted((sign * lo, sign * hi))
        return Estimate(sign * diff, low, high)

    def value(row: Mapping[str, Any]) -> Estimate:
        pid = row.get("point_id_b", row["point_id"])
        own = by_key.get((row["workload"], pid, row["variant"], row["metric"]))
        return row_value(own) if own is not None else Estimate(None, why="not in run B")

    return Figures(rows, degradation, value, where)


# -- matching and checking ---------------------------------------------------------------


def _variant_matches(name: str, variant: str) -> bool:
    return variant == name or variant.startswith(f"{name}[")


def _matches(e: Expect, row: Mapping[str, Any]) -> bool:
    if not _variant_matches(e.variant, str(row.get("variant"))):
        return False
    if e.workload is not None:
        workload, _, index = e.workload.partition("#")
        if row.get("workload") != workload:
            return False
        if index and row.get("point_id") != e.workload:
            return False
    if e.point is not None and str(row.get("label") or "") != e.point:
        return False
    if e.metric is not None:
        return row.get("metric") == e.metric
    return headline(row)


def check_expectations(
    expectations: Sequence[Expect], figures: Figures, default_rule: Rule = DEFAULT_RULE
) -> list[Outcome]:
    """Every matched row of every expectation, judged. Raises GateError for an
    expectation that matches no row."""
    out: list[Outcome] = []
    for e in expectations:
        rows = [r for r in figures.rows if _matches(e, r)]
        if not rows:
            raise GateError(
                f"the expectation {e.describe()!r} matches no row of {figures.where}",
                fix=_hint(e, figures.rows),
            )
        rule: Rule = e.rule or default_rule
        for r in rows:
            if e.degradation is not None:
                estimate = figures.degradation(r, e.against)
            else:
                if e.bound.percent and r.get("unit") != "%":
                    raise GateError(
                        f"the expectation {e.describe()!r} bounds {r.get('metric')} in %, but "
                        f"it is measured in {r.get('unit')}",
                        fix="write the bound in the metric's unit, or bound its degradation",
                    )
                estimate = figures.value(r)
            workload = str(r.get("workload"))
            where = point_name(workload, str(r.get("label") or ""))
            out.append(
                Outcome(
                    expect=e,
                    rule=rule,
                    workload=workload,
                    point=where,
                    variant=str(r.get("variant")),
                    metric=str(r.get("metric")),
                    metric_label=str(r.get("metric_label") or r.get("metric")),
                    unit=str(r.get("unit", "")),
                    estimate=estimate,
                    status=decide(estimate, e.bound, rule),
                )
            )
    return out


def _hint(e: Expect, rows: Sequence[Mapping[str, Any]]) -> str:
    variants = list(dict.fromkeys(str(r.get("variant")) for r in rows if r.get("variant")))
    workloads = list(dict.fromkeys(str(r.get("workload")) for r in rows))
    if not any(_variant_matches(e.variant, v) for v in variants):
        return f"name one of the variants: {', '.join(variants) or 'none'}"
    if e.degradation is not None and e.variant == BASELINE:
        return "the baseline has no degradation; bound its value"
    return (
        f"workloads here: {', '.join(workloads)}; metrics of a workload: see its table "
        "(a degradation without a metric bounds the primary metrics and service demand)"
    )


def failed(outcomes: Sequence[Outcome]) -> bool:
    return any(o.failed for o in outcomes)


def summary_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """The gate in words: the rule, every failure and inconclusive row, the count."""
    if not outcomes:
        return []
    rules = sorted({o.rule for o in outcomes})
    lines = [
        "gate: " + "; ".join(f"rule {r}: {RULE_WORDS[r]}" for r in rules),
    ]
    lines += [o.text for o in outcomes if o.status != PASS]
    bad = sum(o.failed for o in outcomes)
    unsure = sum(o.status == INCONCLUSIVE for o in outcomes)
    lines.append(
        f"gate: {'FAILED' if bad else 'passed'}: {len(outcomes) - bad} of {len(outcomes)} "
        f"row(s) within their thresholds"
        + (f", {unsure} of them inconclusive" if unsure else "")
        + (f", {bad} failed" if bad else "")
    )
    return lines


def junit_cases(outcomes: Sequence[Outcome], suite: str) -> list[JunitCase]:
    """A testcase per checked row, a failure for each failed one."""
    return [
        JunitCase(
            classname=f"secperf.{suite}.{o.workload}",
            name=f"{o.subject}: {o.what} {o.expect.bound}",
            failure=("threshold" if o.status == FAIL else "unmeasured") if o.failed else None,
            message=o.text,
            detail=f"{o.text}\nrule {o.rule}: {RULE_WORDS[o.rule]}",
            note=o.text if o.status == INCONCLUSIVE else None,
        )
        for o in outcomes
    ]


def write_junit(
    path: Path, outcomes: Sequence[Outcome], suite: str, properties: Mapping[str, str]
) -> None:
    write_junit_file(path, junit_cases(outcomes, suite), suite, properties)
