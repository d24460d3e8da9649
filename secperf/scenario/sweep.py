"""Expand a workload's list-valued keys (sweeps) into the points the runner measures.

`sweep = "product"` (the default) takes the cartesian product of every list,
in the schema's field order, the first list varying slowest; `sweep = "zip"`
pairs the lists element by element (document 000's request/response pairs).
Each point carries the workload's own model with one value of every swept key.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from secperf.scenario.scenario import Scenario
from secperf.schema.units import fmt_rate, fmt_size
from secperf.workloads import base
from secperf.workloads.base import WorkloadSpec
from secperf.workloads.registry import WORKLOADS

__all__ = ["WorkloadPoint", "expand", "expand_scenario", "format_value", "one_point"]

# A point of any kind (secperf.workloads.base.WorkloadPoint of the workload's model).
WorkloadPoint = base.WorkloadPoint[WorkloadSpec]


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


def expand(workload: WorkloadSpec, workload_index: int = 0) -> list[WorkloadPoint]:
    """Every point of `workload`, in sweep order; one point when nothing is swept."""
    swept = workload.swept_values()
    keys = tuple(swept)
    if not keys:
        combos: list[tuple[object, ...]] = [()]
    elif workload.sweep == "zip":
        combos = list(zip(*swept.values(), strict=True))
    else:
        combos = list(itertools.product(*swept.values()))
    points: list[WorkloadPoint] = []
    for index, combo in enumerate(combos):
        chosen = dict(zip(keys, combo, strict=True))
        label = " ".join(
            f"{key}={format_value(workload.sweepable[key], value)}" for key, value in chosen.items()
        )
        spec = workload.model_copy(update=chosen) if chosen else workload
        points.append(WorkloadPoint(workload_index, index, spec, label, keys))
    return points


def expand_scenario(scenario: Scenario) -> list[WorkloadPoint]:
    """Every point of every workload, in file order, with the right workload_index."""
    return [
        point
        for index, workload in enumerate(scenario.workloads)
        for point in expand(workload, index)
    ]


def one_point(table: Mapping[str, Any], workload_index: int = 0) -> WorkloadPoint:
    """The point of one workload written as its table (`{"kind": "rr", ...}`), for
    tools and tests: validated by its kind's model, [timing]'s defaults aside; a
    table that sweeps a key has several points and is refused."""
    workload = WORKLOADS.adapter().validate_python(dict(table))
    points = expand(workload, workload_index)
    if len(points) != 1:
        raise ValueError(f"{workload.name} sweeps {', '.join(points[0].swept)}: not one point")
    return points[0]
