"""The noise calibration before the first round, and its cache.

Each calibrated point's baseline runs CALIBRATION_TESTS tests at each of
CALIBRATION_DURATIONS, one right after the other, as its rounds run them (the same
executor, the same testbed); secperf.run.noise fits its noise and plans its test
duration and rounds. A point calibrates when its kind says its tests are timed by
`duration` (WorkloadKind.calibrates) and it has a primary metric; a point asked at a
share of the closed-loop maximum (`load`) does not (its rate is known only later).

The fit is kept per machine and testbed shape under the state dir
(`<state_dir>/noise/<key>.json`, with the time it was measured): a later run of the
same shape on the same machine reuses it (`[repeat] calibrate = "cached"`) or measures
afresh (`"fresh"`); `"off"` plans nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from secperf.run.noise import (
    CALIBRATION_DURATIONS,
    CALIBRATION_TESTS,
    NoiseModel,
    Spread,
    fit,
)
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import WorkloadPoint
from secperf.testbed.ledger import resolve_state_dir
from secperf.workloads.registry import WORKLOADS

# A cached calibration older than this is measured again.
MAX_AGE_S = 7 * 86400.0


def calibrates(scenario: Scenario, point: WorkloadPoint) -> bool:
    """Whether the point's noise is measured: its kind's tests are timed by `duration`,
    and it is not a share of a maximum measured later."""
    kind = WORKLOADS.get(point.kind)
    if not kind.calibrates(point.spec):
        return False
    offered = kind.offered
    return offered is None or offered.fraction(point.spec) is None


def pinned(scenario: Scenario, point: WorkloadPoint) -> bool:
    """The scenario gives this workload's `duration` itself: the plan keeps it."""
    return point.workload_index in scenario.pinned_durations


def with_duration(point: WorkloadPoint, duration: float) -> WorkloadPoint:
    return dataclasses.replace(point, spec=point.spec.model_copy(update={"duration": duration}))


def machine_id() -> dict[str, Any]:
    """What names this machine for the cache: host, kernel, CPU model and count."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "cpu": model,
        "cpus": os.cpu_count(),
    }


def cache_key(scenario: Scenario, point: WorkloadPoint) -> str:
    """The machine, the testbed's shape and the point (its duration aside)."""
    record = {k: v for k, v in point.record().items() if k not in ("duration",)}
    shape = scenario.to_json_dict()
    shape = {k: shape.get(k) for k in ("testbed", "topology")}
    text = json.dumps(
        {
            "machine": machine_id(),
            "shape": shape,
            "kind": point.kind,
            "point": record,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cache_dir(state_dir: Path | None = None) -> Path:
    return resolve_state_dir(state_dir) / "noise"


def load(key: str, state_dir: Path | None = None, now: float | None = None) -> Cached | None:
    """The cached calibration under `key`, if there is one younger than MAX_AGE_S."""
    path = cache_dir(state_dir) / f"{key}.json"
    try:
        data = json.loads(path.read_text())
        model = NoiseModel.from_json(data["model"])
        measured = float(data["measured_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    age = (time.time() if now is None else now) - measured
    if age > MAX_AGE_S or age < 0:
        return None
    return Cached(model, age, str(data.get("metric", "")))


def save(key: str, metric: str, model: NoiseModel, state_dir: Path | None = None) -> None:
    """Keep a calibration for later runs (a state dir that cannot be written: not kept)."""
    directory = cache_dir(state_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{key}.tmp"
        tmp.write_text(
            json.dumps({"measured_at": time.time(), "metric": metric, "model": model.to_json()})
        )
        tmp.replace(directory / f"{key}.json")
    except OSError:
        pass


@dataclasses.dataclass(frozen=True)
class Cached:
    model: NoiseModel
    age_s: float
    metric: str


# One baseline test at a duration: its result's metrics and the seconds it took.
Measure = Callable[[WorkloadPoint, int], tuple[Mapping[str, float], float]]


def measure_noise(
    point: WorkloadPoint, metrics: list[str], measure: Measure
) -> tuple[str, NoiseModel] | None:
    """The baseline's noise at each calibration duration, for the noisiest of the
    point's primary `metrics` (the one whose A/A variance at the point's duration is
    largest); None when no metric gave two values at some duration."""
    values: dict[str, dict[float, list[float]]] = {m: {} for m in metrics}
    overheads: list[float] = []
    rep = 0
    for duration in CALIBRATION_DURATIONS:
        at = with_duration(point, duration)
        for _ in range(CALIBRATION_TESTS):
            got, took = measure(at, rep)
            rep += 1
            overheads.append(max(0.0, took - duration))
            for m in metrics:
                if m in got and got[m] > 0:
                    values[m].setdefault(duration, []).append(got[m])
    overhead = sorted(overheads)[len(overheads) // 2] if overheads else 0.0
    best: tuple[float, str, NoiseModel] | None = None
    for m, by_d in values.items():
        spreads = [Spread(d, tuple(v)) for d, v in by_d.items() if len(v) >= 2]
        try:
            model = fit(spreads, overhead)
        except ValueError:
            continue
        var = model.paired_var(point.spec.duration)
        if best is None or var > best[0]:
            best = (var, m, model)
    return None if best is None else (best[1], best[2])
