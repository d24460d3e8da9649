"""A kind added in a test runs end to end: the counter mechanism of
tests/unit/test_add_a_mechanism_kind.py, registered for the test alone, through `secperf run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secperf.cli import app
from secperf.mechanisms.registry import MECHANISMS
from tests.netns.rundirs import only_run
from tests.unit.test_add_a_mechanism_kind import KIND, SCENARIO

pytestmark = pytest.mark.netns


def test_new_mechanism_runs(tmp_path: Path) -> None:
    path = tmp_path / "counted.toml"
    path.write_text(SCENARIO.format(key="port"))
    out = tmp_path / "results"
    with MECHANISMS.registered(KIND):
        # Not --json: that quiets the CLI's console for the rest of this process.
        result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    run = only_run(out)
    lines = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    observed = [x for x in lines if x["record"].get("type") == "mechanism"]
    results = [x for x in lines if x["record"].get("type") == "result"]
    # One record per test of the variant (2 rounds), none for the baseline: the rule was
    # applied afresh for every test and counted that test's packets to port 5201.
    assert [x["variant"] for x in observed] == ["counted", "counted"], observed
    for x in observed:
        assert x["record"]["kind"] == "counter" and x["record"]["hosts"] == ["dut"]
        assert x["record"]["packets"] > 0, x
    measured = [x for x in results if x["variant"] == "counted"]
    assert len(measured) == 2 and all(x["record"]["transactions"] > 0 for x in measured)
    assert json.loads((run / "run.json").read_text())["placements"]["counted"] == [
        {"kind": "counter", "hosts": ["dut"]}
    ]
