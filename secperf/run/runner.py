"""Execute a plan: build the testbed, measure interleaved rounds, tear down.

For every workload point the baseline and every variant are measured in rounds on
the one testbed, each round in its own shuffled order (seeded; the seed and every
round's order are recorded in run.json), so that drift on a shared machine and
whatever one test leaves behind land on all of them alike. Before every test the
variant's rules are loaded afresh and the DUT's connection tracking is flushed, so no
test inherits another's connections. Rounds go on until, for every variant, the
paired degradation of each primary metric has a confidence interval as narrow as the
scenario asks (at least 3 rounds), the run's time budget is spent (secperf.run.budget:
how the points share it) or the cap is reached; the stop reason is recorded.

Around every test the runner reads the machine's exact CPU counters
(secperf.testbed.machine): a round during which other processes used a noticeable
share of the testbed's CPUs is measured again; and the shaped links' counters
(secperf.run.observe), for the bottleneck of each row. A point asked at a share of
the closed-loop maximum (`load`) measures that maximum on the baseline first; after
its rounds, a point gets one traced round with the kernel's softirq time timed by
BPF (secperf.run.softirq). Records are appended to the run directory the moment the
engine writes them, so an interrupted run keeps everything it measured.

A variant that cannot be measured (its test fails twice, moves nothing, or its
mechanism cannot be applied) is recorded as failed at that point, with the reason,
and left out of the point's later rounds; the other variants go on and keep their
results. A baseline that cannot be measured ends its point the same way (nothing
there could be compared), and the run goes on with the next point.

What is measured (topology, points, variants, their rule files) is resolved before
this module runs, by secperf.plan.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from secperf import __version__, verbose
from secperf.engine import CONTROL_PORT, DATA_PORTS, EngineServer, Record, start_server
from secperf.errors import EngineError, SecperfError
from secperf.mechanisms.base import check_flowtables_gone, flush_flow_state, reset_dut
from secperf.plan import BASELINE, Plan, Variant, hostport, vm_settings
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.run.estimate import point_seconds, slowest_link
from secperf.run.hostinfo import machine_info, testbed_info
from secperf.run.observe import End, LinkSampler
from secperf.run.preflight import preflight
from secperf.run.rounds import Measured, Rounds
from secperf.run.validity import fails_again, moved_nothing
from secperf.run.verdict_probe import probe_variant
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import WorkloadPoint
from secperf.testbed import links, machine
from secperf.testbed.hosts.vmconfig import guest_cpu_delta
from secperf.testbed.testbed import Testbed, install_teardown_handlers, new_prefix
from secperf.testbed.topology import DUT
from secperf.workloads.base import MeasureContext
from secperf.workloads.registry import WORKLOADS


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Runner(Rounds):
    """Rounds over a plan, into a run directory: the testbed, and each test."""

    def __init__(self, plan: Plan, run: RunDir, console: Console) -> None:
        self.plan = plan
        self.scenario = plan.scenario
        self.run = run
        self.console = console
        self.meta: dict[str, Any] = {}
        self.stops: list[dict[str, Any]] = []
        self.seq = 0
        self.point_no = (0, 0)
        self.applied: Variant | None = None
        self.removed = False  # the run directory was removed: it held no measurement
        self.mechanism_hosts: list[str] = []
        # variant -> the review's flows its rule set was traced to deny before any traffic
        self.denied: dict[str, frozenset[str]] = {}
        # (point, variant) pairs that could not be measured, with why (run.json "failed")
        self.failed: list[dict[str, Any]] = []
        self.measured = 0  # tests that gave a result
        # The seed of every round's shuffled order: the scenario's, else a fresh one.
        seed = self.scenario.repeat.seed
        self.seed: int = secrets.randbits(32) if seed is None else seed
        self.meter: machine.Meter | None = None
        self.offered: dict[str, Any] = {}
        self.softirq_note: str | None = None

    # Called with every engine record of the test under way (the link sampler).
    _hook: Callable[[Record], None] | None = None
    # The budget's clock (tests give a fake one).
    clock: Callable[[], float] = staticmethod(time.monotonic)

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
        """Planned seconds of `rounds` rounds of `nvariants` tests of `point`."""
        return point_seconds(point, rounds, nvariants, slowest_link(self.scenario))

    def _shape_links(self, testbed: Testbed, point: WorkloadPoint, restore: bool) -> None:
        """A point with `link_rate`: every link on its client-server path at that rate
        (0 = unshaped) for its tests; `restore` puts the links back as the graph has them."""
        rate = point.spec.path_rate()
        if rate is None:
            return
        for link in self.plan.path_links(point):
            bps = link.rate_bps if restore else (rate or None)
            for end in link.ends():
                links.reshape(
                    testbed.host(end),
                    testbed.ifname(link.name, end),
                    bps,
                    link.queue_s,
                    testbed.priority_ports,
                )

    # -- the run ----------------------------------------------------------------------------
    def execute(self) -> RunDir:
        sc = self.scenario
        self._write_meta(
            format=1,
            secperf_version=__version__,
            scenario=sc.to_json_dict(),
            # Variants expanded from a list (rules = [1, 10, ...]): family and value,
            # so reports can draw a line per family against the swept value.
            variant_sweeps=self.plan.variant_sweeps(),
            scenario_file=str(sc.source) if sc.source else None,
            scenario_text=sc.source.read_text() if sc.source else None,
            order_seed=self.seed,
            failed=self.failed,
            host=machine_info(),
            started=now_iso(),
            finished=None,
            status="running",
            notes=[
                f"hosts reached over SSH: {', '.join(sorted(self.plan.remotes))}; their "
                "clocks and CPUs are their own (docs/methodology.md, real hosts)"
                if self.plan.remotes
                else "generator, server and DUT share this machine's CPUs: compare ratios and "
                "service demand, not absolute rates, with other machines"
            ],
        )
        try:
            preflight(sc, self.plan.family)
            # Render before any namespace exists: a rule set that cannot be written stops here.
            prefix = new_prefix()
            self.plan.render(self.run.files_dir, prefix)
            variants = self.plan.variants
            with (
                Testbed.build(
                    self.plan.topology,
                    prefix=prefix,
                    cpus=sc.testbed.placement_setting(
                        lab=bool(self.plan.remotes or self.plan.external_interfaces())
                    ),
                    cpu_quota=sc.testbed.cpu_quota,
                    vm=vm_settings(sc),
                    vm_hosts=self.plan.vm_hosts(),
                    remotes=self.plan.remotes,
                    external=self.plan.external_interfaces(),
                    # rule files rendered into the run directory: copied to remote hosts
                    stage_dirs=[self.run.files_dir],
                    # a load that fills a shaped link never starves the engine's control
                    priority_ports=(CONTROL_PORT,),
                ) as testbed,
                install_teardown_handlers(testbed),
            ):
                self._note_vms(testbed)
                for v in variants:
                    for _mech, ctx in v.mechanisms:
                        # for a mechanism that copies the server's settings (TCP options)
                        ctx.server = testbed.host(ctx.ends[1])
                self._check_mechanisms(testbed, variants)
                self.meter = self._meter(testbed)
                self._write_meta(
                    placement=testbed.placement.describe(),
                    # who does what at each point: the bottleneck of each row names them
                    forwarding=[h.name for h in self.plan.topology.hosts if h.forwarding],
                    endpoints={
                        pid: {
                            "client": client,
                            "server": server,
                            "generators": list(self.plan.generators[pid]) or [client],
                        }
                        for pid, (client, server) in self.plan.endpoints.items()
                    },
                    # points driven from several client hosts at once: point -> hosts
                    generators=self.plan.multi_generators(),
                    remote_hosts=self.plan.remote_hosts(),
                    prefix=testbed.prefix,
                    testbed=testbed_info(testbed),
                    topology=self.plan.topology.describe(),
                    placements=self.plan.placements(),
                    # a rule-set review's address map, named interfaces and placed flows
                    # (the map also beside each rendered rule set: <name>.addrmap.json)
                    rule_set_map=self.plan.rule_set_map(),
                )
                servers = self._start_servers(testbed)
                try:
                    self._measure_all(testbed)
                finally:
                    for server in servers:
                        server.stop()
                    self._note_vms(testbed)
                self._release(testbed)
        except KeyboardInterrupt:
            self._write_meta(status="interrupted", finished=now_iso())
            self._finish_summary()
            raise
        except BaseException as exc:
            if self.seq == 0 and isinstance(exc, SecperfError):
                # Nothing was measured: a "failed" run directory would only be clutter
                # that `compare` and people trip over. Say so, and keep nothing.
                shutil.rmtree(self.run.path, ignore_errors=True)
                self.removed = True
                exc.message += f" (before any measurement; run directory {self.run.path} removed)"
                exc.args = (exc.message,)
                raise
            self._write_meta(status="failed", finished=now_iso(), error=str(exc))
            self._finish_summary()
            raise
        if self.failed and not self.measured:
            first = self.failed[0]
            self._write_meta(
                status="failed",
                finished=now_iso(),
                error=f"no test gave a result; {first['point_id']} {first['variant']}: "
                f"{first['error']}",
            )
        else:
            self._write_meta(status="complete", finished=now_iso())
        self._finish_summary()
        return self.run

    def _note_vms(self, testbed: Testbed) -> None:
        """Which VM ran and how (accel, and why: auto may fall back to TCG), in run.json."""
        if not testbed.switchable:
            return
        vms = {role: switch.describe() for role, switch in testbed.switchable.items()}
        notes = [n for n in self.meta.get("notes", []) if not str(n).startswith("vm host ")]
        for role, d in vms.items():
            what = "an emulator (TCG): its figures are qemu's instruction translation, not "
            what += "hardware virtualization" if d["accel"] == "tcg" else ""
            notes.append(
                f"vm host {role}: accel {d['accel'] or '?'} ({d['accel_note']}), "
                f"{d['cpus']} CPU(s), {d['memory_mb']} MB"
                + (f"; {what}" if d["accel"] == "tcg" else "; hardware virtualization (KVM)")
            )
        self._write_meta(vm=vms, notes=notes)

    def _finish_summary(self) -> None:
        """Summarise whatever was measured; a run with no result yet has an empty summary."""
        try:
            self.run.write_summary(build_summary(self.run, self.scenario.repeat.confidence))
        except (SecperfError, ValueError, KeyError) as exc:
            self.console.print(f"[yellow]could not summarise the run: {exc}[/]")
        try:  # the compressed copy a kept run carries (docs/runs/): its verdicts re-derive
            self.run.keep_compressed()
        except OSError as exc:
            self.console.print(f"[yellow]could not compress records.jsonl: {exc}[/]")

    def _check_mechanisms(self, testbed: Testbed, variants: list[Variant]) -> None:
        """Load every variant once before any traffic: a rule the kernel rejects stops here."""
        self.mechanism_hosts = self.plan.mechanism_hosts()
        verdicts: dict[str, list[dict[str, Any]]] = {}
        for v in variants:
            self._apply(testbed, v)
            found = self._probe_verdicts(testbed, v)
            if found is not None:
                verdicts[v.name] = found
                self.denied[v.name] = frozenset(
                    str(row["flow"]) for row in found if row["verdict"] == "deny"
                )
        if verdicts:
            self._write_meta(verdicts=verdicts)
        self._apply(testbed, variants[0])

    def _probe_verdicts(self, testbed: Testbed, variant: Variant) -> list[dict[str, Any]] | None:
        """A rule-set review: the loaded variant's decision on each flow, traced."""
        if variant.name == BASELINE or DUT not in self.plan.topology.roles:
            return None
        hosts = {name: testbed.host(name) for name in self.plan.topology.names}
        return probe_variant(
            testbed.host(DUT),
            hosts,
            variant.mechanisms,
            f"secperf_{testbed.prefix}_trace",
            self.plan.family,
        )

    def _apply(self, testbed: Testbed, variant: Variant) -> None:
        """Load `variant` afresh (before every test, even the same variant again) and
        make every host that carries mechanisms forget the connections it tracks, so a
        test starts from the same state whichever test the shuffled order put before it."""
        self._release(testbed)
        if testbed.switchable:
            # The DUT host's backend is the variant's: its namespace or its VM.
            testbed.select_backend(DUT, variant.backend)
        for mech, ctx in variant.mechanisms:
            mech.apply_group([testbed.host(name) for name in ctx.hosts], ctx)
        self.applied = variant
        for name in self.mechanism_hosts:
            flush_flow_state(testbed.host(name))

    def _release(self, testbed: Testbed) -> None:
        """Take the applied variant off again (before the next one, and at the end of
        the run: a real DUT or an external device is left as it was found)."""
        if self.applied is not None:
            for mech, ctx in reversed(self.applied.mechanisms):
                # daemons the mechanism started (a tunnel's two ends at once)
                mech.release_group([testbed.host(name) for name in ctx.hosts], ctx)
            for name in self.applied.hosts():
                host = testbed.host(name)
                used = self.applied.backends_on(name)
                if used:
                    reset_dut(host, used)
                check_flowtables_gone(
                    host,
                    [
                        ft
                        for _, c in self.applied.mechanisms
                        if name in c.hosts
                        for ft in c.flowtables
                    ],
                )
            self.applied = None

    @staticmethod
    def _observe_mechanisms(variant: Variant, keep: Any) -> None:
        """A `mechanism` record per mechanism that reports what it did in the test (a
        tunnel: bytes through its devices, its daemons' memory, what ran)."""
        for mech, ctx in variant.mechanisms:
            observed = mech.observe()
            if observed is not None:
                keep({"type": "mechanism", "hosts": list(ctx.hosts), **observed})

    def _start_servers(self, testbed: Testbed) -> list[EngineServer]:
        """An engine server on every host a workload targets."""
        listen = hostport("::" if self.plan.family == 6 else "0.0.0.0", CONTROL_PORT)
        targets = sorted({server for _client, server in self.plan.endpoints.values()})
        started: list[EngineServer] = []
        try:
            for name in targets:
                started.append(start_server(testbed.host(name), listen, data_ports=DATA_PORTS))
        except BaseException:
            for server in started:
                server.stop()
            raise
        return started

    # -- the machine's CPUs and the links, around every test ------------------------
    @staticmethod
    def _meter(testbed: Testbed) -> machine.Meter | None:
        """The exact counters of the testbed's CPUs (None on a lab of real hosts)."""
        placement = testbed.placement
        if not placement.testbed_cpus:
            return None
        layout = testbed.cgroup_layout
        return machine.Meter(
            cpus=list(placement.testbed_cpus),
            groups=testbed.cgroups,
            secperf_shares=placement.secperf_cpus is None,
            cpuacct_root=layout.cpu_root if layout is not None and layout.version == "v1" else None,
        )

    def _link_sampler(self, testbed: Testbed, point: WorkloadPoint) -> LinkSampler | None:
        """The shaped directions of the point's path (None: nothing shaped on it)."""
        if testbed.lab:
            return None
        rate = point.spec.path_rate()
        ends: list[End] = []
        for link in self.plan.path_links(point):
            shaped = (rate or None) if rate is not None else link.rate_bps
            if shaped:
                ends += [End(link.name, end, testbed.ifname(link.name, end)) for end in link.ends()]
        return LinkSampler(testbed, ends) if ends else None

    # -- the rounds --------------------------------------------------------------------
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
        """Load the variant afresh, measure once, and keep what the machine's CPUs and
        the shaped links did over the test (`machine` and `links` records). `prepare`
        runs once the variant is loaded, before the test (the attribution round's
        counted copy of the rule set); the variant stays loaded after it."""
        self._apply(testbed, variant)
        if prepare is not None:
            prepare()
        links = self._link_sampler(testbed, point)
        self._hook = links.on_record if links is not None else None
        before = self.meter.read() if self.meter is not None else None
        try:
            result = self._one_test(testbed, variant, point, rep, phase=phase)
        finally:
            self._hook = None
        tags = self._tags(variant, point, rep, phase=phase)
        window = None
        if self.meter is not None and before is not None:
            window = machine.window(
                before,
                self.meter.read(),
                self.meter.cpus,
                secperf_shares=self.meter.secperf_shares,
            )
            self._keep(tags, window.record(self.scenario.repeat.disturbed_pct))
        links_record = links.record() if links is not None else None
        if links_record is not None:
            self._keep(tags, links_record)
        return Measured(result, window)

    def _variant_failed(
        self,
        testbed: Testbed,
        point: WorkloadPoint,
        variant: Variant,
        rep: int,
        exc: SecperfError,
        gone: list[str],
    ) -> None:
        """`variant` cannot be measured at `point` (round `rep`): an error record, a
        stop entry of its own for each variant in `gone` (all of the point's when the
        baseline failed) and a `failed` entry in run.json, then the host put back in the
        plain state. A failure to put it back ends the run (the state is unknown)."""
        why = exc.message
        self._keep(
            self._tags(variant, point, rep),
            {"type": "error", "kind": "variant_failed", "message": why, "fix": exc.fix},
        )
        for name in gone:
            reason = why if name == variant.name else f"the baseline failed: {why}"
            entry = {"point_id": point.point_id, "variant": name, "round": rep, "error": reason}
            self.failed.append({**entry, "fix": exc.fix})
            self.stops.append({**entry, "reason": "failed", "reps": rep, "order": []})
        self.console.print(
            f"[red]{point.point_id} {variant.name}: cannot be measured ({why}); "
            + (
                "the point ends here (no baseline to compare with)[/]"
                if variant.name == BASELINE
                else "the other variants go on without it[/]"
            ),
            highlight=False,
        )
        self._write_meta(failed=self.failed)
        self._release(testbed)

    def _tags(
        self, variant: Variant, point: WorkloadPoint, rep: int, *, phase: str | None = None
    ) -> dict[str, Any]:
        """What every record of a test carries (docs/data-format.md); `phase` marks a
        test outside the measured rounds (calibration, traced)."""
        tags: dict[str, Any] = {
            "variant": variant.name,
            "workload": point.name,
            "point_id": point.point_id,
            "point": point.record(),
            "label": point.label,
            "rep": rep,
        }
        if phase is not None:
            tags["phase"] = phase
        return tags

    def _keep(self, tags: dict[str, Any], rec: Record) -> None:
        self.seq += 1
        self.run.append_record({**tags, "seq": self.seq}, rec)

    def _one_test(
        self,
        testbed: Testbed,
        variant: Variant,
        point: WorkloadPoint,
        rep: int,
        *,
        phase: str | None = None,
    ) -> Record:
        """Measure once; a failure is recorded, retried once, then fatal."""
        tags = self._tags(variant, point, rep, phase=phase)
        hook = self._hook

        def keep(rec: Record) -> None:
            self._keep(tags, rec)
            if hook is not None:
                hook(rec)

        client, server = self.plan.endpoints[point.point_id]
        ctx = MeasureContext(
            testbed=testbed,
            topology=self.plan.topology,
            plan=self.plan.traffic,
            family=self.plan.family,
            variant=variant.name,
            direct=variant.direct,
            target=self.plan.target(variant, server),
            mechanisms=variant.mechanisms,
            denied=self.denied.get(variant.name, frozenset()),
            keep=keep,
            extra={"files_dir": self.run.files_dir},  # where services (nginx) keep their files
            client=client,
            server=server,
            generators=list(self.plan.generators[point.point_id]),
            rep=rep,
            seed=self.seed,
        )
        executor = WORKLOADS.get(point.kind).executor
        last_error: EngineError | None = None
        for _attempt in range(2):
            guest = testbed.host(DUT) if testbed.switchable else None
            before = guest.proc_stat() if guest is not None else None
            try:
                result = executor.measure(ctx, point)
            except EngineError as exc:
                last_error = exc
                if exc.record is None or exc.record.get("type") != "error":
                    keep({"type": "error", "kind": "runner", "message": str(exc)})
                if fails_again(exc.record):
                    raise EngineError(
                        f"{point.point_id} ({variant.name}): {exc.message}",
                        where=exc.where,
                        fix=exc.fix or "see records.jsonl in the run directory",
                        record=exc.record,
                    ) from None  # it would fail the same way again: no retry
                continue
            nothing = moved_nothing(result)
            if nothing:
                record: dict[str, object] = {
                    "type": "error",
                    "kind": "measurement",
                    "message": nothing,
                }
                keep(record)
                raise EngineError(
                    f"{point.point_id} ({variant.name}): {nothing}",
                    fix="check the workload's sizes, socket_buffer and rate against the "
                    "path (`secperf check` explains the limits); no number was recorded",
                    record=record,
                )
            self._observe_mechanisms(variant, keep)
            after = guest.proc_stat() if guest is not None else None
            if before is not None and after is not None:
                # The guest's own view of its CPU over the whole test (warm-up included).
                keep({"type": "guest_cpu", "host": DUT, **guest_cpu_delta(before, after)})
            return result
        assert last_error is not None
        raise EngineError(
            f"{point.point_id} ({variant.name}) failed twice: {last_error.message}",
            where=last_error.where,
            fix="see records.jsonl in the run directory for the engine's error records",
        )


def default_results_root() -> Path:
    return Path(os.environ.get("SECPERF_RESULTS", "results"))


def run_scenario(scenario: Scenario, out_root: Path, console: Console) -> RunDir:
    """Run `scenario` into a new run directory under `out_root`."""
    plan = Plan.of(scenario)  # a scenario the graph cannot place stops before any file
    run = RunDir.create(out_root, scenario.name)
    console.print(f"run directory: [bold]{run.path}[/]")
    if verbose.enabled():
        verbose.log_to(run.path / "commands.log")
    start = time.monotonic()
    try:
        Runner(plan, run, console).execute()
    finally:
        verbose.log_to(None)
    console.print(f"measured in {time.monotonic() - start:.0f} s")
    return run
