"""The report's table model: cells, tables, charts and how a value reads in a cell.

Every layout builds on this module: the standard one (secperf.report.terminal, a
table per workload and metric), the check tables (secperf.report.checks) and a
kind's own layout (`WorkloadKind.layout`, e.g. RFC 2544's tables in its section
26 layout). It imports no report module and no kind; the terminal (rich) and the
HTML report render what it builds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from secperf.metric import DEFAULT_CENSORED_WORDS

if TYPE_CHECKING:  # types only: a kind's layout never imports matplotlib itself
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.ticker import Formatter

BASELINE = "baseline"
MISSED = "*"  # marks a value whose CI target was not met
SIGNIFICANT = "†"  # marks a degradation whose CI excludes 0

Row = Mapping[str, Any]  # one row of the summary (docs/data-format.md, summary.json)


@dataclass
class Cell:
    text: str
    significant: bool = False
    missed: bool = False
    numeric: bool = True


@dataclass
class ReportTable:
    """One table, independent of how it is drawn."""

    workload: str
    metric: str
    title: str
    columns: list[str]
    rows: list[list[Cell]]
    footnotes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Chart:
    title: str
    image: bytes  # an SVG document or PNG bytes: see `mime`
    # the table it belongs beside (its workload and metric); "" = none in particular
    workload: str = ""
    metric: str = ""

    @property
    def mime(self) -> str:
        return "image/png" if self.image[:4] == b"\x89PNG" else "image/svg+xml"


class Drawing(Protocol):
    """What a layout's charts draw with (secperf.report.figures.DRAWING), handed in by
    the report so that a kind's module never imports matplotlib (half a second)."""

    def figure(self, width: float, height: float) -> Figure:
        """A new figure of this size (inches)."""
        ...

    def plain_ticks(self) -> Formatter:
        """Tick labels with the decimals the spacing needs, no exponent."""
        ...

    def legend(self, ax: Axes, **kwargs: Any) -> None:
        """A legend beside the plot, never over it."""
        ...

    def image(self, fig: Figure) -> bytes:
        """The figure as SVG, or PNG where that is smaller."""
        ...

    def bound_marks(
        self,
        ax: Axes,
        marks: Sequence[tuple[float, float]],
        marker: str,
        color: str,
        label: str | None,
    ) -> None:
        """Open triangles at searches' bounds (x, bound): "^" the value is at least
        there, "v" below it."""
        ...

    def bound_key(self, ax: Axes, label: str) -> None:
        """The legend's entry for bound_marks."""
        ...


@dataclass(frozen=True)
class ReportLayout:
    """A kind's own report: its tables from its summary rows (one workload's), and
    optionally its charts. A kind without one gets a table per metric."""

    tables: Callable[[str, Sequence[Row]], list[ReportTable]]
    charts: Callable[[str, Sequence[Row], Drawing], list[Chart]] | None = None


# -- how a value reads ---------------------------------------------------------------


def fmt_value(x: float | None) -> str:
    """A number with about four significant digits and no exponent."""
    if x is None or not math.isfinite(x):
        return "–"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 10:
        return f"{x:.2f}"
    if a >= 1 or a == 0:
        return f"{x:.3f}"
    return f"{x:.3g}"


def fmt_pct(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    text = f"{x:+.1f}"
    return "0.0" if text in ("+0.0", "-0.0") else text


def fmt_bound(x: float | None) -> str:
    """An interval's end: one decimal, or as many more as keep a nonzero end's sign
    ("+0.012", not "0.0"): an end printed as 0.0 would read as "includes no effect"."""
    text = fmt_pct(x)
    if text != "0.0" or x is None or x == 0:
        return text
    for digits in range(2, 7):
        if (text := f"{x:+.{digits}f}").strip("+-0.") != "":
            return text
    return f"{x:+.1e}"


def fmt_rate(x: Any) -> str:
    """A search's rate: a whole one without decimals ("500", not "500.0")."""
    if isinstance(x, int | float) and math.isfinite(x) and float(x).is_integer():
        return f"{x:,.0f}"
    return fmt_value(x if isinstance(x, int | float) else None)


def _bound_text(row: Row, outcome: str, words: Mapping[str, str]) -> str:
    """How a censored search reads: "< 500", "≥ 20,000", "not denied up to 149,000
    achieved (200,000 asked)" (the asked rate beside a bound placed by the achieved one)."""
    search: Mapping[str, Any] = row.get("search") or {}
    bound, asked = search.get(f"{outcome}_bound"), search.get(f"{outcome}_asked")
    text = words[outcome].format(bound=fmt_rate(bound))
    # placed by what the load achieved, and it fell short of its ask: say both
    short = (
        search.get("measure") == "achieved"
        and isinstance(asked, int | float)
        and isinstance(bound, int | float)
        and abs(bound - asked) > 0.005 * asked
    )
    if short:
        text += f" achieved ({fmt_rate(asked)} asked)"
    return text


def censored_text(row: Row, words: Mapping[str, str] | None = None) -> str:
    """Every censored outcome of a search row, e.g. "< 500" or "< 500 ×2 · ≥ 20,000 ×1";
    `words`: the metric's wording (Metric.censored_words), else "<" and "≥"."""
    search: Mapping[str, Any] = row.get("search") or {}
    parts = [
        (_bound_text(row, outcome, words or DEFAULT_CENSORED_WORDS), int(k))
        for outcome in ("below", "at_least")
        if (k := search.get(f"{outcome}_n") or 0)
    ]
    if len(parts) == 1:
        return parts[0][0]
    return " · ".join(f"{text} ×{k}" for text, k in parts)


def _interval_text(row: Row) -> str:
    """ "1,250 [1,100–1,400]": a search's mean and its interval (the t interval widened
    by the brackets; with one repetition, that search's own bracket)."""
    search: Mapping[str, Any] = row.get("search") or {}
    lo, hi = row.get("ci_low"), row.get("ci_high")
    if lo is None or hi is None:
        lo, hi = search.get("bracket_low"), search.get("bracket_high")
    text = fmt_rate(row.get("mean"))
    if lo is not None and hi is not None:
        text += f" [{fmt_rate(lo)}–{fmt_rate(hi)}]"
    return text


def failed_text(row: Row) -> str:
    """ "FAILED 2 of 3: failed transactions 0.4 % > 0.001 %" (all of them: "FAILED ×3"): the
    repetitions that missed their validation criteria, with the criteria ("" when none
    did)."""
    v: Mapping[str, Any] = row.get("validation") or {}
    k = int(v.get("failed_n") or 0)
    if not k:
        return ""
    of = int(v.get("checked_n") or k)
    count = "" if k == of == 1 else (f" ×{k}" if k == of else f" {k} of {of}")
    return f"FAILED{count}: " + "; ".join(str(c) for c in v.get("failed") or [])


def noted_count(row: Row) -> str:
    """ "SHOULD missed 1 of 3": how many counted repetitions missed a SHOULD criterion
    ("" when none did)."""
    k = int((row.get("validation") or {}).get("noted_n") or 0)
    if not k:
        return ""
    of = int(row.get("n") or k)
    count = f" ×{k}" if k == of and k > 1 else ("" if k == of else f" {k} of {of}")
    return f"SHOULD missed{count}"


def noted_text(row: Row) -> str:
    """ "SHOULD missed 1 of 3: traffic rate's largest deviation … 6.1 % > 5 %": the
    counted repetitions that missed a SHOULD criterion, and which (their numbers
    stand; "" when none did)."""
    count = noted_count(row)
    if not count:
        return ""
    return f"{count}: " + "; ".join(str(c) for c in row["validation"].get("noted") or [])


def value_cell(row: Row | None, words: Mapping[str, str] | None = None) -> Cell:
    """A variant's value: mean ± half width (marked when the CI target was missed), a
    search's mean [interval], or what a search that found nothing found (`words`)."""
    if row is None:
        return Cell("–")
    failed = failed_text(row)
    if failed and not row.get("n") and not row.get("censored_n"):
        return Cell(failed, missed=True)  # the test failed its criteria: no number
    censored = int(row.get("censored_n") or 0)
    if censored and not row.get("n"):
        return Cell(censored_text(row, words))  # no number to show: say what was found
    search = row.get("search") is not None
    text = _interval_text(row) if search else fmt_value(row.get("mean"))
    if censored:
        total = censored + int(row.get("n") or 0)
        return Cell(f"{text} ({censored} of {total}: {censored_text(row, words)})", missed=True)
    hw = row.get("halfwidth_pct")
    if hw is not None and not search:
        text += f" ±{hw:.1f}%"
    if failed:
        return Cell(f"{text} (and {failed})", missed=True)
    missed = not row.get("ci_target_met", False)
    if missed:
        text += MISSED
    if noted := noted_text(row):
        text += f" ({noted})"
    return Cell(text, missed=missed)


def degradation_cell(row: Row | None) -> Cell:
    """A variant's degradation % with its interval, marked when significant; a censored
    search's comparison as its bound ("≥ +88.8 % (bound)")."""
    if row is not None and row.get("degradation_pct") is None:
        return _bound_cell(row.get("degradation_bound"))
    if row is None or row.get("degradation_pct") is None:
        return Cell("–")
    text = fmt_pct(row["degradation_pct"])
    lo, hi = row.get("degradation_ci_low"), row.get("degradation_ci_high")
    if lo is not None and hi is not None:
        text += f" [{fmt_bound(lo)}, {fmt_bound(hi)}]"
    significant = bool(row.get("significant"))
    if significant:
        text += SIGNIFICANT
    return Cell(text, significant=significant)


def _bound_cell(bound: Any) -> Cell:
    """The degradation a censored comparison bounds: "≥ +88.8 % (bound)", "≤ …" or both
    ends (an end is None where the variant's ratio to the baseline is open: 0 or ∞)."""
    lo, hi = (bound.get(k) for k in ("low", "high")) if isinstance(bound, Mapping) else (None, None)
    if lo is None and hi is None:
        return Cell("–")
    text = f"≥ {fmt_bound(lo)} %" if hi is None else f"≤ {fmt_bound(hi)} %"
    if lo is not None and hi is not None:
        text = f"[{fmt_bound(lo)}, {fmt_bound(hi)}]"
    significant = (lo is not None and lo > 0) or (hi is not None and hi < 0)
    return Cell(f"{text} (bound){SIGNIFICANT if significant else ''}", significant=significant)


def point_name(workload: str, label: str) -> str:
    """How a report names a workload point: the workload, and the point's label when
    the workload is swept ("tcp-stream message=16KiB")."""
    return workload if not label or label == workload else f"{workload} {label}"


def reps(row: Row | None) -> str:
    """Repetitions measured, a search that found nothing included."""
    if row is None:
        return "0"
    failed = int((row.get("validation") or {}).get("failed_n") or 0)
    return str(int(row.get("n") or 0) + int(row.get("censored_n") or 0) + failed)
