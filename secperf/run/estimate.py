"""How long a scenario takes, planned before it runs: every point's tests as its
workload kind plans them, times the configurations measured at it, times the rounds
(at least `min`; beyond that, what the budget allows, at most `max`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from secperf.mechanisms.registry import MECHANISMS
from secperf.plan import expanded_variants
from secperf.run.budget import estimate_rounds
from secperf.run.noise import CALIBRATION_DURATIONS, CALIBRATION_TESTS
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import WorkloadPoint, expand_scenario
from secperf.testbed.hosts.registry import BACKENDS
from secperf.workloads.registry import WORKLOADS

# Seconds a test costs beyond its duration and warm-up: connect, setup, teardown.
TEST_OVERHEAD_S = 0.3


# Seconds a run costs beyond its tests: the testbed built and torn down (the kept quick
# run: about 5 s beside its tests).
TESTBED_S = 5.0


def point_seconds(
    point: WorkloadPoint,
    rounds: int,
    tests_per_round: int,
    link_bps: int | None = None,
    setup_s: float = 0.0,
) -> float:
    """The time `rounds` rounds of `tests_per_round` tests of this point take, planned:
    one test as its kind plans it (`link_bps`: the scenario's slowest link rate), and
    `setup_s` a round for loading its variants (round_setup_seconds)."""
    per_test = WORKLOADS.get(point.kind).test_seconds(point.spec, link_bps)
    return rounds * (tests_per_round * (per_test + TEST_OVERHEAD_S) + setup_s)


def backends_start_seconds(scenario: Scenario) -> float:
    """Starting the hosts of the backends the scenario names (a VM's boot), once."""
    names = {v.backend for v in scenario.variants.values()}
    names |= {h.backend for h in scenario.testbed.hosts.values()}
    return sum(BACKENDS.get(name).start_s for name in names)


def round_setup_seconds(scenario: Scenario, point: WorkloadPoint) -> float:
    """Loading the variants of one round at `point` (each before its test): their
    mechanisms' `apply_s`."""
    return sum(
        MECHANISMS.of(m).apply_s
        for name, mechanisms, _s in expanded_variants(scenario)
        if point.measures(name)
        for m in mechanisms
    )


def planned_rounds(scenario: Scenario, points: Sequence[tuple[WorkloadPoint, int]]) -> list[int]:
    """Rounds each point can run within the budget shared equally (at least its
    minimum, at most its maximum): `points` are (point, configurations measured at it)."""
    bps = slowest_link(scenario)
    rep = scenario.repeat
    one = [point_seconds(p, 1, tests, bps) for p, tests in points]
    bounds = [(p.min_rounds(rep.min), p.max_rounds(rep.max)) for p, _t in points]
    return estimate_rounds(rep.budget, bounds, one)


@dataclass(frozen=True)
class Estimate:
    """The run's planned time: its tests as their kinds plan them (a search's probes
    included), loading each test's variant, the testbed's build and teardown."""

    minimum: float  # every point at its minimum rounds: the least the run takes
    planned: float  # the rounds the budget allows each point (at most `max`)
    budget: float  # [repeat] budget
    rounds: list[int]  # the rounds planned for each point
    traced: bool = False  # some point gets a traced round beside its rounds

    @property
    def over_budget(self) -> bool:
        """The minimum rounds alone take longer than the budget (they run anyway)."""
        return self.minimum > self.budget


def estimate(scenario: Scenario) -> Estimate:
    """The run's time at its minimum rounds and within its budget, before it runs."""
    points = expand_scenario(scenario)
    names = [name for name, _m, _s in expanded_variants(scenario)]
    bps = slowest_link(scenario)
    pairs = [(p, 1 + sum(p.measures(n) for n in names)) for p in points]
    rounds = planned_rounds(scenario, pairs)

    def traced(p: WorkloadPoint) -> int:
        return traced_rounds(scenario, p)

    least = scenario.repeat.min
    # the noise calibration (at most: a cached one measures nothing)
    calibration = (
        sum(
            calibration_seconds(p)
            for p, t in pairs
            if t >= 2 and WORKLOADS.get(p.kind).calibrates(p.spec)
        )
        if scenario.repeat.calibrate != "off"
        else 0.0
    )
    setup = {p.point_id: round_setup_seconds(scenario, p) for p, _t in pairs}
    fixed = TESTBED_S + calibration + backends_start_seconds(scenario)
    minimum = fixed + sum(
        point_seconds(p, p.min_rounds(least) + traced(p), t, bps, setup[p.point_id])
        for p, t in pairs
    )
    planned = fixed + sum(
        point_seconds(p, n + traced(p), t, bps, setup[p.point_id])
        for (p, t), n in zip(pairs, rounds, strict=True)
    )
    some = any(traced(p) for p, _t in pairs)
    return Estimate(minimum, max(planned, minimum), scenario.repeat.budget, rounds, some)


def traced_rounds(scenario: Scenario, point: WorkloadPoint) -> int:
    """The traced rounds of a point with a unit of work: the softirq round, and the
    attribution round's two (profiled, counted; the baseline's one)."""
    if WORKLOADS.get(point.kind).work_unit is None:
        return 0
    return int(scenario.repeat.trace_softirq) + 2 * int(scenario.repeat.attributes)


def calibration_seconds(point: WorkloadPoint) -> float:
    """About how long one point's noise calibration takes (secperf.run.calibrate)."""
    per = point.spec.warmup + TEST_OVERHEAD_S
    return sum((d + per) * CALIBRATION_TESTS for d in CALIBRATION_DURATIONS)


def estimate_seconds(scenario: Scenario) -> tuple[float, float]:
    """(at `repeat.min` rounds, within the budget): the run's planned measuring time."""
    e = estimate(scenario)
    return e.minimum, max(e.minimum, e.planned)


def least_rounds(scenario: Scenario) -> str:
    """`3 rounds`, or `3 rounds (delay: 8)` when workloads ask for more of their own."""
    own = [f"{w.name}: {w.min_rounds}" for w in scenario.workloads if w.min_rounds]
    return f"{scenario.repeat.min} rounds" + (f" ({', '.join(own)})" if own else "")


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


# A run's records on disk (records.jsonl), bounded before it runs: a line of the engine's
# is at most about this long (the kept runs' average 450-600 B; an http interval record
# with its latency histogram is the longest), and a run may keep at most RECORDS_MAX_BYTES.
RECORD_BYTES = 1024
RECORDS_MAX_BYTES = 1024**3
# Lines of a test besides its interval records: start, result, a mechanism's, a spare.
FIXED_LINES = 4


@dataclass(frozen=True)
class RecordsEstimate:
    """The most records.jsonl may hold, planned: every test of the planned rounds (and
    the traced round), each disturbed round measured again, from every generator."""

    bytes: float
    # Record lines per second of interval at 1 s, summed over the tests: with an interval
    # of T s the interval records are interval_seconds / T lines.
    interval_seconds: float
    fixed_bytes: float

    def floor(self) -> float:
        """The shortest interval at which the records fit RECORDS_MAX_BYTES (inf: none)."""
        room = RECORDS_MAX_BYTES - self.fixed_bytes
        return self.interval_seconds * RECORD_BYTES / room if room > 0 else float("inf")


def records_estimate(scenario: Scenario) -> RecordsEstimate:
    """What the run's records may take on disk at most (RecordsEstimate)."""
    points = expand_scenario(scenario)
    names = [name for name, _m, _s in expanded_variants(scenario)]
    pairs = [(p, 1 + sum(p.measures(n) for n in names)) for p in points]
    rounds = planned_rounds(scenario, pairs)
    again = 1 + scenario.repeat.remeasure
    total = seconds = fixed = 0.0
    for (p, tests), n in zip(pairs, rounds, strict=True):
        count = (n + 1) * tests * again * p.generators
        fixed += count * FIXED_LINES * RECORD_BYTES
        every = p.spec.record_interval()
        if every > 0:
            length = p.spec.duration + p.spec.warmup
            seconds += count * length
            total += count * (length / every) * RECORD_BYTES
    return RecordsEstimate(total + fixed, seconds, fixed)
