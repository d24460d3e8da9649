"""The runner's rounds without a testbed: shuffled, seeded, recorded order; the stop rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from secperf.engine import Record
from secperf.plan import BASELINE, Plan, Variant
from secperf.results.rundir import RunDir
from secperf.run.progress import RunProgress
from secperf.run.runner import Runner, round_order
from secperf.scenario.scenario import Scenario

NAMES = [BASELINE, "a", "b", "c"]


def test_round_order_is_a_seeded_shuffle() -> None:
    orders = [round_order(7, "tcp-rr#0", r, NAMES) for r in range(40)]
    assert all(sorted(o) == sorted(NAMES) for o in orders)
    # the same seed, point and round give the same order; another seed another sequence
    assert orders == [round_order(7, "tcp-rr#0", r, NAMES) for r in range(40)]
    assert orders != [round_order(8, "tcp-rr#0", r, NAMES) for r in range(40)]
    assert orders != [round_order(7, "tcp-rr#1", r, NAMES) for r in range(40)]
    # every name leads some round: the baseline is not always measured first
    assert {o[0] for o in orders} == set(NAMES)


def scenario(**repeat: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "t",
            "repeat": {"min": 3, "max": 8, "halfwidth_pct": 2.0, **repeat},
            "variants": {"acl": {"mechanisms": [{"kind": "acl", "rules": 10}]}},
            "workloads": [{"kind": "rr"}],
        }
    )


class FakeRunner(Runner):
    """Measures nothing: each test returns the rr rate `rates(variant, round)`."""

    def __init__(self, sc: Scenario, run: RunDir, rates: Any) -> None:
        plan = Plan.of(sc)
        # two configurations, not rendered (nothing is applied): the baseline and acl
        pairs = set(plan.endpoints.values())
        plan.variant_sets = {pair: [Variant(BASELINE), Variant("acl")] for pair in pairs}
        super().__init__(plan, run, Console(quiet=True))
        self.rates = rates
        self.tests: list[tuple[str, int]] = []
        self.loaded: list[str] = []

    def _apply(self, dut: Any, variant: Variant) -> None:
        self.loaded.append(variant.name)

    def _one_test(self, testbed: Any, variant: Variant, point: Any, rep: int) -> Record:
        self.tests.append((variant.name, rep))
        return {"kind": "rr", "transactions_per_second": self.rates(variant.name, rep)}


class FakeTestbed:
    def host(self, name: str) -> None:
        return None


def measure(tmp_path: Path, sc: Scenario, rates: Any) -> tuple[FakeRunner, dict[str, Any]]:
    run = RunDir.create(tmp_path, "t")
    runner = FakeRunner(sc, run, rates)
    runner._write_meta(order_seed=runner.seed)
    with RunProgress(Console(quiet=True), 1.0) as progress:
        for point in runner.plan.points:
            runner._measure_point(FakeTestbed(), point, progress)  # type: ignore[arg-type]
    return runner, json.loads((run.path / "run.json").read_text())


def drifting(variant: str, rep: int) -> float:
    """Wide drift from round to round, the same 10 % cost every round."""
    base = [100.0, 130.0, 70.0, 115.0, 85.0, 120.0, 90.0, 100.0][rep]
    return base * (0.9 if variant == "acl" else 1.0)


def test_order_is_recorded_and_followed_and_the_paired_rule_stops(tmp_path: Path) -> None:
    runner, meta = measure(tmp_path, scenario(seed=5), drifting)
    (stop,) = meta["stops"]
    # each side's own interval is far wider than ±2 %, the paired cost is exactly 10 %:
    # the point stops at 3 rounds on the paired rule (the old rule ran to max)
    assert stop["reason"] == "ci_met" and stop["reps"] == 3
    assert stop["order"] == [
        round_order(5, stop["point_id"], r, [BASELINE, "acl"]) for r in range(3)
    ]
    done = [name for order in stop["order"] for name in order]
    assert [name for name, _ in runner.tests] == done == runner.loaded
    assert [rep for _, rep in runner.tests] == [0, 0, 1, 1, 2, 2]
    assert meta["order_seed"] == 5


def test_without_a_seed_a_fresh_one_is_drawn_and_recorded(tmp_path: Path) -> None:
    seeds = {measure(tmp_path / str(i), scenario(), drifting)[1]["order_seed"] for i in range(3)}
    assert len(seeds) == 3 and all(isinstance(s, int) for s in seeds)


def test_the_order_changes_between_rounds(tmp_path: Path) -> None:
    # a noisy cost never narrows: max rounds, and the baseline does not always lead
    def noisy(variant: str, rep: int) -> float:
        return (
            100.0 if variant == BASELINE else [90.0, 60.0, 95.0, 70.0, 99.0, 50.0, 80.0, 91.0][rep]
        )

    seeds_with_both = 0
    for seed in range(5):
        _, meta = measure(tmp_path / str(seed), scenario(seed=seed), noisy)
        (stop,) = meta["stops"]
        assert stop["reason"] == "max_reached" and len(stop["order"]) == 8
        seeds_with_both += {o[0] for o in stop["order"]} == {BASELINE, "acl"}
    assert seeds_with_both >= 4


def test_seed_must_be_a_non_negative_integer() -> None:
    with pytest.raises(ValueError):
        scenario(seed=-1)
