"""An older run directory reads as the current format (secperf/results/upgrade.py):
one step per version, each file by its own stored format, and a newer format refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from secperf.errors import SecperfError
from secperf.results.records import SummaryRow
from secperf.results.rundir import RunDir
from secperf.results.upgrade import FORMAT, STEPS, readable, upgrade

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "data" / "runs" / "20261122T010203Z-quick"


def test_every_older_format_has_its_step_and_a_newer_one_is_refused() -> None:
    assert sorted(STEPS) == list(range(1, FORMAT))
    assert all(readable(n) for n in range(1, FORMAT + 1))
    assert not readable(FORMAT + 1) and not readable(0) and not readable("1")


def test_format_1_run_json_gets_its_degradation_target_and_flat_host() -> None:
    old = {
        "format": 1,
        "scenario": {"repeat": {"halfwidth_pct": 3.0}},
        "host": {"hostname": "h", "machine": {"cpu_model": "X", "cpus": 4}},
    }
    new = upgrade(1, old, "run.json")
    assert new["format"] == FORMAT
    assert new["scenario"]["repeat"]["degradation_pp"] == 3.0
    assert new["host"]["cpu_model"] == "X" and new["host"]["cpus"] == 4
    kept = upgrade(1, {"format": 1, "scenario": {"repeat": {"degradation_pp": 1.0}}})
    assert kept["scenario"]["repeat"]["degradation_pp"] == 1.0  # a given target stays


def test_format_1_crr_records_say_close_as_the_engine_does_now() -> None:
    def close(record: dict[str, object]) -> object:
        return upgrade(1, {"record": record}, "records.jsonl")["record"].get("close")

    crr = {"type": "result", "kind": "crr"}
    assert close({**crr, "time_wait_avoidance": "so_linger_0"}) == "reset"
    assert close({**crr, "close": "fin"}) == "client-first"
    assert close({**crr, "close": "server-first"}) == "server-first"
    # connections' own "fin" is the orderly close of that kind: untouched
    assert close({"type": "result", "kind": "connections", "close": "fin"}) == "fin"


def test_format_1_summary_rows_fit_the_current_row(tmp_path: Path) -> None:
    row = json.loads((ROOT / "docs" / "runs" / "quick" / "summary.json").read_text("utf-8"))[
        "rows"
    ][0]
    for name in ("stop_rounds_s", "degradation_scale", "degradation_bound", "validation"):
        row.pop(name, None)
    with pytest.raises(ValueError):
        SummaryRow.model_validate({**row, "x": 1})  # an undeclared field is refused
    new = upgrade(1, {"format": 1, "rows": [row]}, "summary.json")["rows"][0]
    # every field the current row has is there, null where the older secperf wrote none
    assert set(new) == set(SummaryRow.model_fields)
    assert new["stop_rounds_s"] is None and new["degradation_scale"] is None


def test_a_format_1_run_directory_reads_and_a_newer_one_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(SAMPLE, copy)
    assert json.loads((copy / "run.json").read_text("utf-8"))["format"] == 1
    run = RunDir.open(copy)
    assert run.format == 1 and run.read_run_json()["format"] == FORMAT
    assert any(True for _ in run.iter_lines())
    meta = json.loads((copy / "run.json").read_text("utf-8"))
    (copy / "run.json").write_text(json.dumps({**meta, "format": FORMAT + 1}), "utf-8")
    with pytest.raises(SecperfError, match=f"format {FORMAT + 1}"):
        RunDir.open(copy)
