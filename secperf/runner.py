"""Turn a scenario into a run directory: build, measure interleaved, repeat, tear down.

For every workload point the baseline and every variant are measured in rounds on
the one testbed, each round in its own shuffled order (seeded; the seed and every
round's order are recorded in run.json), so that drift on a shared machine and
whatever one test leaves behind land on all of them alike. Before every test the
variant's rules are loaded afresh and the DUT's connection tracking is flushed, so no
test inherits another's connections. Rounds go on until, for every variant, the
paired degradation of each primary metric has a confidence interval as narrow as the
scenario asks (at least 3 rounds), or the cap is reached; the stop reason is
recorded. Records are appended to the run directory the moment the engine writes
them, so an interrupted run keeps everything it measured.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from secperf import __version__, stats
from secperf.engine import EngineServer, Record, start_server
from secperf.errors import EngineError, SecperfError
from secperf.hostinfo import machine_info, testbed_info
from secperf.mechanisms import Mechanism, from_schema
from secperf.mechanisms.base import (
    CONTROL_PORT,
    DATA_PORTS,
    MechanismContext,
    TrafficPlan,
    check_flowtables_gone,
    flush_flow_state,
    reset_dut,
    traffic_plan,
)
from secperf.preflight import preflight
from secperf.results.metrics import extract, metrics_for_kind
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.scenario.schema import Scenario
from secperf.scenario.sweep import WorkloadPoint, expand_scenario
from secperf.testbed.netns import new_prefix
from secperf.testbed.testbed import Testbed, install_teardown_handlers
from secperf.testbed.topology import Topology
from secperf.workloads import executor_for, hosts_for
from secperf.workloads.base import MeasureContext

BASELINE = "baseline"
# Seconds a test costs beyond its duration and warm-up: connect, setup, teardown.
TEST_OVERHEAD_S = 0.3


@dataclass
class Variant:
    """One configuration of the DUT, ready to apply."""

    name: str
    mechanisms: list[tuple[Mechanism, MechanismContext]] = field(default_factory=list)
    direct: bool = False  # the baseline of a `direct` scenario bypasses the DUT

    def backends(self) -> set[str]:
        used: set[str] = set()
        for mech, _ in self.mechanisms:
            used |= mech.backends()
        return used


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def topology_for(scenario: Scenario, points: list[WorkloadPoint]) -> Topology:
    """The graph a scenario needs: an attacker only if a workload kind asks for one."""
    hosts = frozenset().union(*(hosts_for(p) for p in points))
    return Topology.standard(
        link_rate_bps=scenario.testbed.rate_bps,
        direct=scenario.testbed.baseline == "direct",
        attacker="attacker" in hosts,
        emulated_hosts=scenario.testbed.emulated_hosts,
        offloads=scenario.testbed.offloads,
    )


def prepare_variants(
    scenario: Scenario, plan: TrafficPlan, files_dir: Path, table: str
) -> list[Variant]:
    """Render every variant's mechanisms into the run directory (no side effects elsewhere)."""
    variants = [Variant(BASELINE, direct=scenario.testbed.baseline == "direct")]
    for name, mechs, _swept in expanded_variants(scenario):
        v = Variant(name)
        for i, mspec in enumerate(mechs):
            mech = from_schema(mspec)
            stem = name.replace("[", ".").replace("]", "").replace(" ", ".").replace("=", "")
            ctx = MechanismContext(plan=plan, files_dir=files_dir, name=f"{stem}.{i}", table=table)
            ctx.rendered = mech.render(ctx)
            v.mechanisms.append((mech, ctx))
        variants.append(v)
    return variants


def expanded_variants(scenario: Scenario) -> list[tuple[str, list[Any], dict[str, object]]]:
    """Every variant, a swept one (rules = [1, 10, ...]) as one variant per value."""
    return [x for name, spec in scenario.variants.items() for x in spec.expand(name)]


def round_order(seed: int, point_id: str, round_no: int, names: list[str]) -> list[str]:
    """One round's order: a shuffle drawn from the run's seed, the point and the round.

    Each round's order depends on nothing else, so a run with the same seed measures
    in the same orders however many rounds another point needed."""
    order = list(names)
    random.Random(f"{seed}/{point_id}/{round_no}").shuffle(order)
    return order


def hostport(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


class Runner:
    def __init__(self, scenario: Scenario, run: RunDir, console: Console) -> None:
        self.scenario = scenario
        self.run = run
        self.console = console
        self.family = 6 if scenario.testbed.family == "ipv6" else 4
        self.points: list[WorkloadPoint] = expand_scenario(scenario)
        self.topology = topology_for(scenario, self.points)
        self.plan = traffic_plan(self.topology, self.family)
        self.meta: dict[str, Any] = {}
        self.stops: list[dict[str, Any]] = []
        self.seq = 0
        self.applied: Variant | None = None
        # The seed of every round's shuffled order: the scenario's, else a fresh one.
        seed = scenario.repeat.seed
        self.seed: int = secrets.randbits(32) if seed is None else seed

    # -- bookkeeping -------------------------------------------------------------------
    def _write_meta(self, **changes: Any) -> None:
        self.meta.update(changes)
        if changes.get("status") in ("interrupted", "failed"):
            for stop in self.stops:  # the point being measured when the run ended
                if stop["reason"] is None:
                    stop["reason"] = changes["status"]
        self.meta["stops"] = self.stops
        self.run.write_run_json(self.meta)

    def _estimate(self, point: WorkloadPoint, rounds: int, nvariants: int) -> float:
        per_test = sum(float(str(point.params.get(k) or 0)) for k in ("duration", "warmup"))
        return rounds * nvariants * (per_test + TEST_OVERHEAD_S)

    # -- the run ----------------------------------------------------------------------------
    def execute(self) -> RunDir:
        sc = self.scenario
        self._write_meta(
            format=1,
            secperf_version=__version__,
            scenario=sc.to_json_dict(),
            # Variants expanded from a list (rules = [1, 10, ...]): family and value,
            # so reports can draw a line per family against the swept value.
            variant_sweeps={
                name: {"family": name.split("[", 1)[0], **swept}
                for name, _mechs, swept in expanded_variants(sc)
                if swept
            },
            scenario_file=str(sc.source) if sc.source else None,
            scenario_text=sc.source.read_text() if sc.source else None,
            order_seed=self.seed,
            host=machine_info(),
            started=now_iso(),
            finished=None,
            status="running",
            notes=[
                "generator, server and DUT share this machine's CPUs: compare ratios and "
                "service demand, not absolute rates, with other machines"
            ],
        )
        try:
            preflight(sc, self.family)
            # Render before any namespace exists: a rule set that cannot be written stops here.
            prefix = new_prefix()
            variants = prepare_variants(sc, self.plan, self.run.files_dir, f"secperf_{prefix}")
            with (
                Testbed.build(self.topology, prefix=prefix, pin=sc.testbed.pin) as testbed,
                install_teardown_handlers(testbed),
            ):
                for v in variants:
                    for _mech, ctx in v.mechanisms:
                        ctx.server = testbed.host("server")
                self._check_on_dut(testbed, variants)
                self._write_meta(prefix=testbed.prefix, testbed=testbed_info(testbed))
                server = self._start_server(testbed)
                try:
                    self._measure_all(testbed, variants)
                finally:
                    server.stop()
        except KeyboardInterrupt:
            self._write_meta(status="interrupted", finished=now_iso())
            self._finish_summary()
            raise
        except BaseException as exc:
            self._write_meta(status="failed", finished=now_iso(), error=str(exc))
            self._finish_summary()
            raise
        self._write_meta(status="complete", finished=now_iso())
        self._finish_summary()
        return self.run

    def _finish_summary(self) -> None:
        """Summarise whatever was measured; a run with no result yet has an empty summary."""
        try:
            self.run.write_summary(build_summary(self.run, self.scenario.repeat.confidence))
        except (SecperfError, ValueError, KeyError) as exc:
            self.console.print(f"[yellow]could not summarise the run: {exc}[/]")

    def _check_on_dut(self, testbed: Testbed, variants: list[Variant]) -> None:
        """Load every variant once before any traffic: a rule the kernel rejects stops here."""
        dut = testbed.host("dut")
        for v in variants:
            self._apply(dut, v)
        self._apply(dut, variants[0])

    def _apply(self, dut: Any, variant: Variant) -> None:
        """Load `variant` afresh (before every test, even the same variant again) and
        forget every connection the DUT tracks, so a test starts from the same state
        whichever test the shuffled order put before it."""
        if self.applied is not None:
            for mech, ctx in self.applied.mechanisms:
                mech.release(dut, ctx)  # daemons the mechanism started
            if self.applied.backends():
                reset_dut(dut, self.applied.backends())
            check_flowtables_gone(
                dut, [ft for _, c in self.applied.mechanisms for ft in c.flowtables]
            )
        for mech, ctx in variant.mechanisms:
            mech.apply(dut, ctx)
        self.applied = variant
        flush_flow_state(dut)

    def _start_server(self, testbed: Testbed) -> EngineServer:
        listen = hostport("::" if self.family == 6 else "0.0.0.0", CONTROL_PORT)
        return start_server(testbed.host("server"), listen, data_ports=DATA_PORTS)

    def _target(self, variant: Variant) -> str:
        via = "direct" if variant.direct else "dut"
        return hostport(self.topology.server_address(self.family, via), CONTROL_PORT)

    def _measure_all(self, testbed: Testbed, variants: list[Variant]) -> None:
        rep = self.scenario.repeat
        n = len(variants)
        total = sum(self._estimate(p, rep.min, n) for p in self.points)
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=self.console, transient=False) as progress:
            task = progress.add_task("starting", total=total)
            for point in self.points:
                self._measure_point(testbed, variants, point, progress, task)

    def _measure_point(
        self,
        testbed: Testbed,
        variants: list[Variant],
        point: WorkloadPoint,
        progress: Progress,
        task: TaskID,
    ) -> None:
        rep = self.scenario.repeat
        dut = testbed.host("dut")
        primary = {m.name: m.higher_is_better for m in metrics_for_kind(point.kind) if m.primary}
        # variant -> metric -> round -> value: a metric absent from a round stays absent
        values: dict[str, dict[str, dict[int, float]]] = {
            v.name: {m: {} for m in primary} for v in variants
        }
        by_name = {v.name: v for v in variants}
        label = f"{point.point_id} {point.label}".strip()
        stop: dict[str, Any] = {"point_id": point.point_id, "reason": None, "reps": 0, "order": []}
        self.stops.append(stop)
        rounds = 0
        reason: str | None = None
        while reason is None:
            if rounds >= rep.min:
                # one more round than planned: grow the bar so the time left stays honest
                task_total = progress.tasks[task].total or 0.0
                progress.update(task, total=task_total + self._estimate(point, 1, len(variants)))
            order = round_order(self.seed, point.point_id, rounds, list(by_name))
            stop["order"].append(order)
            for name in order:
                v = by_name[name]
                progress.update(task, description=f"{label} · {v.name} · round {rounds + 1}")
                self._apply(dut, v)
                result = self._one_test(testbed, v, point, rounds)
                for metric, value in extract(result).items():
                    if metric in values[v.name]:
                        values[v.name][metric][rounds] = value
                progress.advance(task, self._estimate(point, 1, 1))
            rounds += 1
            stop["reps"] = rounds
            reason = stats.stop_reason(
                values,
                primary,
                rounds=rounds,
                baseline=BASELINE,
                min_rounds=rep.min,
                max_rounds=rep.max,
                confidence=rep.confidence,
                halfwidth_pct=rep.halfwidth_pct,
            )
        stop["reason"] = reason
        self._write_meta()

    def _one_test(
        self, testbed: Testbed, variant: Variant, point: WorkloadPoint, rep: int
    ) -> Record:
        """Measure once; a failure is recorded, retried once, then fatal."""
        tags = {
            "variant": variant.name,
            "workload": point.name,
            "point_id": point.point_id,
            "point": point.params,
            "label": point.label,
            "rep": rep,
        }

        def keep(rec: Record) -> None:
            self.seq += 1
            self.run.append_record({**tags, "seq": self.seq}, rec)

        ctx = MeasureContext(
            testbed=testbed,
            topology=self.topology,
            plan=self.plan,
            family=self.family,
            variant=variant.name,
            direct=variant.direct,
            target=self._target(variant),
            mechanisms=variant.mechanisms,
            keep=keep,
            extra={"files_dir": self.run.files_dir},  # where services (nginx) keep their files
        )
        executor = executor_for(point.kind)
        last_error: EngineError | None = None
        for _attempt in range(2):
            try:
                return executor.measure(ctx, point)
            except EngineError as exc:
                last_error = exc
                if exc.record is None or exc.record.get("type") != "error":
                    keep({"type": "error", "kind": "runner", "message": str(exc)})
        assert last_error is not None
        raise EngineError(
            f"{point.point_id} ({variant.name}) failed twice: {last_error.message}",
            where=last_error.where,
            fix="see records.jsonl in the run directory for the engine's error records",
        )


def default_results_root() -> Path:
    return Path(os.environ.get("SECPERF_RESULTS", "results"))


def run_scenario(scenario: Scenario, out_root: Path, console: Console) -> RunDir:
    run = RunDir.create(out_root, scenario.name)
    console.print(f"run directory: [bold]{run.path}[/]")
    start = time.monotonic()
    Runner(scenario, run, console).execute()
    console.print(f"measured in {time.monotonic() - start:.0f} s")
    return run
