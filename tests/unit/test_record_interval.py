"""A test's interval records come often enough for a series over time: a 1 s test
reports every 0.1 s (ten measured intervals), a long one each second, and a kind that
sets its own interval keeps it."""

from __future__ import annotations

from typing import Any

import pytest

from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import expand_scenario
from secperf.workloads import crr, rr, stream
from secperf.workloads.base import MIN_INTERVAL_S, EngineExecutor, series_interval
from secperf.workloads.parts.flood_beside import Beside

SERVER = "198.18.2.2:5201"


def engine_of(module: Any) -> EngineExecutor:
    beside = module.KIND.executor
    assert isinstance(beside, Beside) and isinstance(beside.inner, EngineExecutor)
    return beside.inner


def spec_of(module: Any, kind: str, **keys: Any) -> dict[str, Any]:
    sc = Scenario.model_validate(
        {
            "name": "t",
            "variants": {"v": {"mechanisms": []}},
            "workloads": [{"kind": kind, **keys}],
        }
    )
    (point,) = expand_scenario(sc)
    return dict(engine_of(module).spec(point.spec, SERVER))


@pytest.mark.parametrize(("module", "kind"), [(stream, "stream"), (rr, "rr"), (crr, "crr")])
def test_a_short_test_reports_ten_intervals_and_a_long_one_each_second(
    module: Any, kind: str
) -> None:
    short = spec_of(module, kind, duration="1s", warmup="0.5s")
    assert short["interval"] == pytest.approx(0.1)
    assert short["duration"] / short["interval"] >= 5  # what the report draws a series from
    assert spec_of(module, kind, duration="60s")["interval"] == 1.0


def test_the_interval_has_a_floor() -> None:
    assert series_interval(0.1) == MIN_INTERVAL_S
    assert series_interval(3.0) == pytest.approx(0.3)
    assert series_interval(30.0) == 1.0
