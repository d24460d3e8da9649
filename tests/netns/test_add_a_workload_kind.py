"""A workload kind added in one place (its module and a registry line) runs through
`secperf run` like a shipped one: measured on a real testbed, its own metric in the
summary and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from pydantic import Field
from typer.testing import CliRunner

from secperf.cli import app
from secperf.metric import Metric, field
from secperf.workloads.base import EngineExecutor, WorkloadKind, WorkloadSpec
from secperf.workloads.registry import WORKLOADS
from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns


class PingPongWorkload(WorkloadSpec):
    """Request and response of one `size`, as an rr of the engine."""

    engine_kind: ClassVar[str] = "rr"
    engine_fields: ClassVar[tuple[str, ...]] = ("duration", "warmup")

    kind: Literal["pingpong"]
    size: int = Field(default=64, ge=1, le=1400)

    def default_name(self) -> str:
        return "pingpong"


def sizes(spec: PingPongWorkload) -> dict[str, Any]:
    return {"request": spec.size, "response": spec.size}


PINGPONG_TPS = Metric("pingpong_tps", "Ping-pong rate", "exchanges/s", True, True)

KIND = WorkloadKind(
    name="pingpong",
    model=PingPongWorkload,
    executor=EngineExecutor(extra=sizes),
    metrics=((PINGPONG_TPS, field("transactions_per_second")),),
    moved=("transactions",),
)

SCENARIO = """\
name = "pingpong"
[repeat]
min = 2
max = 2
# one result per round: none measured again, no traced or attribution round
remeasure = 0
trace_softirq = false
attribution = false
[timing]
duration = "1s"
warmup = "0.2s"
[variants.plain]
mechanisms = []
[[workloads]]
kind = "pingpong"
size = 256
"""


def test_new_workload_runs(tmp_path: Path) -> None:
    path = tmp_path / "pingpong.toml"
    path.write_text(SCENARIO)
    with WORKLOADS.registered(KIND):
        result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    assert "Ping-pong rate" in result.output  # its verdict line, in the answer
    run_dir = only_run(tmp_path / "results")
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [r for r in summary["rows"] if r["metric"] == "pingpong_tps"]
    assert {r["variant"] for r in rows} == {"baseline", "plain"}, summary["rows"]
    for row in rows:
        assert row["kind"] == "pingpong" and row["primary"] is True
        assert row["n"] == 2 and row["mean"] > 100, row  # exchanges/s through the DUT
    # the engine ran an rr of the kind's size; its result is filed under the kind
    lines = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    starts = [ln["record"] for ln in lines if ln["record"].get("type") == "start"]
    assert starts and all(s["spec"]["request"] == 256 for s in starts), starts[:1]
    results = [ln for ln in lines if ln["record"].get("type") == "result"]
    assert len(results) == 4 and all(ln["record"]["kind"] == "pingpong" for ln in results)
    assert all(ln["point"] == {"duration": 1.0, "warmup": 0.2, "size": 256} for ln in results)
    assert "Ping-pong rate" in (run_dir / "report.html").read_text()
