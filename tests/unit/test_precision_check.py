"""`secperf check` says what the budget resolves from this machine's cached noise
calibration, and the flag that would reach the target; --budget, --until-target and
--calibrate change what the run would do."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from secperf.cli import app
from secperf.run import calibrate
from secperf.run.noise import NoiseModel
from secperf.scenario.loader import load_scenario
from secperf.scenario.sweep import expand_scenario

SCENARIO = """
name = "t"
[repeat]
budget = "30s"
calibrate = "cached"
trace_softirq = false
[timing]
duration = "1s"
warmup = "0.1s"
[variants.acl]
mechanisms = [{ kind = "acl", rules = 10 }]
[[workloads]]
kind = "rr"
"""


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SECPERF_STATE_DIR", str(tmp_path / "state"))
    path = tmp_path / "t.toml"
    path.write_text(SCENARIO)
    return path


def check(*args: str) -> tuple[int, str]:
    got = CliRunner().invoke(app, ["check", *args], terminal_width=300)
    return got.exit_code, " ".join(got.output.split())


def test_check_says_how_to_calibrate_when_nothing_is_cached(scenario: Path) -> None:
    code, out = check(str(scenario))
    assert code == 0, out
    assert "not calibrated yet for this testbed: the run measures it first (about " in out
    code, out = check(str(scenario), "--calibrate", "off")
    assert code == 0 and "--calibrate cached measures this machine's noise first" in out


def test_check_forecasts_from_the_cached_calibration(scenario: Path) -> None:
    sc = load_scenario(scenario)
    (point,) = expand_scenario(sc)
    # 5 % noise a 1 s test (all of it averages away), 0.4 s a test beyond its length
    calibrate.save(calibrate.cache_key(sc, point), "tps", NoiseModel(2 * 0.05**2, 0.0, 0.4))
    code, out = check(str(scenario))
    assert code == 0, out
    assert "precision: ±2 points needs about " in out
    assert "the 30 s budget gives about ±" in out
    assert "--until-target runs on until it is reached" in out
    code, out = check(str(scenario), "--until-target")
    assert code == 0 and "precision: ±2 points needs about " in out and "within the" in out
    code, out = check(str(scenario), "--budget", "1h")
    assert code == 0 and "within the 60 min budget" in out


def test_bad_precision_flags_are_usage_errors(scenario: Path) -> None:
    assert check(str(scenario), "--budget", "3x")[0] == 2
    assert check(str(scenario), "--budget", "1min", "--until-target")[0] == 2
    assert check(str(scenario), "--calibrate", "sometimes")[0] == 2


def test_the_traced_rounds_are_set_aside_from_the_budget(scenario: Path) -> None:
    """The traced and attribution rounds spend the budget too: the forecast gives the
    rounds what they leave (a quick run once got 3 stream rounds, forecast 3 + more)."""
    sc = load_scenario(scenario)
    (point,) = expand_scenario(sc)
    calibrate.save(calibrate.cache_key(sc, point), "tps", NoiseModel(2 * 0.05**2, 0.0, 0.4))

    def widest(text: str) -> float:
        path = scenario.with_name("u.toml")
        path.write_text(text)
        code, out = check(str(path))
        assert code == 0, out
        return float(out.split("budget gives about ±")[1].split()[0])

    plain = widest(SCENARIO)
    traced = widest(SCENARIO.replace("trace_softirq = false", "trace_softirq = true"))
    assert traced > plain
