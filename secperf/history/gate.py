"""The history gate: `--expect-history` rules checked on the newest run of each series
(docs/history.md, "The history gate"), and their JUnit XML (the layout of
secperf.report.gate's, whose writer is bound to a run's thresholds)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secperf.history.changes import Series, step_between
from secperf.report.gate import FAIL, INCONCLUSIVE, PASS
from secperf.report.junit import JunitCase, write_junit_file

SINCE_CHANGE = "no regression since the last change point"
_RANGE = re.compile(r"^(?:the new run'?s degradation )?within the last (\d+) runs?'? range$")


@dataclass(frozen=True)
class HistoryRule:
    text: str
    last_n: int | None  # None: since the last change point; N: within the last N runs' range

    def describe(self) -> str:
        return SINCE_CHANGE if self.last_n is None else f"within the last {self.last_n} runs' range"


def parse_rule(text: str) -> HistoryRule:
    """One --expect-history text; anything else is a ValueError saying what is accepted."""
    said = " ".join(text.strip().lower().replace("’", "'").split())
    if said == SINCE_CHANGE:
        return HistoryRule(text, None)
    if (m := _RANGE.match(said)) and int(m.group(1)) >= 1:
        return HistoryRule(text, int(m.group(1)))
    raise ValueError(
        f'--expect-history {text!r}: expected {SINCE_CHANGE!r} or "within the last N runs\' range"'
    )


@dataclass
class HistoryOutcome:
    rule: HistoryRule
    series: Series
    status: str  # PASS, FAIL or INCONCLUSIVE
    text: str

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def to_json(self) -> dict[str, Any]:
        s = self.series
        newest = s.points[-1]
        return {
            "expect_history": self.rule.describe(),
            "variant": s.variant,
            "workload": s.workload,
            "point": s.label,
            "metric": s.metric,
            "status": self.status,
            "run_dir": newest.run_dir,
            "mean": newest.mean,
            "ci_low": newest.low,
            "ci_high": newest.high,
            "why": self.text,
            "failed": self.failed,
        }


def _fmt(x: float) -> str:
    return f"{x:+.1f}"


def judge(rule: HistoryRule, s: Series) -> HistoryOutcome:
    """The rule on the series' newest run against the runs before it."""
    new, prior = s.points[-1], s.points[:-1]
    figure = f"{_fmt(new.mean)} % [{_fmt(new.low)}, {_fmt(new.high)}]"
    if not prior:
        return HistoryOutcome(rule, s, INCONCLUSIVE, f"{figure}: no earlier run to compare")
    if rule.last_n is not None:
        ref = prior[-rule.last_n :]
        lo, hi = min(p.low for p in ref), max(p.high for p in ref)
        inside = lo <= new.mean <= hi
        where = "within" if inside else ("above" if new.mean > hi else "below")
        return HistoryOutcome(
            rule,
            s,
            PASS if inside else FAIL,
            f"{figure} is {where} the last {len(ref)} run(s)' range [{_fmt(lo)}, {_fmt(hi)}]",
        )
    at_new = [st for st in s.steps if st.index == len(s.points) - 1]
    if at_new and at_new[0].size > 0:
        st = at_new[0]
        return HistoryOutcome(
            rule,
            s,
            FAIL,
            f"{figure}: a change point at this run, step {_fmt(st.size)} points "
            f"[{_fmt(st.low)}, {_fmt(st.high)}]",
        )
    start = max((st.index for st in s.steps if st.index < len(prior)), default=0)
    ref = prior[start:]
    before, _, half, real = step_between(ref, [new])
    up = new.mean - before
    since = f"since {prior[start].started}" if start else f"over all {len(ref)} run(s)"
    verdict = FAIL if real and up > 0 else PASS
    return HistoryOutcome(
        rule,
        s,
        verdict,
        f"{figure} against {_fmt(before)} % {since}: step {_fmt(up)} points "
        f"[{_fmt(up - half)}, {_fmt(up + half)}]"
        + (
            " (a regression)"
            if verdict == FAIL
            else " (inside the runs' own intervals)"
            if not real
            else ""
        ),
    )


def check_history(rules: Sequence[HistoryRule], series: Sequence[Series]) -> list[HistoryOutcome]:
    return [judge(rule, s) for rule in rules for s in series if s.points]


def junit_cases(outcomes: Sequence[HistoryOutcome], suite: str) -> list[JunitCase]:
    """A testcase per series and rule."""
    return [
        JunitCase(
            classname=f"secperf.{suite}.{o.series.workload}",
            name=f"{o.series.title}: {o.rule.describe()}",
            failure="history" if o.failed else None,
            message=o.text,
            note=o.text if o.status == INCONCLUSIVE else None,
        )
        for o in outcomes
    ]


def write_junit(
    path: Path, outcomes: Sequence[HistoryOutcome], suite: str, properties: dict[str, str]
) -> None:
    write_junit_file(path, junit_cases(outcomes, suite), suite, properties)
