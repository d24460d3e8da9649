"""Adding a workload kind is its module and one registry line (docs/architecture.md):
a kind defined here, registered for the test only, is a kind like any
other to `secperf check`, the schema, the estimate, preflight and the summary."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from pydantic import Field
from typer.testing import CliRunner

from secperf.cli import app
from secperf.metric import Metric, field
from secperf.results.metrics import extract, metrics_for_kind
from secperf.scenario.loader import load_scenario
from secperf.scenario.sweep import expand_scenario
from secperf.tools import Tool
from secperf.workloads.base import EngineExecutor, WorkloadKind, WorkloadSpec
from secperf.workloads.registry import WORKLOADS

# -- the new kind: request/response with one size both ways, its own metric ----------


class PingPongWorkload(WorkloadSpec):
    """Request and response of one `size`, as an rr of the engine."""

    sweepable: ClassVar[dict[str, str]] = {"size": "size"}
    engine_kind: ClassVar[str] = "rr"
    engine_fields: ClassVar[tuple[str, ...]] = ("duration", "warmup")

    kind: Literal["pingpong"]
    size: int | list[int] = Field(default=64)

    def default_name(self) -> str:
        return "pingpong"


def sizes(spec: PingPongWorkload) -> dict[str, Any]:
    return {"request": spec.size, "response": spec.size}


PINGPONG_TPS = Metric("pingpong_tps", "Ping-pong rate", "exchanges/s", True, True)
MISSING_TOOL = Tool("secperf-no-such-program", "no-such-package", "the pingpong kind")

KIND = WorkloadKind(
    name="pingpong",
    model=PingPongWorkload,
    executor=EngineExecutor(extra=sizes),
    metrics=((PINGPONG_TPS, field("transactions_per_second")),),
    moved=("transactions",),
    tools=lambda _spec: [MISSING_TOOL],
)

# --------------------------------------------------------------------------------------

SCENARIO = """\
name = "pingpong"
[repeat]
min = 3
max = 4
[timing]
duration = "2s"
warmup = "1s"
[variants.plain]
mechanisms = []
[[workloads]]
kind = "pingpong"
{size}
"""


@pytest.fixture
def registered() -> Iterator[WorkloadKind[PingPongWorkload]]:
    with WORKLOADS.registered(KIND) as kind:
        yield kind


def write(tmp_path: Path, size: str = "size = [64, 1024]") -> Path:
    path = tmp_path / "pingpong.toml"
    path.write_text(SCENARIO.format(size=size))
    return path


def test_a_new_workload_kind_is_unknown_until_registered(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["check", str(write(tmp_path))])
    assert result.exit_code != 0
    assert "pingpong" in result.output and "'stream'" in result.output  # the known kinds
    assert "pingpong" not in WORKLOADS and metrics_for_kind("pingpong") == []


def test_a_new_workload_kind_passes_check_with_its_estimate(
    tmp_path: Path, registered: WorkloadKind[PingPongWorkload]
) -> None:
    result = CliRunner().invoke(app, ["check", str(write(tmp_path))])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "2 workload point(s)" in out  # its own sweep, expanded like any other
    # 2 points x (baseline + plain) x 3 rounds x (2 s + 1 s + 0.3 s of overhead) = 40 s,
    # and 5 s for the testbed's build and teardown (secperf.run.estimate.TESTBED_S)
    # (no traced round: the kind has no unit of work to divide softirq time by)
    assert "estimated run time 45 s at 3 rounds, up to 58 s within its budget of 10 min" in out
    assert "(at most 4 rounds a point)" in out
    # its tools reach preflight's table: check says what is missing
    assert "no-such-package" in out


def test_a_new_workload_kind_is_typed_end_to_end(
    tmp_path: Path, registered: WorkloadKind[PingPongWorkload]
) -> None:
    scenario = load_scenario(write(tmp_path))
    small, large = expand_scenario(scenario)
    assert isinstance(small.spec, PingPongWorkload) and (small.spec.size, large.spec.size) == (
        64,
        1024,
    )
    assert small.label == "size=64" and small.record() == {
        "duration": 2.0,
        "warmup": 1.0,
        "size": 64,
    }
    executor = registered.executor
    assert isinstance(executor, EngineExecutor)
    spec = executor.spec(large.spec, "198.18.2.2:5201")
    assert spec == {
        "kind": "rr",
        "duration": 2.0,
        "warmup": 1.0,
        "server": "198.18.2.2:5201",
        "request": 1024,
        "response": 1024,
        "interval": 0.2,  # a tenth of the test, so its series has ten points
    }
    # its records yield its metric, and only while it is registered
    record = {"type": "result", "kind": "pingpong", "transactions_per_second": 1234.0}
    assert extract(record) == {"pingpong_tps": 1234.0}
    assert metrics_for_kind("pingpong") == [PINGPONG_TPS]


def test_a_new_workload_kind_typo_gets_did_you_mean_with_the_line(
    tmp_path: Path, registered: WorkloadKind[PingPongWorkload]
) -> None:
    result = CliRunner().invoke(app, ["check", str(write(tmp_path, "sise = 64"))])
    assert result.exit_code != 0
    out = " ".join(result.output.split())
    assert "pingpong.toml:12" in out and "sise" in out and "did you mean 'size'" in out


def test_a_new_workload_kind_leaves_the_registry_as_it_was() -> None:
    before = WORKLOADS.names()
    with WORKLOADS.registered(KIND):
        assert WORKLOADS.names() == [*before, "pingpong"]
        with pytest.raises(ValueError, match="registered already"):
            WORKLOADS.register(KIND)
    assert WORKLOADS.names() == before
    assert extract({"type": "result", "kind": "pingpong", "transactions_per_second": 1}) == {}
