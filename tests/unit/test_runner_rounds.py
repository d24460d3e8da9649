"""The runner's rounds without a testbed: shuffled, seeded, recorded order; the stop
rule; the budget shared between points; a disturbed round measured again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from secperf.engine import Record
from secperf.plan import BASELINE, Plan, Variant
from secperf.results.rundir import RunDir
from secperf.run.estimate import estimate, least_rounds
from secperf.run.rounds import Measured, round_order
from secperf.run.runner import Runner
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import expand_scenario

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


def scenario(workloads: int = 1, **repeat: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "t",
            "repeat": {"min": 3, "max": 8, "trace_softirq": False, **repeat},
            "variants": {"acl": {"mechanisms": [{"kind": "acl", "rules": 10}]}},
            "workloads": [{"kind": "rr", "request": 1 + i} for i in range(workloads)],
        }
    )


class Clock:
    """A clock that each test moves on by `step` seconds."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        return self.now


class Window:
    """What the machine's meter says of a test: disturbed or not."""

    def __init__(self, disturbed: bool) -> None:
        self._disturbed = disturbed

    def disturbed(self, threshold_pct: float) -> bool:
        return self._disturbed


class FakeRunner(Runner):
    """Measures nothing: each test returns the rr rate `rates(variant, round)`, takes
    `clock.step` seconds, and is disturbed when `disturbed(variant, round, attempt)`."""

    def __init__(
        self, sc: Scenario, run: RunDir, rates: Any, step: float = 1.0, disturbed: Any = None
    ) -> None:
        plan = Plan.of(sc)
        # two configurations, not rendered (nothing is applied): the baseline and acl
        pairs = set(plan.endpoints.values())
        plan.variant_sets = {pair: [Variant(BASELINE), Variant("acl")] for pair in pairs}
        super().__init__(plan, run, Console(quiet=True))
        self.rates = rates
        self.fake_clock = Clock(step)
        self.clock = self.fake_clock  # type: ignore[method-assign,assignment]
        self.disturbs = disturbed or (lambda variant, rep, attempt: False)
        self.tests: list[tuple[str, int]] = []
        self.points: list[str] = []
        self.loaded: list[str] = []

    def _measure_test(
        self, testbed: Any, variant: Variant, point: Any, rep: int, *, phase: str | None = None
    ) -> Measured:
        self.loaded.append(variant.name)
        attempt = sum(1 for name, r in self.tests if name == variant.name and r == rep)
        self.tests.append((variant.name, rep))
        self.points.append(point.point_id)
        self.fake_clock.now += self.fake_clock.step
        result: Record = {"kind": "rr", "transactions_per_second": self.rates(variant.name, rep)}
        return Measured(result, Window(self.disturbs(variant.name, rep, attempt)))  # type: ignore[arg-type]


class FakeTestbed:
    lab = True

    def host(self, name: str) -> None:
        return None


def measure(
    tmp_path: Path, sc: Scenario, rates: Any, **fake: Any
) -> tuple[FakeRunner, dict[str, Any]]:
    run = RunDir.create(tmp_path, "t")
    runner = FakeRunner(sc, run, rates, **fake)
    runner._write_meta(order_seed=runner.seed)
    runner._measure_all(FakeTestbed())  # type: ignore[arg-type]
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


def steady(variant: str, rep: int) -> float:
    return 100.0 if variant == BASELINE else 90.0


def noisy(variant: str, rep: int) -> float:
    return 100.0 if variant == BASELINE else [90.0, 60.0, 95.0, 70.0, 99.0, 50.0, 80.0, 91.0][rep]


def test_the_budget_stops_a_point_that_cannot_narrow(tmp_path: Path) -> None:
    # each test takes 1 s, a round 2 s: a 10 s budget holds 5 rounds, not the cap of 8
    runner, meta = measure(tmp_path, scenario(seed=1, budget=10), noisy)
    (stop,) = meta["stops"]
    assert stop["reason"] == "budget_spent" and stop["reps"] == 5
    assert runner.fake_clock.now <= 10.0


def test_the_minimum_rounds_run_whatever_the_budget(tmp_path: Path) -> None:
    _, meta = measure(tmp_path, scenario(seed=1, budget=1, min=4), noisy)
    (stop,) = meta["stops"]
    assert stop["reps"] == 4 and stop["reason"] == "budget_spent"


def test_a_workloads_own_minimum_runs_past_the_budget_and_the_cap(tmp_path: Path) -> None:
    # two points, a 1 s budget, [repeat] min 3 and max 8: the second workload asks for
    # 10 rounds of its own, more than the file's cap; the first keeps the file's 3
    sc = scenario(workloads=2, seed=2, budget=1)
    sc.workloads[1].min_rounds = 10
    _, meta = measure(tmp_path, sc, lambda v, r: noisy(v, r % 8))
    first, second = meta["stops"]
    assert first["reps"] == 3 and second["reps"] == 10
    assert second["reason"] == "max_reached"  # its cap rose to its own minimum


def test_a_workloads_minimum_is_checked_and_planned(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="min_rounds"):
        Scenario.model_validate({"name": "t", "workloads": [{"kind": "rr", "min_rounds": 1}]})
    sc = scenario(workloads=2, seed=2, budget=1)
    sc.workloads[1].min_rounds = 10
    est = estimate(sc)
    assert est.rounds == [3, 10]
    assert least_rounds(sc) == f"3 rounds ({sc.workloads[1].name}: 10)"
    # not a parameter of the test: records carry the same point either way
    assert "min_rounds" not in expand_scenario(sc)[1].record()


def test_a_point_that_converges_leaves_its_time_to_the_next(tmp_path: Path) -> None:
    # point 0 converges at 3 rounds (6 s); point 1 never narrows: with 30 s it gets
    # what point 0 left (24 s = 12 rounds), capped at 8
    def rates(variant: str, rep: int) -> float:
        return steady(variant, rep)

    sc = scenario(workloads=2, seed=3, budget=30, max=20)
    run = RunDir.create(tmp_path, "t")
    runner = FakeRunner(sc, run, rates)
    first = sc.workloads[0].name
    runner.rates = lambda v, r: (
        steady(v, r) if runner.points[-1].split("#")[0] == first else noisy(v, r % 8)
    )
    runner._write_meta(order_seed=runner.seed)
    runner._measure_all(FakeTestbed())  # type: ignore[arg-type]
    stops = json.loads((run.path / "run.json").read_text())["stops"]
    assert [s["reason"] for s in stops] == ["ci_met", "budget_spent"]
    assert stops[0]["reps"] == 3
    # an equal split would have given point 1 at most 15 s (7 rounds); it got 12
    assert stops[1]["reps"] == 12
    assert runner.fake_clock.now <= 30.0


def test_a_point_short_of_its_target_is_visited_again_with_what_is_left(tmp_path: Path) -> None:
    # point 0 never narrows and point 1 converges at once: pass 1 gives point 0 half
    # the budget (10 s: 5 rounds); pass 2 gives it what point 1 left
    sc = scenario(workloads=2, seed=3, budget=20, max=20)
    run = RunDir.create(tmp_path, "t")
    runner = FakeRunner(sc, run, steady)
    second = sc.workloads[1].name
    runner.rates = lambda v, r: (
        steady(v, r) if runner.points[-1].split("#")[0] == second else noisy(v, r % 8)
    )
    runner._write_meta(order_seed=runner.seed)
    runner._measure_all(FakeTestbed())  # type: ignore[arg-type]
    stops = json.loads((run.path / "run.json").read_text())["stops"]
    assert [s["reason"] for s in stops] == ["budget_spent", "ci_met"]
    assert stops[1]["reps"] == 3
    assert stops[0]["reps"] == 10 - 3  # 20 s in all: 3 rounds for point 1, 7 for point 0
    # the revisit numbered its rounds on: 0..6, each pairing its own baseline
    assert sorted(
        {
            r
            for p, (_, r) in zip(runner.points, runner.tests, strict=True)
            if p.split("#")[0] == sc.workloads[0].name
        }
    ) == list(range(7))


def test_a_disturbed_round_is_measured_again_and_its_values_replaced(tmp_path: Path) -> None:
    # round 1's first attempt is disturbed (and its cost reads 50 %): measured again
    def rates(variant: str, rep: int) -> float:
        return steady(variant, rep)

    def disturbed(variant: str, rep: int, attempt: int) -> bool:
        return rep == 1 and attempt == 0

    run = RunDir.create(tmp_path, "t")
    runner = FakeRunner(scenario(seed=2), run, rates, disturbed=disturbed)
    calls: list[int] = []

    def once_wrong(variant: str, rep: int) -> float:
        calls.append(rep)
        first_try = rep == 1 and calls.count(1) <= 2
        return 50.0 if first_try and variant != BASELINE else steady(variant, rep)

    runner.rates = once_wrong
    runner._write_meta(order_seed=runner.seed)
    runner._measure_all(FakeTestbed())  # type: ignore[arg-type]
    (stop,) = json.loads((run.path / "run.json").read_text())["stops"]
    assert stop["remeasured"] == [1] and stop["disturbed"] == []
    # 3 rounds and one measured again: 4 orders, 8 tests; the pairs are steady again
    assert len(stop["order"]) == 4 and len(runner.tests) == 8
    assert stop["reason"] == "ci_met" and stop["reps"] == 3


def test_a_round_disturbed_every_time_is_kept_and_flagged(tmp_path: Path) -> None:
    _, meta = measure(
        tmp_path,
        scenario(seed=2, remeasure=1),
        steady,
        disturbed=lambda v, rep, attempt: rep == 0,
    )
    (stop,) = meta["stops"]
    assert stop["remeasured"] == [0] and stop["disturbed"] == [0]
    assert len(stop["order"]) == 4  # round 0 twice, then rounds 1 and 2


def test_persistent_noise_stops_the_retries_until_a_round_is_clean(tmp_path: Path) -> None:
    # every test disturbed: round 0 tries 3 times, then retrying cannot help, and
    # rounds 1 and 2 are kept and flagged at once
    _, meta = measure(tmp_path, scenario(seed=2), steady, disturbed=lambda v, rep, attempt: True)
    (stop,) = meta["stops"]
    assert stop["remeasured"] == [0, 0] and stop["disturbed"] == [0, 1, 2]
    assert len(stop["order"]) == 5
