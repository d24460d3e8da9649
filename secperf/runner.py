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
import itertools
import os
import random
import secrets
import shutil
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
)

from secperf import __version__, stats
from secperf.engine import EngineServer, Record, start_server
from secperf.errors import EngineError, SecperfError
from secperf.hostinfo import machine_info, testbed_info
from secperf.mechanisms.base import (
    CONTROL_PORT,
    DATA_PORTS,
    Mechanism,
    MechanismContext,
    TrafficPlan,
    check_flowtables_gone,
    flush_flow_state,
    reset_dut,
    traffic_plan,
)
from secperf.mechanisms.registry import MECHANISMS
from secperf.preflight import preflight
from secperf.results.metrics import extract, metrics_for_kind
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.scenario.graph import build_topology
from secperf.scenario.inventory import ssh_specs
from secperf.scenario.placement import (
    default_endpoint,
    endpoints,
    generator_hosts,
    placement_hook,
    resolve_placement,
)
from secperf.scenario.schema import Scenario
from secperf.scenario.sweep import WorkloadPoint, expand_scenario
from secperf.testbed import links
from secperf.testbed.hosts.vmconfig import VmSettings, guest_cpu_delta
from secperf.testbed.testbed import Testbed, install_teardown_handlers, new_prefix
from secperf.testbed.topology import DUT, LinkSpec, Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.registry import WORKLOADS

BASELINE = "baseline"
# Seconds a test costs beyond its duration and warm-up: connect, setup, teardown.
TEST_OVERHEAD_S = 0.3


@dataclass
class Variant:
    """One configuration of the DUT, ready to apply."""

    name: str
    mechanisms: list[tuple[Mechanism, MechanismContext]] = field(default_factory=list)
    direct: bool = False  # the baseline of a `direct` scenario bypasses the DUT
    backend: str = "namespace"  # what the DUT host is in this variant: namespace or vm

    def backends(self) -> set[str]:
        used: set[str] = set()
        for mech, _ in self.mechanisms:
            used |= mech.backends()
        return used

    def hosts(self) -> list[str]:
        """The hosts this variant's mechanisms run on, in first-use order."""
        return list(dict.fromkeys(h for _, c in self.mechanisms for h in c.hosts))

    def backends_on(self, host: str) -> set[str]:
        used: set[str] = set()
        for mech, ctx in self.mechanisms:
            if host in ctx.hosts:
                used |= mech.backends()
        return used


def vm_settings(scenario: Scenario) -> VmSettings:
    """The scenario's [testbed.vm] as the VM backend takes it."""
    v = scenario.testbed.vm
    return VmSettings(
        accel=v.accel,
        cpus=v.cpus,
        memory_mb=v.memory_mb,
        boot_timeout=v.boot_timeout,
        build_timeout=v.build_timeout,
        kvm_timeout=v.kvm_timeout,
    )


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def topology_for(scenario: Scenario, points: list[WorkloadPoint]) -> Topology:
    """The graph a scenario needs: an attacker only if a workload kind asks for one,
    an ids host only if a mechanism kind does (a mirror's sensor)."""
    hosts = frozenset().union(
        *(WORKLOADS.get(p.kind).hosts(p.spec) for p in points),
        *(MECHANISMS.of(m).hosts for v in scenario.variants.values() for m in v.mechanisms),
    )
    return build_topology(scenario, attacker="attacker" in hosts, ids="ids" in hosts)


def prepare_variants(
    scenario: Scenario,
    plan: TrafficPlan,
    files_dir: Path,
    table: str,
    topology: Topology,
    ends: tuple[str, str] | None = None,
    suffix: str = "",
) -> list[Variant]:
    """Render every variant's mechanisms into the run directory (no side effects elsewhere),
    each for the hosts its `on` names and for the traffic between `ends` (client and
    server hosts; `plan` is theirs). `suffix` keeps the files of several pairs apart."""
    variants = [Variant(BASELINE, direct=scenario.testbed.baseline == "direct")]
    if ends is None:
        ends = (default_endpoint(topology, "client"), default_endpoint(topology, "server"))
    for name, mechs, _swept in expanded_variants(scenario):
        v = Variant(name, backend=scenario.variants[name.split("[", 1)[0]].backend)
        for i, mspec in enumerate(mechs):
            kind = MECHANISMS.of(mspec)
            mech = kind.build(mspec)
            where = f"variants.{name.split('[', 1)[0]}.mechanisms[{i}].on"
            hosts = resolve_placement(topology, mspec.on, ends, where=where)
            stem = name.replace("[", ".").replace("]", "").replace(" ", ".").replace("=", "")
            ctx = MechanismContext(
                plan=plan,
                files_dir=files_dir,
                name=f"{stem}.{i}{suffix}",
                table=table,
                hosts=hosts,
                hook=placement_hook(topology, kind, hosts, where=where),
                topology=topology,
                ends=ends,
            )
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


def path_links(topology: Topology, client: str, server: str) -> list[LinkSpec]:
    """Every link a packet from `client` to `server` crosses (a switch's two ports too)."""
    hops = topology.path(client, server)
    switches = [h.name for h in topology.hosts if h.is_switch]
    out: list[LinkSpec] = []
    for a, b in itertools.pairwise(hops):
        link = topology.link_between(a, b)
        if link is not None:
            out.append(link)
            continue
        for sw in switches:
            ports = (topology.link_between(a, sw), topology.link_between(sw, b))
            if ports[0] is not None and ports[1] is not None:
                out += [ports[0], ports[1]]
                break
    return out


def fmt_eta(seconds: float) -> str:
    """`45 s`, `12 min`, `2 h 05 min`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


# Engine error kinds that fail the same way every time: retrying only wastes a round.
DETERMINISTIC_ERRORS = frozenset({"spec", "target"})


def fails_again(record: Record | None) -> bool:
    """An engine error that a second attempt would repeat: a spec the engine refuses,
    a target it may not reach, a test that moved no traffic (the kernel refused every
    send). Connection resets, a lost server report or unstamped probes may pass."""
    if not record:
        return False
    kind = str(record.get("kind"))
    return kind in DETERMINISTIC_ERRORS or (
        kind == "measurement" and "moved no traffic" in str(record.get("message", ""))
    )


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
        # Every point's (client, server) hosts, checked against the graph up front.
        self.endpoints = {p.point_id: endpoints(self.topology, p) for p in self.points}
        # The client hosts driving each point at once (several generators).
        self.generators = {p.point_id: generator_hosts(self.topology, p) for p in self.points}
        client, server = (default_endpoint(self.topology, r) for r in ("client", "server"))
        self.plan = traffic_plan(self.topology, self.family, client, server)
        # Hosts the inventory puts on other machines (SSH); the target guard is checked here.
        self.remotes = ssh_specs(scenario, self.topology)
        self.meta: dict[str, Any] = {}
        self.stops: list[dict[str, Any]] = []
        self.seq = 0
        self.point_no = (0, 0)
        self.measure_start = 0.0
        self.applied: Variant | None = None
        self.removed = False  # the run directory was removed: it held no measurement
        self.mechanism_hosts: list[str] = []
        self.variant_sets: dict[tuple[str, str], list[Variant]] = {}
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
        return point_seconds(point, rounds, nvariants, slowest_link(self.scenario))

    def _shape_links(self, testbed: Testbed, point: WorkloadPoint, restore: bool) -> None:
        """A point with `link_rate`: every link on its client-server path at that rate
        (0 = unshaped) for its tests; `restore` puts the links back as the graph has them."""
        rate = point.spec.path_rate()
        if rate is None:
            return
        for link in path_links(self.topology, *self.endpoints[point.point_id]):
            bps = link.rate_bps if restore else (rate or None)
            for end in link.ends():
                links.reshape(testbed.host(end), testbed.ifname(link.name, end), bps, link.queue_s)

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
                f"hosts reached over SSH: {', '.join(sorted(self.remotes))}; their clocks and "
                "CPUs are their own (docs/methodology.md, real hosts)"
                if self.remotes
                else "generator, server and DUT share this machine's CPUs: compare ratios and "
                "service demand, not absolute rates, with other machines"
            ],
        )
        try:
            preflight(sc, self.family)
            # Render before any namespace exists: a rule set that cannot be written stops here.
            prefix = new_prefix()
            # One rendering per (client, server) pair the workloads use: the rules
            # permit, translate or tunnel exactly the traffic each workload runs.
            pairs = sorted(set(self.endpoints.values()))
            # Every generator host of a pair's points sends what the rules must let by.
            senders: dict[tuple[str, str], list[str]] = {}
            for pid, pair in self.endpoints.items():
                senders.setdefault(pair, [])
                senders[pair] += [g for g in self.generators[pid] if g not in senders[pair]]
            self.variant_sets = {
                pair: prepare_variants(
                    sc,
                    traffic_plan(self.topology, self.family, *pair, generators=senders[pair]),
                    self.run.files_dir,
                    f"secperf_{prefix}",
                    self.topology,
                    ends=pair,
                    suffix=f".{pair[0]}-{pair[1]}" if len(pairs) > 1 else "",
                )
                for pair in pairs
            }
            variants = [v for vs in self.variant_sets.values() for v in vs]
            vm_hosts = (DUT,) if any(v.backend == "vm" for v in variants) else ()
            with (
                Testbed.build(
                    self.topology,
                    prefix=prefix,
                    pin=sc.testbed.pin,
                    vm=vm_settings(sc),
                    vm_hosts=vm_hosts,
                    remotes=self.remotes,
                    external={
                        name: inv.interfaces
                        for name, inv in sc.testbed.hosts.items()
                        if inv.backend == "external"
                    },
                    # rule files rendered into the run directory: copied to remote hosts
                    stage_dirs=[self.run.files_dir],
                ) as testbed,
                install_teardown_handlers(testbed),
            ):
                self._note_vms(testbed)
                for v in variants:
                    for _mech, ctx in v.mechanisms:
                        # for a mechanism that copies the server's settings (TCP options)
                        ctx.server = testbed.host(ctx.ends[1])
                self._check_mechanisms(testbed, variants)
                self._write_meta(
                    # points driven from several client hosts at once: point -> hosts
                    generators={
                        pid: list(hosts) for pid, hosts in self.generators.items() if len(hosts) > 1
                    },
                    remote_hosts={
                        name: f"ssh://{spec.destination}" for name, spec in self.remotes.items()
                    }
                    | {
                        n: "external"
                        for n, h in sc.testbed.hosts.items()
                        if h.backend == "external"
                    },
                    prefix=testbed.prefix,
                    testbed=testbed_info(testbed),
                    topology=self.topology.describe(),
                    placements=self._placements(),
                )
                servers = self._start_servers(testbed)
                try:
                    self._measure_all(testbed, variants)
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

    def _check_mechanisms(self, testbed: Testbed, variants: list[Variant]) -> None:
        """Load every variant once before any traffic: a rule the kernel rejects stops here."""
        self.mechanism_hosts = sorted(
            {h for v in variants for _, c in v.mechanisms for h in c.hosts}
            | ({DUT} if DUT in self.topology.roles else set())
        )
        for v in variants:
            self._apply(testbed, v)
        self._apply(testbed, variants[0])

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

    def _placements(self) -> dict[str, list[dict[str, Any]]]:
        """Variant -> each mechanism's kind and the hosts it ran on (over every pair)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for variants in self.variant_sets.values():
            for v in variants:
                entries = out.setdefault(
                    v.name, [{"kind": m.kind, "hosts": []} for m, _ in v.mechanisms]
                )
                for entry, (_m, ctx) in zip(entries, v.mechanisms, strict=True):
                    entry["hosts"] += [h for h in ctx.hosts if h not in entry["hosts"]]
        return out

    def _start_servers(self, testbed: Testbed) -> list[EngineServer]:
        """An engine server on every host a workload targets."""
        listen = hostport("::" if self.family == 6 else "0.0.0.0", CONTROL_PORT)
        targets = sorted({server for _client, server in self.endpoints.values()})
        started: list[EngineServer] = []
        try:
            for name in targets:
                started.append(start_server(testbed.host(name), listen, data_ports=DATA_PORTS))
        except BaseException:
            for server in started:
                server.stop()
            raise
        return started

    def _target(self, variant: Variant, server: str) -> str:
        """The server's control address for this variant: through the testbed, or the
        address a mechanism gives it (a host-to-host tunnel's inner address)."""
        for mech, ctx in variant.mechanisms:
            addr = mech.target_address(ctx, server, self.family)
            if addr is not None:
                return hostport(addr, CONTROL_PORT)
        via = "direct" if variant.direct else "dut"
        return hostport(self.topology.server_address(self.family, via, server), CONTROL_PORT)

    def _measure_all(self, testbed: Testbed, variants: list[Variant]) -> None:
        rep = self.scenario.repeat
        n = len(next(iter(self.variant_sets.values()), variants))
        names = [v.name for v in next(iter(self.variant_sets.values()), variants)]
        total = sum(
            self._estimate(p, rep.min, sum(v == BASELINE or p.measures(v) for v in names))
            for p in self.points
        )
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
        )
        upto = (
            f" (up to {fmt_eta(total * rep.max / rep.min)} if every point needs {rep.max} rounds)"
            if rep.max > rep.min
            else ""
        )
        self.console.print(
            f"{len(self.points)} point(s) x {n} configuration(s), at least {rep.min} rounds "
            f"each: about {fmt_eta(total)}{upto}",
            highlight=False,
        )
        with Progress(*columns, console=self.console, transient=False) as progress:
            self.measure_start = time.monotonic()
            task = progress.add_task("starting", total=total, eta=f"about {fmt_eta(total)} left")
            for index, point in enumerate(self.points):
                self.point_no = (index + 1, len(self.points))
                pair = self.endpoints[point.point_id]
                self._shape_links(testbed, point, restore=False)
                try:
                    self._measure_point(testbed, self.variant_sets[pair], point, progress, task)
                finally:
                    self._shape_links(testbed, point, restore=True)

    def _eta(self, progress: Progress, task: TaskID) -> float:
        """Seconds left: the scenario's own estimate at first, then scaled by how long
        the measured tests really took against their estimate."""
        t = progress.tasks[task]
        left = max(0.0, (t.total or 0.0) - t.completed)
        if t.completed <= 0:
            return left
        return left * (time.monotonic() - self.measure_start) / t.completed

    def _measure_point(
        self,
        testbed: Testbed,
        variants: list[Variant],
        point: WorkloadPoint,
        progress: Progress,
        task: TaskID,
    ) -> None:
        rep = self.scenario.repeat
        variants = [v for v in variants if v.name == BASELINE or point.measures(v.name)]
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
                at, of = self.point_no
                planned = max(rep.min, rounds + 1)
                where = f"point {at}/{of}, round {rounds + 1}/{planned}"
                eta = f"about {fmt_eta(self._eta(progress, task))} left"
                progress.update(task, description=f"{where} · {label} · {v.name}", eta=eta)
                if not self.console.is_terminal and name == order[0]:
                    # a log (CI, a pipe) gets one plain line a round instead of a bar
                    self.console.print(f"{where}: {label}, {eta}", highlight=False, markup=False)
                self._apply(testbed, v)
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
            "point": point.record(),
            "label": point.label,
            "rep": rep,
        }

        def keep(rec: Record) -> None:
            self.seq += 1
            self.run.append_record({**tags, "seq": self.seq}, rec)

        client, server = self.endpoints[point.point_id]
        ctx = MeasureContext(
            testbed=testbed,
            topology=self.topology,
            plan=self.plan,
            family=self.family,
            variant=variant.name,
            direct=variant.direct,
            target=self._target(variant, server),
            mechanisms=variant.mechanisms,
            keep=keep,
            extra={"files_dir": self.run.files_dir},  # where services (nginx) keep their files
            client=client,
            server=server,
            generators=list(self.generators[point.point_id]),
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


def moved_nothing(result: Record) -> str | None:
    """Why a result record that moved no traffic cannot stand as a result (else None):
    0 bit/s with 0 % loss is not a measurement of the path but of nothing. The record's
    kind says which of its fields count the traffic it moved (`WorkloadKind.moved`)."""
    if result.get("type") != "result":
        return None
    kind = str(result.get("kind", ""))
    fields = WORKLOADS.get(kind).moved if kind in WORKLOADS else ()
    if not fields:
        return None
    got = [result.get(f) for f in fields]
    if any(not isinstance(v, int | float) for v in got) or any(got):
        return None
    sender = result.get("sender")
    sent = sender.get("messages") if isinstance(sender, dict) else None
    what = "no datagram or byte arrived" if sent else "the sender sent nothing"
    return f"the {result.get('kind')} test moved no traffic in the measured window ({what})"


def default_results_root() -> Path:
    return Path(os.environ.get("SECPERF_RESULTS", "results"))


def run_scenario(scenario: Scenario, out_root: Path, console: Console) -> RunDir:
    from secperf import verbose

    run = RunDir.create(out_root, scenario.name)
    console.print(f"run directory: [bold]{run.path}[/]")
    if verbose.enabled():
        verbose.log_to(run.path / "commands.log")
    start = time.monotonic()
    try:
        Runner(scenario, run, console).execute()
    finally:
        verbose.log_to(None)
    console.print(f"measured in {time.monotonic() - start:.0f} s")
    return run
