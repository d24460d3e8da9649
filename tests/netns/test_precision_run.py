"""A real run with the noise calibration: the baseline's calibration tests before the
first round, the forecast said before the rounds, and said again in the answer and
summary.json beside what the run reached."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from secperf.run.noise import CALIBRATION_DURATIONS, CALIBRATION_TESTS
from secperf.testbed.ledger import ledgers
from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns

SCENARIO = """
name = "planned"
[repeat]
min = 3
max = 6
budget = "20s"
remeasure = 0
trace_softirq = false
attribution = false
[timing]
duration = "0.5s"
warmup = "0.1s"
[variants.acl]
mechanisms = [{ kind = "acl", rules = 300, layout = "linear" }]
[[workloads]]
kind = "rr"
request = 1
response = 1
"""


def test_a_calibrated_run_says_its_forecast_first_and_again_in_its_answer(
    tmp_path: Path, state_dir: Path
) -> None:
    scenario = tmp_path / "planned.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "results"
    args = ["run", str(scenario), "--out", str(out), "--calibrate", "fresh"]
    proc = subprocess.run(
        [sys.executable, "-m", "secperf", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    lines = proc.stdout.splitlines()
    said = [i for i, line in enumerate(lines) if line.startswith("precision: ±2 points")]
    rounds = [i for i, line in enumerate(lines) if "point 1/1, round 1/" in line]
    assert said and rounds and said[0] < rounds[0], proc.stdout
    head = [i for i, line in enumerate(lines) if "point(s) x 2 configuration(s)" in line]
    assert said[0] < head[0]
    run_dir = only_run(out)
    meta = json.loads((run_dir / "run.json").read_text())
    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    noise = [r for r in records if r.get("phase") == "noise" and r["record"]["type"] == "result"]
    assert len(noise) == len(CALIBRATION_DURATIONS) * CALIBRATION_TESTS
    assert {r["variant"] for r in noise} == {"baseline"}
    (planned,) = meta["precision"]["points"]
    assert planned["source"] == "measured" and planned["duration"] >= 0.5
    forecast = meta["precision"]["forecast"]["text"]
    assert lines[said[0]].startswith(f"precision: {forecast}")
    # the rounds ran at the planned duration
    measured = [r for r in records if "phase" not in r and r["record"]["type"] == "result"]
    assert {r["point"]["duration"] for r in measured} == {planned["duration"]}
    summary = json.loads((run_dir / "summary.json").read_text())
    back = summary["precision"]
    assert back["forecast"]["text"] == forecast and back["reached_pp"] is not None
    assert f"Precision planned before the run: {forecast}; reached ±" in proc.stdout
    assert forecast in (run_dir / "report.html").read_text()
    # kept for the next run of this shape on this machine, beside (not among) ledgers
    assert list((state_dir / "noise").glob("*.json")) and ledgers(state_dir) == []
