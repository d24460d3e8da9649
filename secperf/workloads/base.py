"""What a workload kind is: its scenario model's base, its one declaration, and how a
point is measured once.

A kind is one module (or package) holding its scenario model (a `WorkloadSpec`
whose `kind` is `Literal["<name>"]`), its executor and one `KIND = WorkloadKind(...)`
that says everything the rest of secperf needs to know about it: how a point is
measured, how long one test takes, the hosts it needs, its metrics and searches,
its report layout, its checks. `secperf.workloads.registry.WORKLOADS` lists the
kinds; nothing else names one (docs/architecture.md, "Adding a workload kind").

A point (`WorkloadPoint`) carries the workload's own model with one value of every
swept key (`secperf.scenario.sweep.expand`); executors read its typed attributes.
Most kinds are one secperf-engine test from the client to the server
(`EngineExecutor`): its spec is the model's engine fields under their own names
(`engine_spec`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from secperf.engine import Record, run_test
from secperf.mechanisms.base import Mechanism, MechanismContext, TrafficPlan, traffic_plan
from secperf.metric import MetricRow, Search, WorkUnit
from secperf.schema.fields import (
    MAX_POINTS_PER_WORKLOAD,
    MeasuredVariant,
    Name,
    NonNegativeDuration,
    PositiveDuration,
    StrictModel,
    chosen_measures,
)
from secperf.schema.sections import HostName, TopologySection
from secperf.schema.sections import Testbed as TestbedSection
from secperf.tables import ReportLayout
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.tools import Tool
from secperf.workloads.generators import run_generators, sent_messages

Spec = dict[str, Any]  # an engine spec (docs/engine-protocol.md)
ATTACKER = "attacker"  # the host floods come from

# Keys that describe the workload rather than parametrize one test: not in a point's record.
# A test's interval records: SERIES_INTERVALS of them across its measured window, so that
# its series over time has a shape (the report draws one with at least 5), at most one a
# second (the records on disk) and at least MIN_INTERVAL_S apart (each is a snapshot of
# the engine's counters beside the traffic).
SERIES_INTERVALS = 10
MIN_INTERVAL_S = 0.05


def series_interval(duration: float) -> float:
    """Seconds between a `duration`-second test's interval records: duration / 10,
    between MIN_INTERVAL_S and 1 s."""
    return min(1.0, max(MIN_INTERVAL_S, duration / SERIES_INTERVALS))


NOT_PARAMS = frozenset(
    {"kind", "name", "sweep", "table", "clients", "servers", "generators", "variants", "min_rounds"}
)

T = TypeVar("T")


def scalar(value: T | list[Any]) -> T:
    """A swept key's value at one point: a point's model holds one value of every key."""
    if isinstance(value, list):
        raise ValueError(f"a point holds one value, not the sweep {value!r}: expand it first")
    return value


class WorkloadSpec(StrictModel):
    """Keys every workload has. `sweepable` names the keys that take a list.

    The engine fields: `engine_fields` names the keys that an engine-driven kind
    passes to the engine as they are (set ones only); `engine_names` the ones the
    engine still calls otherwise (until it takes the scenario's names); `engine_kind`
    the engine's kind when it is not the workload's."""

    sweepable: ClassVar[dict[str, str]] = {}  # key -> unit: size | rate | count | name
    engine_kind: ClassVar[str] = ""
    engine_fields: ClassVar[tuple[str, ...]] = ()
    engine_names: ClassVar[dict[str, str]] = {}

    kind: str  # each kind's model narrows it to its Literal; declared here to come first
    """See below; one example of each in "One example of each kind"."""
    name: Name = ""
    """Names the workload in reports; two workloads may not share an explicit name; derived names
    that collide get `-2`, `-3`, … in file order.
    """
    duration: PositiveDuration = 5.0
    """Measured time of each test."""
    warmup: NonNegativeDuration = 1.0
    """Excluded from the result."""
    sweep: Literal["product", "zip"] = "product"
    """How list-valued keys combine (see Sweeps)."""
    # Where the workload runs from and to: a host name or a zone of [topology]
    # (a zone means its first client / server host). Empty: the testbed's
    # "client" and "server" (or its first host of that role).
    clients: list[HostName] = Field(default_factory=list)
    """Where the workload runs from and to, on a `[topology]` graph (see there)."""
    servers: list[HostName] = Field(default_factory=list)
    """Where the workload runs from and to, on a `[topology]` graph (see there)."""
    # How many client hosts drive the workload at once: the first N client hosts of
    # `clients` (a zone; empty: the testbed's client hosts), started together, their
    # records merged (rates summed; docs/scenario-format.md "Several generators").
    generators: int = Field(default=1, ge=1, le=16)
    """Stream, rr and crr only: run from the first N client hosts of the `clients` zone (no
    `clients`: of the testbed) at once, against the same server, and merge their records (see
    "Several generators").
    """
    # A title such as "Table 1: TCP_STREAM": the report then prints this workload as
    # the source paper does, workload points as columns and variants as rows.
    table: str = ""
    """A title such as `"Table 1: TCP_STREAM"`: the report prints this workload as the source paper
    does, workload points as columns and baseline, variants and degradations as rows; points
    labelled `key=value` get their values as column heads (`56KiB / 4KiB`) and the keys in the
    corner (`socket buffer / message`).
    """
    # The variants this workload measures beside the baseline (names of [variants];
    # a swept variant by its own name, all its values); empty = every variant.
    variants: list[MeasuredVariant] = Field(default_factory=list)
    """The variants this workload measures beside the baseline (a swept variant by its own name
    covers all its values; one value by its expanded name, `openvpn[cipher=aes-256-gcm]`); the
    others are skipped for its points and their cells stay empty (`–`). An `[[expect]]` or
    `[[paper]]` row that names this workload and a variant it skips is refused.
    """
    # At least this many rounds at each of this workload's points ([repeat] min
    # otherwise; [repeat] max rises to it): the points whose small effects a study's
    # [[paper]] rows ask about need more rounds than a sweep beside them.
    min_rounds: int | None = Field(default=None, ge=2, le=1000)
    """Rounds each of this workload's points always runs, past the budget (and past `[repeat].max`,
    which rises to it): for the points whose small effects a study's `[[paper]]` rows ask about,
    beside a sweep that needs fewer. `secperf check` and the run's first line print it (`at
    least 3 rounds (delay: 9)`).
    """
    _derived_name: bool = PrivateAttr(default=False)

    @property
    def derived_name(self) -> bool:
        """True when the file gave no name and it was made from kind and protocol."""
        return self._derived_name

    def default_name(self) -> str:
        raise NotImplementedError

    def swept_values(self) -> dict[str, list[object]]:
        """Every sweepable key whose value is a list, in field order."""
        return {
            key: list(value)
            for key in self.sweepable
            if isinstance(value := getattr(self, key), list)
        }

    def unrecorded(self) -> frozenset[str]:
        """Keys left out of a point's record beyond NOT_PARAMS (a mixin's unused ones)."""
        return frozenset()

    def point_record(self) -> dict[str, Any]:
        """The point as records.jsonl carries it (`point`, docs/data-format.md): every
        key that parametrizes a test, in the model's field order."""
        left_out = NOT_PARAMS | self.unrecorded()
        return {k: v for k, v in self.model_dump().items() if k not in left_out}

    def file_sets(self) -> dict[str, list[int]]:
        """The files this workload serves, by key (sizes): each is built in memory and
        written to the server host; none by default."""
        return {}

    def record_interval(self) -> float:
        """Seconds between a test's interval records (0: none): `series_interval` of its
        duration unless the kind asks otherwise (the run's records on disk are bounded
        by it)."""
        return series_interval(self.duration)

    def path_rate(self) -> int | None:
        """The rate every link of the client-server path is shaped to for this point's
        tests (0: unshaped); None leaves the links as the graph made them."""
        return None

    @field_validator("clients", "servers")
    @classmethod
    def _one_endpoint(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if len(value) > 1:
            raise ValueError(
                f"{info.field_name} names {len(value)} hosts; a workload runs between one "
                f"client and one server host for now: name one (a host or a zone), and "
                "write one workload per pair"
            )
        return value

    @model_validator(mode="after")
    def _fill_name_and_check_sweep(self) -> WorkloadSpec:
        if not self.name:
            self.name = self.default_name()
            self._derived_name = True
        swept = self.swept_values()
        if self.sweep == "zip" and swept:
            lengths = {key: len(values) for key, values in swept.items()}
            if len(set(lengths.values())) > 1:
                detail = ", ".join(f"{key} has {n}" for key, n in lengths.items())
                raise ValueError(f"sweep = 'zip' needs lists of equal length: {detail}")
            points = next(iter(lengths.values()))
            combos = list(zip(*swept.values(), strict=True))
            if len(set(map(repr, combos))) != len(combos):
                raise ValueError("sweep = 'zip' lists give the same point twice")
        else:
            points = 1
            for values in swept.values():
                points *= len(values)
        if points > MAX_POINTS_PER_WORKLOAD:
            raise ValueError(
                f"this workload sweeps {points} points, more than {MAX_POINTS_PER_WORKLOAD}; "
                "split it or shorten the lists"
            )
        return self


S = TypeVar("S", bound=WorkloadSpec)
S_co = TypeVar("S_co", bound=WorkloadSpec, covariant=True)
S_contra = TypeVar("S_contra", bound=WorkloadSpec, contravariant=True)


def engine_spec(spec: WorkloadSpec, **extra: Any) -> Spec:
    """The engine spec of one point: the model's `engine_fields` that are set, under
    the engine's names (`engine_names`; a field absent from it keeps its own name),
    then `extra` (the server, what the kind computes)."""
    model = type(spec)
    out: Spec = {"kind": model.engine_kind or spec.kind}
    for key in model.engine_fields:
        value = getattr(spec, key)
        if value is not None:
            out[model.engine_names.get(key, key)] = scalar(value)
    out.update(extra)
    return out


@dataclass(frozen=True)
class WorkloadPoint(Generic[S_co]):
    """One fully specified test: the workload's model with one value of every key.

    Sizes are int bytes, rates int bits/s (None = unpaced), durations float seconds."""

    workload_index: int
    index: int  # position among this workload's points
    spec: S_co
    label: str = ""  # "message=16KiB", "request=32 response=1KiB"; "" when nothing is swept
    swept: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The workload's name."""
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def clients(self) -> tuple[str, ...]:
        """The hosts or zones the workload names to run from ([] = the defaults)."""
        return tuple(self.spec.clients)

    @property
    def servers(self) -> tuple[str, ...]:
        return tuple(self.spec.servers)

    @property
    def generators(self) -> int:
        """Client hosts driving it at once."""
        return self.spec.generators

    @property
    def variants(self) -> tuple[str, ...]:
        """The variants measured at this point beside the baseline (their names in
        [variants]; a swept one covers all its values); () = every variant."""
        return tuple(self.spec.variants)

    def min_rounds(self, default: int) -> int:
        """The rounds this point always runs: its workload's `min_rounds`, else `default`
        ([repeat] min)."""
        return self.spec.min_rounds or default

    def max_rounds(self, default: int) -> int:
        """Its cap on rounds: `default` ([repeat] max), raised to its own minimum."""
        return max(default, self.min_rounds(0))

    def measures(self, variant: str) -> bool:
        """Whether this point measures `variant` (an expanded name such as 'ovpn[cipher=none]'):
        its workload names it, or its family (all of the sweep's values)."""
        return chosen_measures(self.variants, variant)

    @property
    def point_id(self) -> str:
        """Stable id within a run: "tcp-rr#0"."""
        return f"{self.name}#{self.index}"

    def record(self) -> dict[str, Any]:
        """The point as every record of its tests carries it (docs/data-format.md)."""
        return self.spec.point_record()


@dataclass
class MeasureContext:
    """Everything an executor may use for one measurement of one variant."""

    testbed: Testbed
    topology: Topology
    plan: TrafficPlan
    family: int
    variant: str  # "baseline" or the variant's name
    direct: bool  # this variant bypasses the DUT (a `direct` baseline)
    target: str  # the engine server's control address (ADDR:PORT) for this variant
    mechanisms: list[tuple[Mechanism, MechanismContext]] = field(default_factory=list)
    # A rule-set review's placed flows this variant's rule set was traced to deny before
    # any traffic (secperf.run.verdict_probe): a workload sends them as it sends probes.
    denied: frozenset[str] = frozenset()
    # The hosts the workload runs from and to (names in the testbed graph).
    client: str = "client"
    server: str = "server"
    # The client hosts that drive the point at once (several generators); empty: client.
    generators: list[str] = field(default_factory=list)
    # Append one record to records.jsonl, tagged with variant, point and round.
    keep: Callable[[Record], None] = lambda _rec: None
    extra: dict[str, Any] = field(default_factory=dict)
    # The round this measurement belongs to, and the run's seed: a workload that draws
    # at random seeds its draws with both, so that every variant of a round meets the
    # same draws and the same seed draws them again.
    rep: int = 0
    seed: int = 0

    @classmethod
    def on(
        cls,
        testbed: Testbed,
        target: str,
        *,
        family: int = 4,
        variant: str = "test",
        mechanisms: list[tuple[Mechanism, MechanismContext]] | None = None,
        keep: Callable[[Record], None] | None = None,
        client: str = "client",
        server: str = "server",
    ) -> MeasureContext:
        """A context for measuring on `testbed` outside a run (tools and tests):
        topology and traffic plan come from the testbed itself."""
        return cls(
            testbed=testbed,
            topology=testbed.topology,
            plan=traffic_plan(testbed.topology, family, client, server),
            family=family,
            variant=variant,
            direct=False,
            target=target,
            mechanisms=mechanisms or [],
            keep=keep or (lambda _rec: None),
            client=client,
            server=server,
        )


class Executor(Protocol[S_contra]):
    def measure(self, ctx: MeasureContext, point: WorkloadPoint[S_contra]) -> Record:
        """Measure the point once; return its `result` record (also passed to ctx.keep)."""
        ...


def _tagged(keep: Callable[[Record], None], kind: str) -> Callable[[Record], None]:
    """A record sink that files result records under the workload's kind."""

    def tagged(rec: Record) -> None:
        keep({**rec, "kind": kind} if rec.get("type") == "result" else rec)

    return tagged


@dataclass(frozen=True)
class EngineExecutor:
    """One engine test from the client to the server (or from every generator at
    once, their results merged): the point's own engine spec (`engine_spec`).

    `extra`: what the kind sets beyond its fields (a fixed transfer's time limit;
    the interval records come every `record_interval()` unless it says otherwise);
    `tried`: what a merged record's loss ratio divides by (default the messages sent).
    A kind built on another engine kind (`engine_kind`) files its result records under
    its own kind, so that its own metrics read them."""

    extra: Callable[[Any], Mapping[str, Any]] | None = None
    tried: Callable[[Record], int] = sent_messages

    def spec(self, model: WorkloadSpec, server: str) -> Spec:
        """The engine spec for one point, aimed at `server` (ADDR:PORT)."""
        more = dict(self.extra(model)) if self.extra is not None else {}
        more.setdefault("interval", model.record_interval())
        return engine_spec(model, server=server, **more)

    def measure(self, ctx: MeasureContext, point: WorkloadPoint[WorkloadSpec]) -> Record:
        spec = self.spec(point.spec, ctx.target)
        own = spec["kind"] == point.kind
        keep = ctx.keep if own else _tagged(ctx.keep, point.kind)
        if len(ctx.generators) > 1:
            hosts = [(name, ctx.testbed.host(name)) for name in ctx.generators]
            result = run_generators(hosts, spec, keep, tried=self.tried)
        else:
            result = run_test(ctx.testbed.host(ctx.client), spec, on_record=keep).result
        return result if own else {**result, "kind": point.kind}


@dataclass(frozen=True)
class Refused:
    """What a kind's scenario-level check (`WorkloadKind.validate`) refuses: a message,
    and the workload's key it is about ("" for the workload as a whole), so that the
    error points at that key's line."""

    message: str
    key: str = ""


@dataclass(frozen=True)
class CheckContext:
    """What a kind's static check may use (`secperf check` and `secperf run`, before
    any testbed exists): the workload's index in [[workloads]], the scenario's graph
    (built on first use) and where a key path sits in the scenario file."""

    index: int
    source: Path | None
    topology: Callable[[], Topology]
    where: Callable[[tuple[str | int, ...]], str]


def no_hosts(_spec: WorkloadSpec) -> frozenset[str]:
    return frozenset()


def attacker(_spec: WorkloadSpec) -> frozenset[str]:
    """The attacker host: a kind that floods from it at every point."""
    return frozenset({ATTACKER})


def never(_spec: WorkloadSpec) -> bool:
    return False


def always(_spec: WorkloadSpec) -> bool:
    return True


def timed(spec: WorkloadSpec, _link_bps: int | None) -> float:
    """One test's length: its warm-up and its duration."""
    return spec.duration + spec.warmup


def no_tools(_spec: WorkloadSpec) -> Sequence[Tool]:
    return ()


@dataclass(frozen=True)
class OfferedLoad:
    """A kind that can run open loop, at a fixed offered rate, so that the baseline and
    every variant are compared at the same load (docs/methodology.md, "Open loop").

    `fraction(spec)`: the share of the baseline's closed-loop maximum the point asks
    for (`load = 0.5`), None when it runs closed loop or at an absolute rate already;
    `closed(spec)`: the point closed loop (the runner measures it on the baseline
    first, in the same run); `at(spec, rate)`: the point at an absolute offered rate;
    `rate(spec)`: the point's offered rate (None: closed loop); `metric`: the rate
    metric, both the closed-loop maximum's and the achieved rate's."""

    fraction: Callable[[Any], float | None]
    closed: Callable[[Any], Any]
    at: Callable[[Any, float], Any]
    rate: Callable[[Any], float | None]
    metric: str


@dataclass(frozen=True)
class WorkloadKind(Generic[S]):
    """Everything secperf needs to know about one workload kind.

    - `executor` measures one point once; `test_seconds(spec, link_bps)` plans how
      long one test of a point takes (the estimate and the progress bar; `link_bps`
      is the scenario's slowest link rate, None when unshaped);
    - `moved`: the result fields whose sum is the traffic a test moved (all 0: the test
      measured nothing, an error); empty: the kind has no such check;
    - `hosts(point spec)`: testbed hosts beyond client, dut and server a point needs;
      `floods(spec)`: the workload floods from the attacker (IPv4 only);
    - `generators`: several client hosts may drive a point at once (their records merge);
    - `metrics`: (metric, extractor) rows of its result record, in report order;
      `searches`: the searches the record holds; `work_unit`: what CPU per host divides
      by; `checks`: its records carry pass/fail checks (the report's check tables);
      `layout`: its own report tables (and charts) instead of a table per metric;
    - `validate(spec, testbed, topology)`: a scenario-level check (Refused, or None);
      `preflight(spec, ctx)`: a static check before any testbed (raises ScenarioError);
      `tools(spec)`: the programs it needs;
    - `calibrates(spec)`: a test's figure is a rate over `duration`, so the noise
      calibration measures the baseline's noise and may plan the duration
      (secperf.run.calibrate); never for searches, checks and fixed transfers;
    - `offered`: the kind can run open loop at a fixed offered rate (OfferedLoad);
    - `rule_set_traffic(spec)`: the kind sends a rule-set review's traffic: "coverage"
      (derived from the scenario's rule sets) or the path of the user's own flow file
      (CSV, conntrack dump, pcap); None: it sends none. The plan places those flows
      (secperf.plan.review) and hands them to executors as `ctx.plan.flows`.
    """

    name: str
    model: type[S]
    executor: Executor[S]
    metrics: tuple[MetricRow, ...] = ()
    searches: tuple[Search, ...] = ()
    work_unit: WorkUnit | None = None
    moved: tuple[str, ...] = ()
    hosts: Callable[[S], frozenset[str]] = no_hosts
    floods: Callable[[S], bool] = never
    generators: bool = False
    test_seconds: Callable[[S, int | None], float] = timed
    validate: Callable[[S, TestbedSection, TopologySection | None], Refused | None] | None = None
    preflight: Callable[[S, CheckContext], None] | None = None
    tools: Callable[[S], Sequence[Tool]] = no_tools
    checks: bool = False
    layout: ReportLayout | None = None
    offered: OfferedLoad | None = None
    calibrates: Callable[[S], bool] = never
    rule_set_traffic: Callable[[S], str | Path | None] | None = None
