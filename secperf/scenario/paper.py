"""The scenario's `[[paper]]` rows: the source paper's numbers beside the run's.

A scenario that reproduces a paper says, per row of the paper's tables and per point
of its figures, which of its own rows answers it, the paper's number, and how close
counts as agreeing; where ours is expected to differ, the cause (`because`) and the
row of the same run that shows it (`shown_by`). secperf.report.paper gives each a
verdict; docs/methodology.md ("Against the paper") explains the rules.

    [[paper]]
    figure = "Table I"
    row = "1000 entries"
    variant = "acl-1000"
    workload = "latency"        # or "latency#2" (one point), as [[expect]]
    metric = "latency_mean"
    change = "+920%"            # or ratio = 10.2, or value = 3.38 (the metric's unit)
    tolerance = "x2"            # "xF", "Npp", "direction"; for value "xF" or "N%"
    because = "..."             # optional, with shown_by = "VARIANT [WORKLOAD[#i]] [METRIC]"
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar

from pydantic import PlainSerializer, PlainValidator, model_validator

from secperf.scenario.expect import BASELINE, Bound, Expect, problems
from secperf.schema.fields import StrictModel
from secperf.schema.units import plain_number, toml_repr

_TOLERANCE = re.compile(
    r"^\s*(?:(?P<factor>[x×])\s*(?P<f>\d+\.?\d*)|(?P<pp>\d+\.?\d*)\s*pp|(?P<rel>\d+\.?\d*)\s*%"
    r"|(?P<direction>direction))\s*$"
)
_WORDS = re.compile(r"[^\s\[]*\[[^\]]*\]\S*|\S+")
_CHANGE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+))\s*%?\s*$")


@dataclass(frozen=True)
class Tolerance:
    """How close counts as agreeing; each form is a subclass that says, as data, what it
    compares (changes, values) and, as methods, when ours agrees with the paper's and
    when our interval is too wide to tell."""

    amount: float = 0.0
    compares_changes: ClassVar[bool] = True
    compares_values: ClassVar[bool] = False
    holds_for_zero: ClassVar[bool] = False  # can it judge a paper's change of 0?

    def holds(self, ours: float, low: float | None, high: float | None, paper: float) -> bool:
        raise NotImplementedError

    def unresolved(self, low: float, high: float) -> str:
        """Why an interval that holds the paper's number cannot be judged ("": it can)."""
        return "its interval holds 0: no change told from none" if low <= 0 <= high else ""


@dataclass(frozen=True)
class Factor(Tolerance):
    """ "x2": ours within a factor of the paper's, on the same side of 0."""

    compares_values: ClassVar[bool] = True

    def __str__(self) -> str:
        return f"x{plain_number(self.amount)}"

    def holds(self, ours: float, low: float | None, high: float | None, paper: float) -> bool:
        if ours == 0 or paper == 0 or (ours > 0) != (paper > 0):
            return False
        return 1 / self.amount <= ours / paper <= self.amount


@dataclass(frozen=True)
class Points(Tolerance):
    """ "5pp": our change within so many percentage points of the paper's."""

    holds_for_zero: ClassVar[bool] = True

    def __str__(self) -> str:
        return f"{plain_number(self.amount)}pp"

    def holds(self, ours: float, low: float | None, high: float | None, paper: float) -> bool:
        return abs(ours - paper) <= self.amount

    def unresolved(self, low: float, high: float) -> str:
        if (high - low) / 2 > self.amount:
            return f"its interval is wider than ±{plain_number(self.amount)} points"
        return ""


@dataclass(frozen=True)
class Relative(Tolerance):
    """ "10%": our value within so many % of the paper's."""

    compares_changes: ClassVar[bool] = False
    compares_values: ClassVar[bool] = True

    def __str__(self) -> str:
        return f"{plain_number(self.amount)}%"

    def holds(self, ours: float, low: float | None, high: float | None, paper: float) -> bool:
        return abs(ours - paper) <= abs(paper) * self.amount / 100.0


@dataclass(frozen=True)
class Direction(Tolerance):
    """ "direction": our whole interval on the paper's side of 0 (the mean alone with one
    round)."""

    def __str__(self) -> str:
        return "direction"

    def holds(self, ours: float, low: float | None, high: float | None, paper: float) -> bool:
        if paper > 0:
            return (low if low is not None else ours) > 0
        return (high if high is not None else ours) < 0


def parse_tolerance(value: object) -> Tolerance:
    if isinstance(value, Tolerance):
        return value
    match = _TOLERANCE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(
            'expected a tolerance: "x2" (within a factor of 2), "5pp" (within 5 percentage '
            f'points), "10%" (a value within 10 %) or "direction"; got {toml_repr(value)}'
        )
    if match.group("factor"):
        factor = float(match.group("f"))
        if factor <= 1:
            raise ValueError(f"a factor tolerance must be above 1, got {toml_repr(value)}")
        return Factor(factor)
    if match.group("pp"):
        return Points(float(match.group("pp")))
    if match.group("rel"):
        return Relative(float(match.group("rel")))
    return Direction()


def parse_change(value: object) -> float:
    """ "-54%" -> -54.0 (a number alone is read as %)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    match = _CHANGE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(
            f'expected the paper\'s change in %, signed as it prints it ("-54%", "+920%"), '
            f"got {toml_repr(value)}"
        )
    return float(match.group(1))


ToleranceField = Annotated[Tolerance, PlainValidator(parse_tolerance), PlainSerializer(str)]
Change = Annotated[float, PlainValidator(parse_change)]


@dataclass(frozen=True)
class Selector:
    """`shown_by`'s row: a variant, optionally `vs OTHER`, a workload and a metric."""

    variant: str
    against: str | None = None
    workload: str | None = None
    metric: str | None = None


def parse_selector(text: str, metrics: Iterable[str]) -> Selector:
    """ "VARIANT [vs OTHER] [WORKLOAD[#i]] [METRIC]"; a word that is a metric name is the
    metric, another the workload."""
    # a swept variant's name holds spaces inside its brackets: "vtun[cipher=x lzo=y]"
    words = _WORDS.findall(text)
    if not words:
        raise ValueError("shown_by is empty: name the variant whose row shows the cause")
    variant, rest = words[0], words[1:]
    against = None
    if rest[:1] == ["vs"]:
        if len(rest) < 2:
            raise ValueError(f"shown_by {text!r}: 'vs' needs the variant to compare with")
        against, rest = rest[1], rest[2:]
    metric = rest.pop() if rest and rest[-1] in set(metrics) else None
    if len(rest) > 1:
        raise ValueError(
            f"shown_by {text!r}: expected at most a workload and a metric after the variant"
        )
    return Selector(variant, against, rest[0] if rest else None, metric)


class PaperRow(StrictModel):
    """One row of a paper's table or one point of its figure: see the module's docstring."""

    figure: str
    row: str
    variant: str
    against: str | None = None
    workload: str | None = None
    point: str | None = None
    metric: str
    change: Change | None = None
    ratio: float | None = None
    value: float | None = None
    tolerance: ToleranceField | None = None
    because: str = ""
    shown_by: str | None = None
    note: str = ""

    @model_validator(mode="after")
    def _one_number(self) -> PaperRow:
        given = [k for k in ("change", "ratio", "value") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                'give exactly one of the paper\'s numbers: change = "-54%" (its change vs '
                "its baseline), ratio = 10.2 (treatment / baseline) or value = 3.38 (in the "
                f"metric's unit); got {', '.join(given) or 'none'}"
            )
        for key in ("ratio", "value"):
            x = getattr(self, key)
            if x is not None and (not math.isfinite(x) or x <= 0):
                raise ValueError(f"{key} must be a positive number, got {plain_number(x)}")
        tol = self.tolerance
        if tol is not None:
            if self.value is not None and not tol.compares_values:
                raise ValueError(
                    f'a value is compared within a factor ("x2") or a relative difference '
                    f'("10%"), not with tolerance = "{tol}"'
                )
            if self.value is None and not tol.compares_changes:
                raise ValueError(
                    f'tolerance = "{tol}" compares values: for a change use "x2", "5pp" or '
                    '"direction"'
                )
        if self.paper_change == 0 and not self.tolerance_or_default.holds_for_zero:
            raise ValueError(
                f'the paper\'s change is 0: tolerance = "{self.tolerance_or_default}" cannot '
                'hold for it; give one in percentage points, e.g. tolerance = "2pp"'
            )
        if self.variant == BASELINE and self.value is None:
            raise ValueError(
                "the baseline has no change of its own: compare its value (value = …), or "
                "name a variant"
            )
        if self.shown_by is not None and not self.because:
            raise ValueError('shown_by shows a cause: say it in because = "…"')
        return self

    @property
    def tolerance_or_default(self) -> Tolerance:
        return self.tolerance if self.tolerance is not None else Factor(2.0)

    @property
    def paper_change(self) -> float | None:
        """The paper's change in % (None for a value)."""
        if self.change is not None:
            return self.change
        if self.ratio is not None:
            return (self.ratio - 1.0) * 100.0
        return None

    def as_expect(self) -> Expect:
        """The row's address as an [[expect]] (its bound unused), to match summary rows."""
        return Expect(
            variant=self.variant,
            against=self.against,
            workload=self.workload,
            point=self.point,
            metric=self.metric,
            degradation=None if self.value is not None else Bound("<", 0.0),
            value=Bound("<", 0.0) if self.value is not None else None,
        )


def paper_problems(
    row: PaperRow, variants: Iterable[str], workloads: Mapping[str, Mapping[str, str]]
) -> list[tuple[str, str]]:
    """(key, message) for every name a [[paper]] row (and its shown_by) uses that the
    scenario lacks."""
    names = list(variants)
    out = problems(row.as_expect(), names, workloads)
    if row.shown_by is not None:
        metrics = {m for ms in workloads.values() for m in ms}
        try:
            sel = parse_selector(row.shown_by, metrics)
        except ValueError as exc:
            return [*out, ("shown_by", str(exc))]
        for name in (sel.variant, sel.against):
            if name is not None and name != BASELINE and name not in names:
                out.append(
                    (
                        "shown_by",
                        f"names {name!r}, which is not a variant: use one of {', '.join(names)}",
                    )
                )
        workload = (sel.workload or "").partition("#")[0]
        if workload and workload not in workloads:
            out.append(
                (
                    "shown_by",
                    f"names {workload!r}, which is neither a workload nor a metric: "
                    f"workloads are {', '.join(workloads)}",
                )
            )
    return out
