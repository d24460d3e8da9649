"""Thresholds a run must meet: the scenario's `[[expect]]` entries and `--expect` text.

An expectation names what it bounds (a variant, optionally another variant it is
compared with, a workload or one of its points, a metric) and a bound on either the
metric's **degradation** (%, positive = worse) or its **value** (in the metric's
unit). secperf.report.gate checks it against a run or a comparison; this module only
says what an expectation is, reads one from a line of text, and checks that the
names it uses exist in a scenario.

    [[expect]]
    variant = "proposed"
    against = "current"        # optional: paired with this variant instead of the baseline
    workload = "tcp-crr"       # optional: every workload when absent; "tcp-crr#1": one point
    metric = "cps"             # optional: every headline metric when absent
    degradation = "< 10%"      # or value = "> 5000"
    rule = "interval"          # optional: "interval" (default) or "mean"

The same as text (`--expect`), the words in this order, the optional ones left out:

    VARIANT [vs OTHER] [WORKLOAD[#i]] [KEY=VALUE …] [METRIC] degradation OP NUMBER[%]
    VARIANT [WORKLOAD[#i]] [KEY=VALUE …] METRIC OP NUMBER
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import PlainSerializer, PlainValidator, model_validator

from secperf.schema.fields import StrictModel
from secperf.schema.units import plain_number, toml_repr

BASELINE = "baseline"
DEGRADATION = "degradation"
OPS = ("<=", ">=", "<", ">")
RULES = ("interval", "mean")
Rule = Literal["interval", "mean"]

_BOUND = re.compile(r"^\s*(<=|>=|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(%?)\s*$")


@dataclass(frozen=True)
class Bound:
    """`< 10%`: an operator, a number, and whether it was written with %."""

    op: str
    number: float
    percent: bool = False

    def __str__(self) -> str:
        return f"{self.op} {plain_number(self.number)}{' %' if self.percent else ''}"

    def holds(self, x: float) -> bool:
        """Does x satisfy the bound?"""
        return {
            "<": x < self.number,
            "<=": x <= self.number,
            ">": x > self.number,
            ">=": x >= self.number,
        }[self.op]

    @property
    def upper(self) -> bool:
        """An upper bound (< or <=): a value past it is too high."""
        return self.op.startswith("<")


def parse_bound(value: object) -> Bound:
    if isinstance(value, Bound):
        return value
    match = _BOUND.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(
            f'expected a bound such as "< 10%" or ">= 5000" (<, <=, > or >= and a number), '
            f"got {toml_repr(value)}"
        )
    return Bound(match.group(1), float(match.group(2)), bool(match.group(3)))


BoundField = Annotated[Bound, PlainValidator(parse_bound), PlainSerializer(str)]


class Expect(StrictModel):
    """One threshold: see the module's docstring."""

    variant: str
    """A variant's name; a variant sweep's family name (`linear`) matches each of its variants
    (`linear[rules=10]`, …); `baseline` only with `value`.
    """
    against: str | None = None
    """Another variant: bound `variant`'s degradation against it instead of against the baseline,
    paired by round (needs `degradation`).
    """
    workload: str | None = None
    """A workload's name, or one point of it by id (`tcp-stream#1`)."""
    point: str | None = None  # a point's label, "message=16KiB"
    """A point by its label (`"message=16KiB"`)."""
    metric: str | None = None
    """A metric name (docs/data-format.md, "Metrics"): `tps`, `cps`, `throughput`,
    `latency_p99_us`, `sd_cpu_us_per_tx`, …; without it a degradation bound applies to the
    workload's primary metrics and its service demand.
    """
    degradation: BoundField | None = None
    """A bound on the degradation: `"< 10%"`, `"<= 5"` (the `%` is optional: degradations are in
    %).
    """
    value: BoundField | None = None
    """A bound on the metric's value in its unit: `"> 5000"`, `">= 1e6"`; needs `metric`."""
    rule: Rule | None = None
    """Interval: fail only when the whole interval is past the bound (inconclusive otherwise, which
    passes and is listed); mean: fail when the mean is past it.
    """

    @model_validator(mode="after")
    def _one_bound(self) -> Expect:
        if (self.degradation is None) == (self.value is None):
            raise ValueError(
                'give exactly one of degradation = "< 10%" (the cost, %) or value = "> 5000" '
                "(the metric itself)"
            )
        if self.value is not None and self.metric is None:
            raise ValueError("a value bound needs the metric it bounds: add metric = NAME")
        if self.against is not None and self.degradation is None:
            raise ValueError("against compares two variants' figures: it needs degradation")
        if self.variant == BASELINE and self.degradation is not None:
            raise ValueError(
                "the baseline has no degradation (it is what others are compared with): "
                "bound its value, or name a variant"
            )
        if self.against == self.variant:
            raise ValueError(f"against names the variant itself ({self.variant!r})")
        return self

    @property
    def bound(self) -> Bound:
        bound = self.degradation if self.degradation is not None else self.value
        assert bound is not None
        return bound

    def describe(self) -> str:
        """The expectation as the text `--expect` reads."""
        words = [self.variant]
        if self.against:
            words += ["vs", self.against]
        if self.workload:
            words.append(self.workload)
        if self.point:
            words.append(self.point)
        if self.metric:
            words.append(self.metric)
        if self.degradation is not None:
            words.append(DEGRADATION)
        return " ".join(words) + f" {self.bound}"


_SPLIT = re.compile(r"^(.*?)\s*((?:<=|>=|<|>).*)$")


def parse_expect(text: str, metrics: Iterable[str]) -> Expect:
    """An expectation from `--expect` text; `metrics` are the metric names that exist
    (a word that is one is the metric, any other is the workload). Raises ValueError
    naming what is wrong."""
    match = _SPLIT.match(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} has no bound: end it with an operator and a number, "
            'e.g. "acl-new tcp-crr degradation < 10%"'
        )
    words, bound = match.group(1).split(), parse_bound(match.group(2))
    if not words:
        raise ValueError(f'{text!r} names no variant: start with one, e.g. "acl-new ..."')
    known = set(metrics)
    fields: dict[str, object] = {"variant": words.pop(0)}
    if words[:1] == ["vs"]:
        if len(words) < 2:
            raise ValueError(f"{text!r}: 'vs' needs the variant to compare with")
        fields["against"] = words[1]
        words = words[2:]
    if words[-1:] == [DEGRADATION]:
        fields["degradation"] = bound
        words.pop()
        if words and words[-1] in known:
            fields["metric"] = words.pop()
    elif words and words[-1] in known:
        fields["metric"] = words.pop()
        fields["value"] = bound
    else:
        last = words[-1] if words else ""
        raise ValueError(
            f"{text!r}: the word before the bound must be 'degradation' or a metric "
            f'({last!r} is neither); e.g. "acl-new tcp-crr degradation < 10%" or '
            '"acl-new tcp-rr tps > 5000"'
        )
    labels = [w for w in words if "=" in w]
    rest = [w for w in words if "=" not in w]
    if labels:
        fields["point"] = " ".join(labels)
    if len(rest) > 1:
        raise ValueError(
            f"{text!r}: expected at most one workload before the metric, got "
            f"{', '.join(repr(w) for w in rest)}"
        )
    if rest:
        fields["workload"] = rest[0]
    return Expect.model_validate(fields)


def problems(
    expect: Expect,
    variants: Iterable[str],
    workloads: Mapping[str, Mapping[str, str]],
) -> list[tuple[str, str]]:
    """(key, message) for every name in `expect` that the scenario lacks, and a value
    bound in % on a metric of another unit: `variants` are the variant names (swept
    ones and their family names included), `workloads` maps each workload's name to
    its metrics and their units."""
    out: list[tuple[str, str]] = []
    names = list(variants)
    for key in ("variant", "against"):
        name = getattr(expect, key)
        if name is not None and name != BASELINE and name not in names:
            out.append(
                (key, f"names {name!r}, which is not a variant: use one of {', '.join(names)}")
            )
    units = {m: u for ms in workloads.values() for m, u in ms.items()}
    unit = units.get(expect.metric or "")
    if expect.value is not None and expect.value.percent and unit not in (None, "%"):
        out.append(
            (
                "value",
                f"bounds {expect.metric} in %, but it is measured in {unit}: write the "
                "bound in that unit, or bound its degradation",
            )
        )
    metrics: set[str] = set()
    if expect.workload is not None:
        workload = expect.workload.partition("#")[0]
        if workload not in workloads:
            out.append(
                (
                    "workload",
                    f"names {workload!r}, which is not a workload: use one of "
                    f"{', '.join(workloads)}",
                )
            )
        else:
            metrics = set(workloads[workload])
    else:
        metrics = {m for ms in workloads.values() for m in ms}
    if expect.metric is not None and metrics and expect.metric not in metrics:
        out.append(
            (
                "metric",
                f"names {expect.metric!r}, which no workload here measures: use one of "
                f"{', '.join(sorted(metrics))}",
            )
        )
    return out
