"""The scenario file's schema: its sections, and where each kind's keys come from.

A scenario is data only. These models validate it strictly (an unknown key is
an error, `"3"` is not an int) so that a typo stops the run before any traffic.
Each key's description is the string below it: docs/scenario-format.md's reference is
generated from these models (secperf/docgen/scenario_format.py).

Each mechanism and workload kind's model is in its own module, listed in
secperf.mechanisms.registry and secperf.workloads.registry; the registries validate
each `mechanisms` entry and each `[[workloads]]` table through the model its `kind`
names.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    ModelWrapValidatorHandler,
    PlainValidator,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from secperf.mechanisms.base import MechanismSpec
from secperf.mechanisms.registry import MECHANISMS
from secperf.scenario.expect import Expect, problems
from secperf.scenario.paper import PaperRow, PaperTable, paper_problems, table_problems
from secperf.schema.fields import (
    FILE_SET_TOTAL_MAX,
    Name,
    NonNegativeDuration,
    PositiveDuration,
    StrictModel,
    VariantName,
    bounded,
    chosen_measures,
)
from secperf.schema.sections import (
    Testbed,
    TopologySection,
)
from secperf.schema.units import (
    parse_duration,
    plain_number,
    toml_repr,
)
from secperf.testbed.hosts.registry import BACKENDS
from secperf.workloads.base import WorkloadSpec
from secperf.workloads.registry import WORKLOADS

# ---------------------------------------------------------------- testbed, repeat, timing


# How long a run may measure, shared by its points (docs/methodology.md, "Precision
# by budget"); every point's minimum rounds run even past it.
Budget = Annotated[float, PlainValidator(bounded(parse_duration, 1, 7 * 86400, "a budget"))]


class Repeat(StrictModel):
    """How many rounds: at least `min`, then on until every asked interval is met, the
    `budget` is spent or `max` rounds ran (docs/methodology.md)."""

    min: int = Field(default=3, ge=2)
    """Rounds always run, whatever the budget; the interval may stop a point only from round max(3,
    `min`) on, so `min = 2` differs from 3 only when `max = 2`. A workload's own `min_rounds`
    overrides it for its points.
    """
    # A hard cap on rounds per point; the budget usually ends a point first.
    max: int = Field(default=50, le=1000)
    """Rounds at most (a hard cap; the budget usually ends a point first)."""
    confidence: float = Field(default=0.95, ge=0.5, le=0.999)
    """Confidence level of every interval."""
    # Each paired degradation's half width, in percentage points: the target the rounds
    # stop on when a point has variants.
    degradation_pp: float = Field(default=2.0, gt=0)
    """Target: half width of each variant's paired degradation interval, in percentage points; the
    rounds of a point with variants stop on it.
    """
    # Each value's own half width, in % of its mean: the target of a point without
    # variants (and reported for every value).
    halfwidth_pct: float = Field(default=2.0, gt=0)
    """Target: half width of each value's own interval, as % of its mean; the rounds of a point
    with the baseline alone stop on it, and the report marks every value wider than it (older
    scenarios used this key for both targets; a run.json without `degradation_pp` is read that
    way).
    """
    # The run's measuring time, shared by its points (each runs `min` rounds whatever).
    budget: Budget = 600.0
    """The run's measuring time (tests and their set-up, rounds measured again, the traced and
    attribution rounds; not the testbed's build nor the noise calibration), shared by the
    points: each runs its `min` rounds, then each next round goes to the point whose widest
    interval is furthest from its target per second of a round (docs/methodology.md, "Precision
    by budget"). Every point's `min` rounds run even past it (`secperf check` says when they
    alone exceed it). `secperf run --budget 10min` or `--until-target` (no budget) override it.
    """
    # Seed of each round's shuffled order; absent: a fresh one per run (run.json keeps it).
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    """Seed of the rounds' shuffled order and of a `mix` workload's requests (every variant of a
    round makes the same ones; docs/methodology.md); absent: a fresh random seed each run.
    Either way `run.json` records it (`order_seed`) and the order of every round.
    """
    # A round is disturbed when, during one of its tests, other processes used more
    # than this % of one of the testbed's CPUs; it is measured again (up to `remeasure`
    # times), then kept and flagged.
    disturbed_pct: float = Field(default=10.0, gt=0, le=100)
    """A test is disturbed when other processes used more than this % of one of the testbed's CPUs
    while it ran (exact counters: docs/methodology.md, "The machine's own noise").
    """
    remeasure: int = Field(default=2, ge=0, le=10)
    """Times a disturbed round is measured again (its values replace the disturbed ones); once a
    round stays disturbed through all its attempts, later disturbed rounds are kept and flagged
    at once until a round comes out clean. `0`: keep and flag.
    """
    # One extra round per point with the kernel's softirq time traced (bpftrace), for
    # the mechanism's kernel cost per unit of work; its rates are not used.
    trace_softirq: bool = True
    """One more round per point after its measured ones, with the kernel's softirq time traced
    exactly (BPF, bpftrace): the mechanism's kernel cost per unit of work; that round's rates
    are not used. Where bpftrace is missing or cannot attach, the report says "not measured".
    """
    # One more round per point for where the cost goes: each configuration profiled
    # (perf cpu-clock sampling) and its packet filters' rules counted on a copy of the
    # live rule set (hot rules, rules walked per chain); its rates are not used. Not
    # given: as trace_softirq (a file that leaves one extra round out leaves both).
    attribution: bool | None = None
    """One more round per point (after the traced one) for where the cost goes: each configuration
    once profiled (`perf record -e cpu-clock`, the functions whose share of the CPU grew against
    the baseline) and, where it loads nftables or iptables rules, once with every rule counted
    on a copy of the live rule set (the hot rules, the mean rules a packet walks per chain; the
    original restored and checked after); that round's rates are not used. Without perf the
    report says "not profiled: perf missing (install linux-perf)"; only points whose kind has a
    unit of work get it; `false` leaves the round out (docs/methodology.md, "Where the cost
    goes").
    """
    # The noise calibration before the first round (secperf.run.calibrate): "off" (none),
    # "cached" (this machine's and testbed shape's last one, measured when there is none
    # younger than a week) or "fresh" (measured again). It plans each calibrated
    # workload's test duration (unless the workload gives `duration` itself) and says
    # before the run what the budget resolves.
    calibrate: Literal["off", "cached", "fresh"] = "off"
    """The noise calibration before the first round (docs/methodology.md, "Planned precision"):
    `cached` reuses this machine's calibration of the same testbed shape (younger than a week)
    or measures one, `fresh` measures again; it plans each stream, rr and crr workload's test
    duration (unless its own table gives `duration`) and says before the run what the budget
    resolves. `secperf run --calibrate …` overrides it.
    """

    @property
    def attributes(self) -> bool:
        """Whether the attribution round runs."""
        return self.trace_softirq if self.attribution is None else self.attribution

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence_is_a_fraction(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool) and 1 < value <= 100:
            raise ValueError(
                f"confidence is a fraction, not a percentage: write {plain_number(value / 100)} "
                f"for {plain_number(value)} %"
            )
        return value

    @field_validator("max")
    @classmethod
    def _max_at_least_min(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("min")
        if isinstance(low, int) and value < low:
            raise ValueError(f"max ({value}) must be at least min ({low})")
        return value


class Timing(StrictModel):
    duration: PositiveDuration = 5.0
    """Measured time of each test, unless a workload says otherwise."""
    warmup: NonNegativeDuration = 1.0
    """Time run before measuring, excluded from the result."""


# ---------------------------------------------------------------- mechanisms

# Each kind's model is in its module (secperf.mechanisms.*); the registry validates
# an entry through the model its `kind` names.
Mechanism = Annotated[MechanismSpec, MECHANISMS]


# The most variants one variant's sweeps may expand into (the product of its lists):
# each is rendered, loaded and measured in every round.
MAX_VARIANT_SWEEP = 256
# The most [[workloads]] tables of one scenario (the largest shipped one has 27).
MAX_WORKLOADS = 64


class Variant(StrictModel):
    description: str = ""
    """Shown in the report."""
    # Empty = a plain forwarding DUT: the cost of the hop itself (against
    # baseline = "direct"), or an A/A check of the noise (against "forward").
    mechanisms: list[Mechanism] = Field(default_factory=list)
    """What the DUT does, applied in order; each has a `kind`, and an optional `on` that places it
    on other hosts (see `[topology]`).
    """
    # What the DUT host is in this variant: its namespace, or a VM ([testbed.vm]) on
    # the same links with the same addresses. The mechanisms run wherever it is.
    backend: str = BACKENDS.default.name
    """What the DUT host is in this variant: its network namespace, or a qemu VM (`[testbed.vm]`)
    on the same links with the same addresses; the mechanisms run wherever it is. Variants of
    both kinds are measured interleaved on one testbed (the VM boots once, before the first
    test); with no mechanism a `vm` variant measures virtualization alone.
    """

    @field_validator("backend")
    @classmethod
    def _a_backend(cls, value: str) -> str:
        return BACKENDS.canonical(value, variant=True)

    @field_validator("mechanisms")
    @classmethod
    def _single_kinds_once(cls, mechs: list[MechanismSpec]) -> list[MechanismSpec]:
        """A kind that declares itself single (`MechanismKind.single`) appears once."""
        seen: dict[str, int] = {}
        for i, m in enumerate(mechs):
            single = MECHANISMS.of(m).single
            if single is not None and m.kind in seen:
                raise ValueError(
                    f"mechanisms[{seen[m.kind]}] and mechanisms[{i}] are both kind = "
                    f'"{m.kind}": {single}'
                )
            seen.setdefault(m.kind, i)
        return mechs

    @field_validator("mechanisms")
    @classmethod
    def _sweep_bounded(cls, mechs: list[MechanismSpec]) -> list[MechanismSpec]:
        """The product of the variant's sweep lists stays within MAX_VARIANT_SWEEP."""
        lists = [
            (f"mechanisms[{i}].{key}", len(getattr(m, key)))
            for i, m in enumerate(mechs)
            for key in m.swept_keys()
        ]
        total = math.prod(n for _, n in lists)
        if total > MAX_VARIANT_SWEEP:
            sizes = " x ".join(f"{n} values of {key}" for key, n in lists)
            raise ValueError(
                f"the variant expands into {total} variants ({sizes}): a variant may expand into "
                f"at most {MAX_VARIANT_SWEEP}; sweep fewer values, or split it into variants"
            )
        return mechs

    def expand(self, name: str) -> list[tuple[str, list[Any], dict[str, object]]]:
        """One (name, mechanisms, swept values) per combination of the listed values.

        A variant without lists is itself: [(name, mechanisms, {})]. With
        `rules = [1, 10]` it is `name[rules=1]` and `name[rules=10]`.
        """
        axes: list[tuple[int, str, list[object]]] = [
            (i, key, list(getattr(mech, key)))
            for i, mech in enumerate(self.mechanisms)
            for key in mech.swept_keys()
        ]
        if not axes:
            return [(name, list(self.mechanisms), {})]
        out = []
        for combo in itertools.product(*(values for _, _, values in axes)):
            mechs = list(self.mechanisms)
            swept: dict[str, object] = {}
            for (i, key, _), value in zip(axes, combo, strict=True):
                mechs[i] = mechs[i].model_copy(update={key: value})
                swept[key] = value
            label = " ".join(f"{k}={v}" for k, v in swept.items())
            out.append((f"{name}[{label}]", mechs, swept))
        return out


# ---------------------------------------------------------------- workloads

Workload = Annotated[WorkloadSpec, WORKLOADS]


# ---------------------------------------------------------------- the scenario


class Scenario(StrictModel):
    name: Name
    """Names the run directory."""
    description: str = ""
    """Shown at the top of the report."""
    testbed: Testbed = Field(default_factory=Testbed)
    """Where the hosts run and how they are joined ([testbed] below)."""
    topology: TopologySection | None = None
    """The testbed as a graph ([topology] below); absent: the standard client – dut – server plan.
    """
    repeat: Repeat = Field(default_factory=Repeat)
    """How many rounds, and when to stop ([repeat] below)."""
    timing: Timing = Field(default_factory=Timing)
    """Each test's duration and warm-up when a workload gives none ([timing] below)."""
    variants: dict[VariantName, Variant]
    """What the DUT does, one table per variant ([variants.NAME] below); each is measured against
    the baseline, the same path without it.
    """
    workloads: list[Workload]
    """The traffic, one table per workload ([[workloads]] below), each measured against every
    variant it names.
    """
    # Thresholds for a change review (secperf.report.gate): checked after the run.
    expect: list[Expect] = Field(default_factory=list)
    """Thresholds for a change review, checked after the run ([[expect]] below)."""
    # The source paper's numbers beside the run's (secperf.report.paper gives verdicts).
    paper: list[PaperRow] = Field(default_factory=list)
    """The source paper's numbers beside the run's ([[paper]] below)."""
    # Each paper table's tolerance, fixed before measuring, with its reason.
    paper_table: list[PaperTable] = Field(default_factory=list)
    """Each paper table's tolerance, fixed before measuring, with its reason ([[paper_table]]
    below).
    """
    # Where the scenario came from; set by the loader, never read from the file.
    source: Path | None = Field(default=None, exclude=True, strict=False)

    # The workloads (by index) whose table gives `duration` itself: a planned test
    # duration leaves them as they are (secperf.run.calibrate).
    _pinned_durations: frozenset[int] = PrivateAttr(default_factory=frozenset)

    @property
    def pinned_durations(self) -> frozenset[int]:
        return self._pinned_durations

    @model_validator(mode="wrap")
    @classmethod
    def _note_pinned_durations(
        cls, data: Any, handler: ModelWrapValidatorHandler[Scenario]
    ) -> Scenario:
        """Which workloads give `duration` themselves (before [timing] fills the rest)."""
        given: frozenset[int] = frozenset()
        if isinstance(data, dict) and isinstance(data.get("workloads"), list):
            given = frozenset(
                i
                for i, w in enumerate(data["workloads"])
                if isinstance(w, dict) and "duration" in w
            )
        scenario = handler(data)
        if isinstance(data, dict):
            scenario._pinned_durations = given
        return scenario

    @model_validator(mode="before")
    @classmethod
    def _apply_timing_defaults(cls, data: Any) -> Any:
        """Workloads without duration/warmup take them from [timing]."""
        if not isinstance(data, dict):
            return data
        try:
            timing = Timing.model_validate(data.get("timing", {}))
        except ValueError:
            return data  # reported where [timing] is validated
        workloads = data.get("workloads")
        if isinstance(workloads, list):
            data = {
                **data,
                "workloads": [
                    {"duration": timing.duration, "warmup": timing.warmup, **w}
                    if isinstance(w, dict)
                    else w
                    for w in workloads
                ],
            }
        return data

    @field_validator("variants")
    @classmethod
    def _at_least_one_variant(cls, value: dict[str, Variant]) -> dict[str, Variant]:
        if not value:
            raise ValueError("a scenario needs at least one variant: add a [variants.NAME] table")
        return value

    @model_validator(mode="after")
    def _workload_variants_exist(self) -> Scenario:
        names = self.variant_names()
        for i, w in enumerate(self.workloads):
            unknown = [v for v in w.variants if v not in names]
            if unknown:
                raise ValueError(
                    f"workloads[{i}] ({w.name}).variants names {', '.join(unknown)}, which "
                    f"[variants] does not have: use some of {', '.join(names)}"
                )
        return self

    def _unmeasured(self, workload: str | None, variants: list[str | None]) -> str | None:
        """The first of `variants` that `workload` (a name, `NAME#i` allowed) skips."""
        name = (workload or "").partition("#")[0]
        chosen = [w.variants for w in self.workloads if w.name == name]
        for v in variants:
            if v and v != "baseline" and not all(chosen_measures(c, v) for c in chosen):
                return v
        return None

    @model_validator(mode="after")
    def _expectations_name_what_exists(self) -> Scenario:
        """Every [[expect]] names a variant, workload and metric of this scenario."""
        variants, found = self.variant_names(), self.metrics_by_workload()
        for i, e in enumerate(self.expect):
            for key, message in problems(e, variants, found):
                raise ValueError(f"expect[{i}].{key} {message}")
        for i, row in enumerate(self.paper):
            for key, message in paper_problems(row, variants, found):
                raise ValueError(f"paper[{i}].{key} {message}")
        for message in table_problems(self.paper, self.paper_table):
            raise ValueError(message)
        rows = [("expect", i, e.workload, e.variant, e.against) for i, e in enumerate(self.expect)]
        rows += [("paper", i, r.workload, r.variant, r.against) for i, r in enumerate(self.paper)]
        for section, i, workload, variant, against in rows:
            skipped = self._unmeasured(workload, [variant, against])
            if skipped is not None:
                raise ValueError(
                    f"{section}[{i}] names {skipped!r} at workload {workload!r}, whose "
                    "`variants` list leaves it out: add it there, or name another workload"
                )
        return self

    def variant_names(self) -> list[str]:
        """Every variant a run measures (a swept one as `name[key=value]`), then the
        names of sweeps' families."""
        names = [n for name, v in self.variants.items() for n, _, _ in v.expand(name)]
        return names + [name for name in self.variants if name not in names]

    def metrics_by_workload(self) -> dict[str, dict[str, str]]:
        """Each workload's name -> the metrics its results carry (its kind's, and those
        of the variants' mechanisms), each with its unit."""
        mechanism = {
            m.name: m.unit
            for v in self.variants.values()
            for x in v.mechanisms
            for m, _ in MECHANISMS.of(x).metrics
        }
        return {
            w.name: {m.name: m.unit for m, _ in WORKLOADS.of(w).metrics} | mechanism
            for w in self.workloads
        }

    @model_validator(mode="after")
    def _workloads_fit_the_testbed(self) -> Scenario:
        """What each workload's kind asks of the scenario: several generators only where
        the kind merges them, floods on IPv4, and the kind's own checks (its `validate`)."""
        several = [k.name for k in WORKLOADS if k.generators]
        for i, w in enumerate(self.workloads):
            kind = WORKLOADS.of(w)
            if w.generators > 1 and not kind.generators:
                raise ValueError(
                    f"workloads[{i}].generators = {w.generators}: kind {w.kind!r} runs from "
                    f"one host; several generators drive {', '.join(several)} only"
                )
            if self.testbed.family == "ipv6" and kind.floods(w):
                raise ValueError(
                    f"workloads[{i}] ({w.name}) floods from the attacker, and floods are IPv4 "
                    'only: set family = "ipv4" in [testbed], or move this workload to a '
                    "scenario of its own"
                )
            refused = kind.validate(w, self.testbed, self.topology) if kind.validate else None
            if refused is not None:
                key = f".{refused.key}" if refused.key else f" ({w.name})"
                raise ValueError(f"workloads[{i}]{key} {refused.message}")
        return self

    @model_validator(mode="after")
    def _files_of_the_run_bounded(self) -> Scenario:
        """Every workload writes its files into the same server roots: all of them
        together stay within FILE_SET_TOTAL_MAX, as one workload's do."""
        sets = {
            f"workloads[{i}].{key}": sizes
            for i, w in enumerate(self.workloads)
            for key, sizes in w.file_sets().items()
        }
        total = sum(sum(sizes) for sizes in sets.values())
        if total > FILE_SET_TOTAL_MAX and len(self.workloads) > 1:
            raise ValueError(
                f"the workloads' files total {total / 1024**3:.1f} GiB: the files all "
                f"workloads of a run serve may total at most {FILE_SET_TOTAL_MAX // 1024**3} "
                "GiB together (each is built in memory and written to the server hosts); "
                "use fewer or smaller files, or split the workloads into scenarios"
            )
        return self

    @field_validator("workloads")
    @classmethod
    def _workloads_named_uniquely(cls, value: list[WorkloadSpec]) -> list[WorkloadSpec]:
        if not value:
            raise ValueError("a scenario needs at least one workload: add a [[workloads]] table")
        if len(value) > MAX_WORKLOADS:
            raise ValueError(
                f"{len(value)} workloads: a scenario may have at most {MAX_WORKLOADS} (each "
                "is measured against every variant in every round); split it into scenarios"
            )
        explicit: dict[str, int] = {}
        for i, workload in enumerate(value):
            if workload.derived_name:
                continue
            if workload.name in explicit:
                raise ValueError(
                    f"workloads[{explicit[workload.name]}] and workloads[{i}] are both named "
                    f"{toml_repr(workload.name)}; give each workload its own name"
                )
            explicit[workload.name] = i
        # Derived names that collide get -2, -3, … in file order.
        taken = set(explicit)
        for workload in value:
            if not workload.derived_name:
                continue
            base, n = workload.name, 1
            while workload.name in taken:
                n += 1
                workload.name = f"{base}-{n}"
            taken.add(workload.name)
        return value

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (sizes in bytes, rates in bits/s, durations in s) that
        `from_json_dict` reads back; the runner embeds it in run.json."""
        return self.model_dump(mode="json")

    @classmethod
    def from_json_dict(cls, data: dict[str, Any], *, check_files: bool = False) -> Scenario:
        """Rebuild a scenario embedded in a run directory (rule files may be gone)."""
        return cls.model_validate(data, context={"check_files": check_files})
