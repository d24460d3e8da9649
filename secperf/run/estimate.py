"""How long a scenario takes, planned before it runs: every point's tests as its
workload kind plans them, times the configurations measured at it, times the rounds."""

from __future__ import annotations

from secperf.plan import expanded_variants
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import WorkloadPoint, expand_scenario
from secperf.workloads.registry import WORKLOADS

# Seconds a test costs beyond its duration and warm-up: connect, setup, teardown.
TEST_OVERHEAD_S = 0.3


def point_seconds(
    point: WorkloadPoint, rounds: int, tests_per_round: int, link_bps: int | None = None
) -> float:
    """The time `rounds` rounds of `tests_per_round` tests of this point take, planned:
    one test as its kind plans it (`link_bps`: the scenario's slowest link rate)."""
    per_test = WORKLOADS.get(point.kind).test_seconds(point.spec, link_bps)
    return rounds * tests_per_round * (per_test + TEST_OVERHEAD_S)


def estimate_seconds(scenario: Scenario) -> tuple[float, float]:
    """The run's planned measuring time: (at `repeat.min` rounds, at `repeat.max` rounds).

    Testbed build and teardown (a few seconds) and searches' extra probes are not in it."""
    points = expand_scenario(scenario)
    names = [name for name, _m, _s in expanded_variants(scenario)]
    bps = slowest_link(scenario)
    lo = hi = 0.0
    for p in points:
        tests = 1 + sum(p.measures(n) for n in names)
        lo += point_seconds(p, scenario.repeat.min, tests, bps)
        hi += point_seconds(p, scenario.repeat.max, tests, bps)
    return lo, hi


def slowest_link(scenario: Scenario) -> int | None:
    """The lowest link rate the scenario sets anywhere (a fixed transfer's estimate)."""
    rates = [scenario.testbed.link_rate]
    if scenario.topology is not None:
        rates += [link.rate for link in scenario.topology.links]
        rates += [zone.rate for zone in scenario.topology.zones.values()]
    return min((r for r in rates if r), default=None)


def fmt_eta(seconds: float) -> str:
    """`45 s`, `12 min`, `2 h 05 min`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
