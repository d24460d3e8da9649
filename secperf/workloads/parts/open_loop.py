"""Open loop: a workload at a fixed offered rate, so that the baseline and every
variant are compared at the same load (docs/methodology.md, "Open loop").

The keys the transaction kinds share (rr, crr, http): `rate`, an absolute offered
rate (transactions, connections or fetches a second), or `load`, a share of the
baseline's closed-loop maximum, which the runner measures first in the same run
(RFC 2544 measures latency at the throughput the same way) and turns into a rate
before the point's rounds. The closed-loop maximum stays its own metric: measure it
with the same workload without `rate` or `load`.
"""

from __future__ import annotations

from typing import ClassVar, TypeVar

from pydantic import Field, model_validator

from secperf.metric import Metric
from secperf.schema.fields import PerSecond, StrictModel
from secperf.workloads.base import OfferedLoad


class OpenLoop(StrictModel):
    """`rate`: offered per second on a schedule, whatever the replies; `load`: that
    share (0 < load ≤ 1) of the baseline's closed-loop maximum, measured first."""

    # its heading in the generated docs/scenario-format.md
    part_title: ClassVar[str] = "Open loop: an offered rate or load"

    rate: PerSecond | None = None
    """Open loop: what the kind does per second (rr: transactions, crr: connections, http:
    fetches), offered on a schedule whatever the replies (latency counts from each scheduled
    time); unset: closed loop, the next one when the last is answered.
    """
    load: float | None = Field(default=None, gt=0, le=1)
    """Open loop at this share of the baseline's closed-loop rate, measured first in the same
    run (give `rate` or `load`, not both).
    """

    @model_validator(mode="after")
    def _rate_or_load(self) -> OpenLoop:
        if {"rate", "load"} <= self.model_fields_set and self.rate and self.load:
            raise ValueError(
                "give either rate (per second) or load (a share of the baseline's closed-loop "
                "maximum, measured first), not both"
            )
        return self

    @property
    def open_loop(self) -> bool:
        return self.rate is not None or self.load is not None

    def closed_loop_keys(self) -> frozenset[str]:
        """Closed loop, a point's record leaves `rate` and `load` out (a kind's
        `unrecorded` adds these to its own)."""
        return frozenset(k for k, v in (("rate", self.rate), ("load", self.load)) if v is None)


L = TypeVar("L", bound=OpenLoop)


def closed(spec: L) -> L:
    """The point closed loop: what its `load` is a share of."""
    return spec.model_copy(update={"rate": None, "load": None})


def at_rate(spec: L, rate: float) -> L:
    """The point at an offered rate (its `load` kept: where the rate came from)."""
    return spec.model_copy(update={"rate": float(rate)})


def load_fraction(spec: OpenLoop) -> float | None:
    """The share of the closed-loop maximum a point asks for, until it has a rate."""
    return spec.load if spec.rate is None else None


def offered_rate(spec: OpenLoop) -> float | None:
    return spec.rate


def offered(metric: Metric) -> OfferedLoad:
    """The declaration of an open-loop kind whose rate metric is `metric`."""
    return OfferedLoad(
        fraction=load_fraction,
        closed=closed,
        at=at_rate,
        rate=offered_rate,
        metric=metric.name,
    )
