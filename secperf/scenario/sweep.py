"""Expand a workload's list-valued keys (sweeps) into the points the runner measures.

`sweep = "product"` (the default) takes the cartesian product of every list,
in the schema's field order, the first list varying slowest; `sweep = "zip"`
pairs the lists element by element (document 000's request/response pairs).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from secperf.scenario.schema import Scenario, WorkloadBase
from secperf.scenario.units import fmt_rate, fmt_size

AnyWorkload = WorkloadBase  # every kind: expansion reads only the common keys

# Keys that describe the workload rather than parametrize one test.
_NOT_PARAMS = frozenset(
    {"kind", "name", "sweep", "table", "clients", "servers", "generators", "variants"}
)
# A workload's flood-beside keys (schema.FloodBeside); left out when it has no flood.
_FLOOD_BESIDE = ("flood", "flood_rate", "flood_target", "flood_payload")


@dataclass(frozen=True)
class WorkloadPoint:
    """One fully specified test: every parameter a scalar.

    `params` holds sizes as int bytes, rates as int bits/s (None = unpaced),
    durations as float seconds, a socket buffer of None = the system default."""

    workload_index: int
    index: int  # position among this workload's points
    name: str  # the workload's name
    kind: str
    params: dict[str, object]
    label: str  # "message=16KiB", "request=32 response=1KiB"; "" when nothing is swept
    swept: tuple[str, ...]
    # The hosts or zones the workload names to run from and to ([] = the defaults).
    clients: tuple[str, ...] = ()
    servers: tuple[str, ...] = ()
    generators: int = 1  # client hosts driving it at once
    # The variants measured at this point beside the baseline (their names in
    # [variants]; a swept one covers all its values); () = every variant.
    variants: tuple[str, ...] = ()

    def measures(self, variant: str) -> bool:
        """Whether this point measures `variant` (an expanded name such as 'ovpn[cipher=none]')."""
        return not self.variants or variant.split("[", 1)[0] in self.variants

    @property
    def point_id(self) -> str:
        """Stable id within a run: "tcp-rr#0"."""
        return f"{self.name}#{self.index}"


def format_value(unit: str, value: object) -> str:
    """A swept value as a label shows it."""
    if unit == "size" and isinstance(value, int):
        # Plain byte counts read best bare in tables ("request=32 response=1KiB").
        text = fmt_size(value)
        return text[:-1] if text[-2].isdigit() else text
    if unit == "size" and value is None:
        return "default"
    if unit == "rate" and (value is None or isinstance(value, int)):
        return fmt_rate(value)
    if unit == "link_rate" and isinstance(value, int):
        return fmt_rate(value or None)  # 0: no shaping
    return str(value)


def expand(workload: AnyWorkload, workload_index: int = 0) -> list[WorkloadPoint]:
    """Every point of `workload`, in sweep order; one point when nothing is swept."""
    swept = workload.swept_values()
    keys = tuple(swept)
    if not keys:
        combos: list[tuple[object, ...]] = [()]
    elif workload.sweep == "zip":
        combos = list(zip(*swept.values(), strict=True))
    else:
        combos = list(itertools.product(*swept.values()))
    fields = {k: v for k, v in workload.model_dump().items() if k not in _NOT_PARAMS}
    if workload.kind in ("stream", "rr", "crr") and fields.get("flood") is None:
        for key in _FLOOD_BESIDE:
            fields.pop(key, None)
    points: list[WorkloadPoint] = []
    for index, combo in enumerate(combos):
        chosen = dict(zip(keys, combo, strict=True))
        # Keep the schema's field order in params, whatever was swept.
        params = {key: chosen.get(key, value) for key, value in fields.items()}
        label = " ".join(
            f"{key}={format_value(workload.sweepable[key], value)}" for key, value in chosen.items()
        )
        points.append(
            WorkloadPoint(
                workload_index=workload_index,
                index=index,
                name=workload.name,
                kind=workload.kind,
                params=params,
                label=label,
                swept=keys,
                clients=tuple(getattr(workload, "clients", ())),
                generators=int(getattr(workload, "generators", 1)),
                servers=tuple(getattr(workload, "servers", ())),
                variants=tuple(getattr(workload, "variants", ())),
            )
        )
    return points


def expand_scenario(scenario: Scenario) -> list[WorkloadPoint]:
    """Every point of every workload, in file order, with the right workload_index."""
    return [
        point
        for index, workload in enumerate(scenario.workloads)
        for point in expand(workload, index)
    ]
