"""The rounds of a run: how a point's rounds go, and how the points share the budget.

For every workload point the baseline and every variant are measured in rounds, each
round in its own shuffled order (seeded; the seed and every round's order are
recorded in run.json). Rounds go on until, for every variant, the paired
degradation of each primary metric has a confidence interval as narrow as the
scenario asks (at least 3 rounds), the run's time budget is spent (how the points
share it: secperf.run.budget; a variant within its targets sits out later rounds)
or the cap is reached; the stop reason is recorded. With `[repeat] calibrate`, the
baseline's noise is measured first and plans each point's test duration and the
forecast said before the rounds (secperf.run.precision).
A round during which other processes used a noticeable share of the testbed's CPUs
is measured again. A point asked at a share of the closed-loop maximum (`load`)
measures that maximum on the baseline first; after its rounds a point gets one
traced round with the kernel's softirq time (secperf.run.softirq).

`Rounds` is the runner's half that schedules; the runner (secperf.run.runner) builds
the testbed and measures each test (`_measure_test`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

from secperf import stats
from secperf.engine import Record
from secperf.errors import EngineError, SecperfError
from secperf.plan import BASELINE, Plan, Variant
from secperf.results.metrics import extract, metrics_for_kind
from secperf.run import profile, softirq
from secperf.run.allocate import relative_width, within_target
from secperf.run.attribution import Counting, profiled_cpus
from secperf.run.budget import Budget, Visit, next_round, priority
from secperf.run.estimate import fmt_eta, least_rounds, planned_rounds
from secperf.run.precision import Planned, plan_point
from secperf.run.progress import RunProgress
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import WorkloadPoint
from secperf.testbed import machine
from secperf.testbed.testbed import Testbed
from secperf.workloads.registry import WORKLOADS


def round_order(seed: int, point_id: str, round_no: int | str, names: list[str]) -> list[str]:
    """One round's order: a shuffle drawn from the run's seed, the point and the round
    (a round measured again: "3.1", its own order).

    Each round's order depends on nothing else, so a run with the same seed measures
    in the same orders however many rounds another point needed."""
    order = list(names)
    random.Random(f"{seed}/{point_id}/{round_no}").shuffle(order)
    return order


# Closed-loop tests of the baseline a `load` is a share of (their mean).
CALIBRATION_TESTS = 2

# One round's values: variant -> metric -> round -> value.
Values = dict[str, dict[str, dict[int, float]]]


@dataclass
class PointState:
    """One point as the rounds go: its values so far, its run.json stop record, the
    longest round it took (what the next must fit in), and whether it is done."""

    point: WorkloadPoint
    variants: list[Variant]
    primary: dict[str, bool]
    values: Values
    stop: dict[str, Any]
    # the primary metrics whose degradation is on the ratio scale (Metric.ratio_scale)
    ratio: frozenset[str] = frozenset()
    rounds: int = 0
    longest_round_s: float = 0.0
    done: bool = False
    traced: bool = False
    attributed: bool = False
    calibrated: bool = False
    # variants within their targets: left out of the point's later rounds
    settled: set[str] = field(default_factory=set)

    @property
    def by_name(self) -> dict[str, Variant]:
        return {v.name: v for v in self.variants}


@dataclass
class Measured:
    """What one test gave: its result, and the machine's CPUs over it."""

    result: Record
    machine: machine.Window | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Rounds:
    """The rounds over a plan's points; the runner supplies the tests."""

    plan: Plan
    scenario: Scenario
    console: Console
    seed: int
    stops: list[dict[str, Any]]
    point_no: tuple[int, int]
    meter: machine.Meter | None
    offered: dict[str, Any]
    softirq_note: str | None
    # The budget's clock (tests give a fake one).
    clock: Callable[[], float]
    # A round stayed disturbed through all its attempts: retries wait for a clean one.
    noise_persistent: bool = False

    # -- what the runner supplies ---------------------------------------------------------
    def _measure_test(
        self,
        testbed: Testbed,
        variant: Variant,
        point: WorkloadPoint,
        rep: int,
        *,
        phase: str | None = None,
        prepare: Callable[[], None] | None = None,
    ) -> Measured:
        raise NotImplementedError

    def _shape_links(self, testbed: Testbed, point: WorkloadPoint, restore: bool) -> None:
        raise NotImplementedError

    def _write_meta(self, **changes: Any) -> None:
        raise NotImplementedError

    def _estimate(self, point: WorkloadPoint, rounds: int, nvariants: int) -> float:
        raise NotImplementedError

    def _tags(
        self, variant: Variant, point: WorkloadPoint, rep: int, *, phase: str | None = None
    ) -> dict[str, Any]:
        raise NotImplementedError

    def _keep(self, tags: dict[str, Any], rec: Record) -> None:
        raise NotImplementedError

    def _variant_failed(
        self,
        testbed: Testbed,
        point: WorkloadPoint,
        variant: Variant,
        rep: int,
        exc: SecperfError,
        gone: list[str],
    ) -> None:
        raise NotImplementedError

    # tests that gave a result (a run where none did has failed)
    measured: int
    # point id -> the rounds the plan gives it before the first test (the progress's)
    planned_rounds: dict[str, int]

    # -- the rounds --------------------------------------------------------------------
    def _measure_all(self, testbed: Testbed) -> None:
        rep = self.scenario.repeat
        states = [self._state(p) for p in self.plan.points]
        self._plan_precision(testbed, states)
        rounds = planned_rounds(self.scenario, [(s.point, len(s.variants)) for s in states])
        self.planned_rounds = {s.point.point_id: n for s, n in zip(states, rounds, strict=True)}
        total = sum(
            self._estimate(s.point, n, len(s.variants)) for s, n in zip(states, rounds, strict=True)
        )
        self.console.print(
            f"{len(states)} point(s) x {len(self.plan.variant_names())} configuration(s), "
            f"at least {least_rounds(self.scenario)}, at most {rep.max} each, within a budget "
            f"of {fmt_eta(rep.budget)}: "
            f"about {fmt_eta(total)}",
            highlight=False,
        )
        budget = Budget(rep.budget, clock=self.clock)
        with RunProgress(self.console, total) as progress:
            # Pass 1: every point in order, its minimum rounds (its share of the budget
            # as a bound beyond them), then its traced rounds.
            for index, state in enumerate(states):
                self.point_no = (index + 1, len(states))
                visit = Visit.of(budget, len(states) - index)
                least = state.point.min_rounds(rep.min)
                self._visit(testbed, state, visit, progress, until=least)
            # Pass 2: one round at a time to the point whose widest interval is furthest
            # from its target per second of its round, while a round fits what is left.
            stuck: set[str] = set()
            while (wanted := self._most_wanted(states, budget, stuck)) is not None:
                self.point_no = (states.index(wanted) + 1, len(states))
                visit = Visit(budget.clock() + budget.left(), budget.clock)
                if not self._visit(testbed, wanted, visit, progress, until=wanted.rounds + 1):
                    stuck.add(wanted.point.point_id)
        for state in states:
            if not state.done:
                state.stop["reason"] = "budget_spent"
        self._write_meta()

    def _most_wanted(
        self, states: list[PointState], budget: Budget, stuck: set[str]
    ) -> PointState | None:
        """The point the next round buys the most at (budget.priority); points within
        their targets or at their cap are done on the way."""
        rep = self.scenario.repeat
        best: tuple[float, PointState] | None = None
        for state in states:
            if state.done or state.point.point_id in stuck:
                continue
            met = self._met(state)
            if met is not False:
                state.done = True
                state.stop["reason"] = "unpaired" if met is None else "ci_met"
                continue
            if state.rounds >= state.point.max_rounds(rep.max):
                state.done = True
                state.stop["reason"] = "max_reached"
                continue
            if state.longest_round_s > budget.left():
                continue
            width = relative_width(
                state.values,
                state.primary,
                baseline=BASELINE,
                repeat=rep,
                ratio=state.ratio,
                leave_out=state.settled,
            )
            score = priority(width, 1.0, state.longest_round_s) or 0.0
            if best is None or score > best[0]:
                best = (score, state)
        return None if best is None else best[1]

    def _plan_precision(self, testbed: Testbed, states: list[PointState]) -> None:
        """The noise calibration and the plan it gives (secperf.run.precision): each
        calibrated point's duration, and the budget's forecast said before the rounds."""
        if self.scenario.repeat.calibrate == "off":
            return
        planned = Planned()
        for state in states:
            if state.done or BASELINE not in state.by_name:
                continue
            base = state.by_name[BASELINE]

            def measure(
                point: WorkloadPoint, n: int, base: Variant = base
            ) -> tuple[dict[str, float], float]:
                began = self.clock()
                got = self._measure_test(testbed, base, point, n, phase="noise")
                return extract(got.result), self.clock() - began

            self._shape_links(testbed, state.point, restore=False)
            try:
                state.point = plan_point(
                    self.scenario,
                    state.point,
                    len(state.variants),
                    measure,
                    planned,
                    share_s=self.scenario.repeat.budget / len(states),
                )
            except SecperfError as exc:
                planned.notes.append(f"{state.point.point_id}: not calibrated ({exc.message})")
            finally:
                self._shape_links(testbed, state.point, restore=True)
        line = planned.line(self.scenario)
        if line is not None:
            self.console.print(escape(line), highlight=False)
            durations = planned.durations_line()
            self.console.print(f"  test durations: {escape(durations)}", highlight=False)
        for note in planned.notes:
            self.console.print(f"[yellow]{escape(note)}[/]", highlight=False)
        self._write_meta(precision=planned.to_json(self.scenario))

    def _state(self, point: WorkloadPoint) -> PointState:
        variants = self.plan.variants_at(point)
        stop: dict[str, Any] = {
            "point_id": point.point_id,
            "reason": None,
            "reps": 0,
            "order": [],
            "remeasured": [],
            "disturbed": [],
        }
        self.stops.append(stop)
        return PointState(
            point=point,
            variants=variants,
            primary={m.name: m.higher_is_better for m in metrics_for_kind(point.kind) if m.primary},
            values={v.name: {} for v in variants},
            stop=stop,
            ratio=frozenset(
                m.name for m in metrics_for_kind(point.kind) if m.primary and m.ratio_scale
            ),
        )

    def _visit(
        self,
        testbed: Testbed,
        state: PointState,
        visit: Visit,
        progress: RunProgress,
        *,
        until: int | None = None,
    ) -> bool:
        """Rounds of one point until its targets are met, its cap, its share of the
        budget or `until` rounds are reached; then (once) its traced round. True if a
        round ran."""
        rep = self.scenario.repeat
        ran = False
        if state.done:
            return ran
        self._shape_links(testbed, state.point, restore=False)
        try:
            if not state.calibrated:
                self._calibrate(testbed, state)
            while not state.done:
                met = self._met(state)
                why = next_round(
                    rounds=state.rounds,
                    min_rounds=state.point.min_rounds(rep.min),
                    max_rounds=state.point.max_rounds(rep.max),
                    met=met is not False,
                    longest_round_s=state.longest_round_s,
                    visit=visit,
                )
                if why is not None:
                    if why in ("ci_met", "max_reached"):
                        state.done = True
                        state.stop["reason"] = "unpaired" if met is None else why
                    break
                if until is not None and state.rounds >= until:
                    break
                began = self.clock()
                self._round(testbed, state, progress)
                took = self.clock() - began
                state.longest_round_s = max(state.longest_round_s, took)
                # the rounds' measuring time: what a missed target's "about N min more" scales
                state.stop["rounds_s"] = round(float(state.stop.get("rounds_s", 0.0)) + took, 3)
                ran = True
                self._settle(state)
            # the traced round gives softirq per unit of work: kinds without a unit
            # (searches, latency, checks) get none
            unit = WORKLOADS.get(state.point.kind).work_unit
            if not state.traced and rep.trace_softirq and unit is not None and state.variants:
                state.traced = True
                self._traced_round(testbed, state)
            if not state.attributed and rep.attributes and unit is not None and state.variants:
                state.attributed = True
                self._attribution_round(testbed, state)
        finally:
            self._shape_links(testbed, state.point, restore=True)
        self._write_meta()
        return ran

    def _settle(self, state: PointState) -> None:
        """Variants already within their targets sit out the point's later rounds
        (run.json `stops[].settled`: variant -> the rounds it had)."""
        rep = self.scenario.repeat
        for name in within_target(
            state.values,
            state.primary,
            baseline=BASELINE,
            repeat=rep,
            rounds=state.rounds,
            least=state.point.min_rounds(rep.min),
            ratio=state.ratio,
        ):
            if name not in state.settled:
                state.settled.add(name)
                state.stop.setdefault("settled", {})[name] = state.rounds

    def _met(self, state: PointState) -> bool | None:
        """Are the point's asked intervals met (None: no round paired anything)?"""
        rep = self.scenario.repeat
        if state.rounds < max(stats.MIN_ROUNDS_TO_STOP, state.point.min_rounds(rep.min)):
            return False
        return stats.targets_met(
            state.values,
            state.primary,
            baseline=BASELINE,
            confidence=rep.confidence,
            halfwidth_pct=rep.halfwidth_pct,
            degradation_pp=rep.degradation_pp,
            ratio=state.ratio,
        )

    def _round(self, testbed: Testbed, state: PointState, progress: RunProgress) -> None:
        """One round: the baseline and every variant once, in a shuffled order; a round
        during which other processes disturbed the testbed's CPUs is measured again
        (up to `remeasure` times), its values replacing the disturbed ones. Once a
        round stays disturbed through all its attempts the noise is persistent, and
        retrying cannot find a quiet moment: later disturbed rounds are kept and
        flagged at once, until a round comes out clean."""
        rep = self.scenario.repeat
        point, number = state.point, state.rounds
        label = f"{point.point_id} {point.label}".strip()
        retries = 0 if self.noise_persistent else rep.remeasure
        for attempt in range(retries + 1):
            key: int | str = number if attempt == 0 else f"{number}.{attempt}"
            # the variants within their targets sit out (the order records who ran)
            names = [n for n in state.by_name if n not in state.settled]
            order = round_order(self.seed, point.point_id, key, names)
            state.stop["order"].append(order)
            disturbed: list[str] = []
            for name in order:
                at, of = self.point_no
                # against the plan's rounds, fixed before the first test (never a total
                # that grows with the count)
                planned = self.planned_rounds.get(point.point_id, point.min_rounds(rep.min))
                where = f"point {at}/{of}, round {number + 1}/{planned}"
                if number + 1 > planned:
                    where = f"point {at}/{of}, round {number + 1} (past the {planned} planned)"
                progress.show(where, label, name, log_line=name == order[0])
                if name not in state.by_name:
                    continue  # failed earlier in this round (a failed baseline ends the point)
                if name in state.settled:
                    continue  # within its targets: its rounds so far stand
                try:
                    got = self._measure_test(testbed, state.by_name[name], point, number)
                except SecperfError as exc:
                    # Not measurable: recorded, and the point goes on without it.
                    self._drop(testbed, state, name, number, exc)
                    progress.advance(self._estimate(point, 1, 1))
                    continue
                self.measured += 1
                for metric, value in extract(got.result).items():
                    if metric in state.primary:
                        state.values[name].setdefault(metric, {})[number] = value
                if got.machine is not None and got.machine.disturbed(rep.disturbed_pct):
                    disturbed.append(name)
                progress.advance(self._estimate(point, 1, 1))
            if state.done:
                break  # the baseline failed: nothing left to compare
            if not disturbed:
                self.noise_persistent = False
                break
            if attempt < retries:
                state.stop["remeasured"].append(number)
            else:
                state.stop["disturbed"].append(number)
                self.noise_persistent = retries > 0 or self.noise_persistent
        state.rounds = number + 1
        state.stop["reps"] = state.rounds

    def _drop(
        self, testbed: Testbed, state: PointState, name: str, number: int, exc: SecperfError
    ) -> None:
        """`name` cannot be measured at this point: recorded as failed and left out of
        the point's later rounds; a failed baseline ends the point (nothing to compare)."""
        gone = [v.name for v in state.variants] if name == BASELINE else [name]
        self._variant_failed(testbed, state.point, state.by_name[name], number, exc, gone)
        state.variants = [v for v in state.variants if v.name not in gone]
        for n in gone:
            state.values.pop(n, None)
        if name == BASELINE:
            state.done = True
            state.stop["reason"] = "failed"

    def _calibrate(self, testbed: Testbed, state: PointState) -> None:
        """A point asked at a share of the closed-loop maximum (`load`): that maximum,
        measured closed loop on the baseline first; the point's rounds then run at
        the offered rate (run.json `offered`)."""
        state.calibrated = True
        point = state.point
        offered = WORKLOADS.get(point.kind).offered
        fraction = offered.fraction(point.spec) if offered is not None else None
        if offered is None or fraction is None:
            return
        closed = dataclasses.replace(point, spec=offered.closed(point.spec))
        base = state.by_name[BASELINE]
        values: list[float] = []
        for i in range(CALIBRATION_TESTS):
            try:
                got = self._measure_test(testbed, base, closed, i, phase="calibration")
            except SecperfError as exc:
                self._drop(testbed, state, BASELINE, 0, exc)
                return
            value = extract(got.result).get(offered.metric)
            if value is not None:
                values.append(value)
        if not values:
            raise EngineError(
                f"{point.point_id}: the closed-loop baseline gave no {offered.metric}, so "
                f"load = {fraction} has nothing to be a share of",
                fix="give the workload an absolute rate instead of load",
            )
        maximum = sum(values) / len(values)
        rate = fraction * maximum
        state.point = dataclasses.replace(point, spec=offered.at(point.spec, rate))
        self.offered[point.point_id] = {
            "load": fraction,
            "metric": offered.metric,
            "closed_loop": values,
            "closed_loop_mean": maximum,
            "rate": rate,
        }
        self._write_meta(offered=self.offered)

    def _traced_round(self, testbed: Testbed, state: PointState) -> None:
        """One more round with the kernel's softirq time traced (bpftrace), for the
        mechanism's kernel cost per unit of work; its rates are not used. Where it
        cannot be traced, run.json says why and the figure is "not measured"."""
        why = softirq.unavailable() if self.meter is not None else "the hosts are real machines"
        if why is None and self.softirq_note is not None:
            why = self.softirq_note  # it failed once: no point trying at every point
        if why is not None:
            self.softirq_note = why
            self._write_meta(softirq={"traced": False, "why": why})
            return
        order = round_order(self.seed, state.point.point_id, "traced", list(state.by_name))
        for name in order:
            tracer = softirq.Tracer(softirq.spawner(testbed.spawn_here))
            if not tracer.start():
                self.softirq_note = tracer.error
                self._write_meta(softirq={"traced": False, "why": tracer.error})
                return
            try:
                got = self._measure_test(
                    testbed, state.by_name[name], state.point, -1, phase="traced"
                )
            except SecperfError as exc:
                # the measured rounds stand; only this variant's softirq figure is lost
                self.console.print(
                    f"[yellow]{state.point.point_id} {name}: the traced round failed "
                    f"({exc.message}); its softirq figure is not measured[/]",
                    highlight=False,
                )
                continue
            finally:
                traced = tracer.stop()
            if traced is None:
                self.softirq_note = tracer.error
                self._write_meta(softirq={"traced": False, "why": tracer.error})
                return
            cpus = testbed.placement.testbed_cpus or None
            self._keep(
                self._tags(state.by_name[name], state.point, -1, phase="traced"),
                {**traced.record(cpus), "result_kind": got.result.get("kind")},
            )
        self._write_meta(softirq={"traced": True, "source": "bpftrace"})

    def _attribution_round(self, testbed: Testbed, state: PointState) -> None:
        """Where the cost goes (secperf.run.attribution): every configuration once
        profiled (perf) and, where it loads packet filters, once with its rules
        counted; `profile` and `rule_counts` records, in no figure."""
        if self.meter is None or testbed.lab:
            self._write_meta(attribution={"measured": False, "why": "the hosts are real machines"})
            return
        cpus = profiled_cpus(testbed.placement)
        point = state.point
        order = round_order(self.seed, point.point_id, "attribution", list(state.by_name))
        for name in order:
            variant = state.by_name[name]
            tags = self._tags(variant, point, -1, phase="attribution")
            profiler = profile.Profiler(profile.spawner(testbed.spawn_here), cpus)
            try:
                if profiler.start():
                    try:
                        got = self._measure_test(testbed, variant, point, -1, phase="attribution")
                    finally:
                        rec = profiler.stop()
                    self._keep(tags, {**rec, "result_kind": got.result.get("kind")})
                else:
                    self._keep(tags, profile.not_profiled(profiler.error or "perf did not run"))
                counting = Counting(testbed, variant, self.plan.family)
                if counting.hosts:
                    self._measure_test(
                        testbed, variant, point, -1, phase="attribution", prepare=counting.start
                    )
                    for rec in counting.finish():
                        self._keep(tags, rec)
            except SecperfError as exc:
                # the measured rounds stand; only this configuration's attribution is lost
                self.console.print(
                    f"[yellow]{point.point_id} {name}: the attribution round failed "
                    f"({exc.message}); where its cost goes is not measured[/]",
                    highlight=False,
                )
            finally:
                profiler.close()
        self._write_meta(attribution={"measured": True, "profile": profile.unavailable() is None})
