"""The rounds with a precision plan, without a testbed: the noise calibration before
the first round (and its cache), the planned test duration (kept where the scenario
pins it), the next round to the widest relative interval, and variants within their
targets sitting out later rounds."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from secperf.engine import Record
from secperf.plan import BASELINE, Plan, Variant
from secperf.results.rundir import RunDir
from secperf.run.noise import CALIBRATION_DURATIONS, CALIBRATION_TESTS
from secperf.run.rounds import Measured
from secperf.run.runner import Runner
from secperf.scenario.scenario import Scenario


def scenario(workloads: list[dict[str, Any]], variants: int = 1, **repeat: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "t",
            "repeat": {"min": 3, "max": 40, "trace_softirq": False, "seed": 1, **repeat},
            "timing": {"duration": "1s", "warmup": "0s"},
            "variants": {
                f"v{i}": {"mechanisms": [{"kind": "acl", "rules": 10}]} for i in range(variants)
            },
            "workloads": [{"kind": "rr", **w} for w in workloads],
        }
    )


class Fake(Runner):
    """Each test returns `rate(point_id, variant, rep, duration, phase)` and takes its
    duration plus 0.5 s on the fake clock."""

    def __init__(self, sc: Scenario, run: RunDir, rate: Any) -> None:
        plan = Plan.of(sc)
        names = [BASELINE, *sc.variants]
        pairs = set(plan.endpoints.values())
        plan.variant_sets = {pair: [Variant(n) for n in names] for pair in pairs}
        super().__init__(plan, run, Console(file=io.StringIO(), record=True, width=200))
        self.rate = rate
        self.now = 0.0
        self.clock = lambda: self.now  # type: ignore[method-assign,assignment]
        self.tests: list[tuple[str, str, int, float, str | None]] = []

    def _measure_test(
        self, testbed: Any, variant: Variant, point: Any, rep: int, *, phase: str | None = None
    ) -> Measured:
        d = point.spec.duration
        self.tests.append((point.point_id, variant.name, rep, d, phase))
        self.now += d + 0.5
        value = self.rate(point.point_id, variant.name, rep, d, phase)
        result: Record = {"kind": "rr", "transactions_per_second": value}
        return Measured(result)


class Testbed:
    lab = True

    def host(self, name: str) -> None:
        return None


def run(tmp_path: Path, sc: Scenario, rate: Any) -> tuple[Fake, dict[str, Any]]:
    rundir = RunDir.create(tmp_path, "t")
    fake = Fake(sc, rundir, rate)
    fake._write_meta(order_seed=fake.seed)
    fake._measure_all(Testbed())  # type: ignore[arg-type]
    return fake, json.loads((rundir.path / "run.json").read_text())


def white(spread: float) -> Any:
    """A rate of 1000 (the variants' 10 % less) with a noise of `spread` in a 1 s test
    that a test of d s averages as 1 / sqrt(d): up and down by turns, the variants'
    against the baseline's, so that its spread is known exactly and nothing drifts."""

    def rate(pid: str, variant: str, rep: int, d: float, phase: str | None) -> float:
        sign = 1.0 if (rep + (variant != BASELINE)) % 2 else -1.0
        cost = 1.0 if variant == BASELINE else 0.9
        return 1000.0 * cost * math.exp(sign * spread / math.sqrt(d))

    return rate


def test_the_next_round_goes_to_the_widest_relative_interval(tmp_path: Path) -> None:
    """Two points, one ten times noisier: with a budget that cannot meet both, the
    noisy one takes the rounds; the quiet one stops once within its target."""
    sc = scenario([{"request": 1}, {"request": 2}], budget=45)
    quiet, loud = white(0.002), white(0.03)

    def rate(pid: str, variant: str, rep: int, d: float, phase: str | None) -> float:
        return (quiet if pid == "tcp-rr#0" else loud)(pid, variant, rep, d, phase)

    fake, meta = run(tmp_path, sc, rate)
    first, second = meta["stops"]
    assert first["reason"] == "ci_met" and first["reps"] <= 5
    assert second["reason"] == "budget_spent"
    assert second["reps"] > 3 * first["reps"]
    assert fake.now <= 45.0 + 3.0  # within the budget but the last round


def test_a_variant_within_its_target_sits_out_later_rounds(tmp_path: Path) -> None:
    sc = scenario([{"request": 1}], variants=2, budget=60)

    def rate(pid: str, variant: str, rep: int, d: float, phase: str | None) -> float:
        if variant == "v0":  # exactly 10 % every round: within target at 3 rounds
            return 900.0 * (1 + 0.1 * math.sin(rep))
        wobble = [0.6, 0.95, 0.7, 0.99, 0.5, 0.8][rep % 6]
        return 1000.0 * (1 + 0.1 * math.sin(rep)) * (wobble if variant == "v1" else 1.0)

    fake, meta = run(tmp_path, sc, rate)
    (stop,) = meta["stops"]
    assert stop["settled"] == {"v0": 3}
    v0 = [rep for _pid, name, rep, _d, _ph in fake.tests if name == "v0"]
    base = [rep for _pid, name, rep, _d, _ph in fake.tests if name == BASELINE]
    assert v0 == [0, 1, 2]
    assert len(base) == stop["reps"] > 3  # the baseline goes on beside v1, paired
    v1 = [rep for _pid, name, rep, _d, _ph in fake.tests if name == "v1"]
    assert v1 == base
    # the recorded orders name who ran: v0 in the first 3 rounds only
    assert [sorted(o) for o in stop["order"][3:]] == [[BASELINE, "v1"]] * (len(base) - 3)
    assert all("v0" in o for o in stop["order"][:3])


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state"
    monkeypatch.setenv("SECPERF_STATE_DIR", str(path))
    return path


def test_calibration_plans_the_duration_and_the_cache_is_reused(
    tmp_path: Path, state_dir: Path
) -> None:
    """Fast noise: the calibration's baseline tests at each duration, then longer
    tests than the scenario's 1 s; a workload that gives its own duration keeps it.
    The next run of the same shape takes the cached calibration and measures none."""
    sc = scenario([{"request": 1}, {"request": 2, "duration": "1s"}], calibrate="fresh", budget=300)
    fake, meta = run(tmp_path / "a", sc, white(0.05))
    noise = [t for t in fake.tests if t[4] == "noise"]
    assert len(noise) == 2 * len(CALIBRATION_DURATIONS) * CALIBRATION_TESTS
    assert {t[1] for t in noise} == {BASELINE}
    planned, pinned = meta["precision"]["points"]
    assert planned["duration"] > 1.0 and not planned["pinned"]
    assert pinned["duration"] == 1.0 and pinned["pinned"]
    assert "as the scenario pins it" in pinned["why"]
    rounds = {t[3] for t in fake.tests if t[4] is None and t[0] == planned["point_id"]}
    assert rounds == {planned["duration"]}
    forecast = meta["precision"]["forecast"]
    # the pinned 1 s tests need more rounds than the cap allows
    assert forecast["needs_s"] is None
    assert forecast["text"].startswith("±2 points is past the round cap here; the 5 min budget")
    text = fake.console.export_text()
    assert "precision: ±2 points" in text and "[repeat] max = 40 stops the rounds first" in text
    assert text.index("precision:") < text.index("point(s) x")
    assert planned["source"] == "measured"
    assert list((state_dir / "noise").glob("*.json"))

    again = sc.model_copy(update={"repeat": sc.repeat.model_copy(update={"calibrate": "cached"})})
    fake2, meta2 = run(tmp_path / "b", again, white(0.05))
    assert not [t for t in fake2.tests if t[4] == "noise"]
    assert isinstance(meta2["precision"]["points"][0]["source"], float)
    assert meta2["precision"]["points"][0]["duration"] == planned["duration"]


def test_calibration_off_measures_nothing_extra(tmp_path: Path, state_dir: Path) -> None:
    fake, meta = run(tmp_path, scenario([{"request": 1}], budget=10), white(0.01))
    assert not [t for t in fake.tests if t[4] == "noise"]
    assert "precision" not in meta
