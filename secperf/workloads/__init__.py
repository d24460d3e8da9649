"""Workloads: what the endpoints do, turned into secperf-engine specs.

One module a kind; each maps a workload point's parameters (scalars, sizes in
bytes, rates in bit/s, times in seconds) to the engine's spec fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from secperf.workloads import crr, rr, stream

Spec = dict[str, Any]
SpecBuilder = Callable[[Mapping[str, Any]], Spec]

BUILDERS: dict[str, SpecBuilder] = {
    "stream": stream.engine_spec,
    "rr": rr.engine_spec,
    "crr": crr.engine_spec,
}


def engine_spec(kind: str, params: Mapping[str, Any], *, server: str) -> Spec:
    """The engine spec for one workload point, aimed at `server` (ADDR:PORT)."""
    try:
        build = BUILDERS[kind]
    except KeyError:
        raise ValueError(f"no engine mapping for workload kind {kind!r}") from None
    spec = build(params)
    spec["server"] = server
    for key in ("duration", "warmup"):
        if params.get(key) is not None:
            spec[key] = float(params[key])
    return spec
