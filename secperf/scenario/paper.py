"""The scenario's `[[paper]]` rows: the source paper's numbers beside the run's.

A scenario that reproduces a paper says, per row of the paper's tables and per point
of its figures, which of its own rows answers it and the paper's number; where ours is
expected to differ, the cause (`because`) and the row of the same run that shows it
(`shown_by`). How close counts as agreeing is fixed per table or figure, before
measuring, in a `[[paper_table]]` with its reason, the same for every row of it: a row
never sets its own. secperf.results.paper gives each row a verdict;
docs/methodology.md ("Against the paper") explains the rules.

    [[paper_table]]
    figure = "Table I"
    tolerance = "x2 or 10pp"    # "xF", "Npp", "xF or Npp", "direction": its changes
    values = "3%"               # optional: its rows that give a value ("xF" or "N%")
    reason = "..."              # why this tolerance (the paper's spread, its precision)

    [[paper]]
    figure = "Table I"
    row = "1000 entries"
    variant = "acl-1000"
    workload = "latency"        # or "latency#2" (one point), as [[expect]]
    metric = "latency_mean"
    change = "+920%"            # or ratio = 10.2, or value = 3.38 (the metric's unit)
    because = "..."             # optional, with shown_by = "VARIANT [WORKLOAD[#i]] [METRIC]"
    cause_in = "paper"          # optional: shown_by's change is the move the paper's
                                #   regime makes from ours ("paper"), or a cause ours
                                #   has and the paper lacked ("ours")
    explains = 0.5              # optional: the share of the gap the cause covers (1)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

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

    def sign_unresolved(
        self, ours: float, low: float | None, high: float | None, paper: float
    ) -> str:
        """Why a change of the other sign from the paper's cannot be judged ("": it can)."""
        return ""


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
        # a change of the other sign, beyond its interval, is no agreement however small
        if (paper > 0 and high is not None and high < 0) or (
            paper < 0 and low is not None and low > 0
        ):
            return False
        return abs(ours - paper) <= self.amount

    def unresolved(self, low: float, high: float) -> str:
        if (high - low) / 2 > self.amount:
            return f"its interval is wider than ±{plain_number(self.amount)} points"
        return ""

    def sign_unresolved(
        self, ours: float, low: float | None, high: float | None, paper: float
    ) -> str:
        """Within the points but of the other sign, with an interval that holds 0: two
        nulls of opposite sign do not agree, and the run cannot tell its sign."""
        if paper == 0 or ours * paper >= 0 or low is None or high is None:
            return ""
        if low <= 0 <= high:
            return "its interval holds 0 and its mean has the other sign from the paper's"
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


@dataclass(frozen=True)
class Either(Tolerance):
    """ "x2 or 10pp": within the factor or within the points, whichever is wider (a
    table whose rows hold both large changes and changes near 0); the points keep their
    sign rule."""

    points: float = 0.0
    holds_for_zero: ClassVar[bool] = True

    def __str__(self) -> str:
        return f"x{plain_number(self.amount)} or {plain_number(self.points)}pp"

    def holds(self, ours: float, low: float | None, high: float | None, paper: float) -> bool:
        return Factor(self.amount).holds(ours, low, high, paper) or Points(self.points).holds(
            ours, low, high, paper
        )

    def unresolved(self, low: float, high: float) -> str:
        # the points judge a narrow interval around 0; neither form a wide one holding 0
        if low <= 0 <= high and Points(self.points).unresolved(low, high):
            return f"its interval holds 0 and is wider than ±{plain_number(self.points)} points"
        return ""

    def sign_unresolved(
        self, ours: float, low: float | None, high: float | None, paper: float
    ) -> str:
        return Points(self.points).sign_unresolved(ours, low, high, paper)


_EITHER = re.compile(r"^\s*[x×]\s*(\d+\.?\d*)\s+or\s+(\d+\.?\d*)\s*pp\s*$")


def parse_tolerance(value: object) -> Tolerance:
    if isinstance(value, Tolerance):
        return value
    either = _EITHER.match(value) if isinstance(value, str) else None
    if either is not None:
        factor = float(either.group(1))
        if factor <= 1:
            raise ValueError(f"a factor tolerance must be above 1, got {toml_repr(value)}")
        return Either(factor, float(either.group(2)))
    match = _TOLERANCE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(
            'expected a tolerance: "x2" (within a factor of 2), "5pp" (within 5 percentage '
            'points), "x2 or 5pp" (whichever is wider), "10%" (a value within 10 %) or '
            f'"direction"; got {toml_repr(value)}'
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
    """The paper's table or figure this row belongs to (the `figure` of a [[paper_table]])."""
    row: str
    """The paper's row (or point) this answers, as the paper labels it."""
    variant: str
    """The variant of this run whose change answers the row."""
    against: str | None = None
    """The variant the change is taken against; unset: the baseline."""
    workload: str | None = None
    """The workload (or one point of it, `NAME#i`), as in [[expect]]; unset: the only one."""
    point: str | None = None
    """One point of the workload by its label; unset: the workload's only point."""
    metric: str
    """The metric whose change answers the row."""
    change: Change | None = None
    """The paper's change, in % (`"+920%"`); give one of change, ratio, value or direction."""
    ratio: float | None = None
    """The paper's ratio of the variant to what it is against (10.2 = ten times)."""
    value: float | None = None
    """The paper's value of the metric, in the metric's unit."""
    direction: Literal["up", "down"] | None = None
    """The paper states a direction only ("up" or "down"), no number: judged by the sign."""
    because: str = ""
    """Why ours is expected to differ (with `shown_by`, the row that shows the cause)."""
    shown_by: str | None = None
    """The row of the same run that shows the cause: `VARIANT [WORKLOAD[#i]] [METRIC]`."""
    cause_in: Literal["paper", "ours"] = "paper"
    """How shown_by's change reads (secperf.results.cause): "paper", the move the paper's regime
    makes from ours; "ours", the effect of a cause ours has and the paper lacked.
    """
    explains: float = 1.0
    """The share of the gap between ours and the paper's that the cause's row must cover."""
    note: str = ""
    """A remark printed beside the row."""

    @model_validator(mode="before")
    @classmethod
    def _no_tolerance_of_its_own(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "tolerance" in data:
            figure = data.get("figure", "FIGURE")
            raise ValueError(
                f"tolerance: a [[paper]] row cannot set its own tolerance (fixed per table "
                f"before measuring, the same for every row of it): remove it and declare "
                f"one for the table in [[paper_table]] figure = {toml_repr(figure)}, "
                f'tolerance = {toml_repr(data["tolerance"])}, reason = "…"'
            )
        return data

    @model_validator(mode="after")
    def _one_number(self) -> PaperRow:
        given = [
            k for k in ("change", "ratio", "value", "direction") if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                'give exactly one of the paper\'s numbers: change = "-54%" (its change vs '
                "its baseline), ratio = 10.2 (treatment / baseline), value = 3.38 (in the "
                'metric\'s unit) or, where it states no number, direction = "down" (or '
                f'"up"); got {", ".join(given) or "none"}'
            )
        for key in ("ratio", "value"):
            x = getattr(self, key)
            if x is not None and (not math.isfinite(x) or x <= 0):
                raise ValueError(f"{key} must be a positive number, got {plain_number(x)}")
        if not 0 < self.explains <= 1:
            raise ValueError(
                f"explains = {plain_number(self.explains)}: the share of the gap the cause "
                "covers is above 0 and at most 1"
            )
        if (self.explains != 1 or self.cause_in != "paper") and self.shown_by is None:
            raise ValueError(
                "explains and cause_in say how a cause's row shows it: name it in shown_by"
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
    def paper_change(self) -> float | None:
        """The paper's change in % (None for a value)."""
        if self.change is not None:
            return self.change
        if self.ratio is not None:
            return (self.ratio - 1.0) * 100.0
        if self.direction is not None:  # the sign alone
            return 1.0 if self.direction == "up" else -1.0
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


class PaperTable(StrictModel):
    """One table or figure of the paper: the tolerance every row of it is judged by,
    fixed before measuring, and why (the paper's own spread, its printed precision)."""

    figure: str
    """The paper's table or figure, as the [[paper]] rows name it."""
    tolerance: ToleranceField
    """How close a row that gives a change (or a ratio) must be to agree: `"xF"`, `"Npp"`, `"xF or
    Npp"` or `"direction"`.
    """
    values: ToleranceField | None = None
    """How close a row that gives a value must be: `"xF"` or `"N%"`; unset: the table has none."""
    reason: str
    """Why this tolerance: the paper's own spread, its printed precision."""

    @model_validator(mode="after")
    def _fits(self) -> PaperTable:
        if not self.reason.strip():
            raise ValueError(
                f'paper_table {self.figure!r}: say why this tolerance in reason = "…" '
                "(the paper's own spread between its rows, the precision it prints)"
            )
        if self.values is not None and not self.values.compares_values:
            raise ValueError(
                f'paper_table {self.figure!r}: a value is compared within a factor ("x2") '
                f'or a relative difference ("10%"), not with values = "{self.values}"'
            )
        return self

    def for_row(self, row: PaperRow) -> Tolerance | None:
        """The tolerance `row` is judged by (None: the table gives none for its kind);
        a row that gives a direction only is judged by its sign."""
        if row.direction is not None:
            return Direction()
        if row.value is None:
            return self.tolerance if self.tolerance.compares_changes else None
        if self.values is not None:
            return self.values
        return self.tolerance if self.tolerance.compares_values else None


def table_problems(rows: Sequence[PaperRow], tables: Sequence[PaperTable]) -> list[str]:
    """What is wrong with the [[paper_table]] declarations for these [[paper]] rows:
    a figure declared twice or never, a tolerance that cannot judge one of its rows."""
    out: list[str] = []
    by_figure: dict[str, PaperTable] = {}
    for i, table in enumerate(tables):
        if table.figure in by_figure:
            out.append(f"paper_table[{i}] declares {table.figure!r} again: one tolerance per table")
        by_figure[table.figure] = table
    for i, row in enumerate(rows):
        declared = by_figure.get(row.figure)
        if declared is None:
            out.append(
                f"paper[{i}] ({row.figure}, {row.row}): no [[paper_table]] declares its "
                f"tolerance: add [[paper_table]] figure = {toml_repr(row.figure)}, "
                'tolerance = "x2", reason = "…"'
            )
            continue
        tol = declared.for_row(row)
        if tol is None and row.value is not None:
            out.append(
                f"paper[{i}] ({row.figure}, {row.row}) gives a value, which tolerance = "
                f'"{declared.tolerance}" cannot judge: add values = "10%" (or "x2") to its '
                "[[paper_table]]"
            )
        elif tol is None:
            out.append(
                f"paper[{i}] ({row.figure}, {row.row}) gives a change, which tolerance = "
                f'"{declared.tolerance}" (for values) cannot judge: give its [[paper_table]] '
                'tolerance = "x2", "5pp" or "x2 or 5pp", and values = "10%"'
            )
        elif row.paper_change == 0 and not tol.holds_for_zero:
            out.append(
                f"paper[{i}] ({row.figure}, {row.row}): the paper's change is 0, which "
                f'tolerance = "{tol}" cannot hold for: the table needs one in percentage '
                'points, e.g. tolerance = "2pp"'
            )
    return out


def tolerances(rows: Sequence[PaperRow], tables: Sequence[PaperTable]) -> list[Tolerance | None]:
    """Each row's tolerance from its table (None: none declared for it)."""
    by_figure = {t.figure: t for t in tables}
    return [t.for_row(r) if (t := by_figure.get(r.figure)) else None for r in rows]


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
