"""A user's own rule set (nftables file or iptables-save output), reviewed as written.

Unlike `custom`, which loads the file as is onto the testbed's own addresses and
interface names, `ruleset` shapes the testbed for the file (docs/ruleset-review.md):

- `interfaces = { lan0 = "client", wan0 = "server" }`: the DUT's end of its link to
  each host carries the rule set's name inside the DUT's namespace, so `iifname` and
  `oifname` match as written (the plan names the ends: Topology.ifnames);
- the rule set's networks and hosts are mapped into the testbed's ranges by the
  scenario's one address map (secperf.rulesets.addrmap, built by the plan over every
  rule set of every variant and the traffic: secperf.plan.review), and the mapped
  rule set is what the DUT loads (`nft -j -f`, or iptables-restore);
- the map is kept beside the rendered file (`<name>.addrmap.json`) and in run.json
  (`rule_set_map`), so a report can print it.

The file is loaded by its own tool before any testbed exists (`secperf check` as root:
secperf.rulesets.load, in a throwaway namespace), so nft's own file:line names a
typo; a rejected file is bad input (ScenarioError: `secperf check` exits 3).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from secperf.errors import MechanismError, ScenarioError
from secperf.mechanisms.base import (
    CheckContext,
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
    RuleSetUse,
    apply_files,
    backend_tools,
    run_tool,
)
from secperf.mechanisms.dut_counters import METRICS as COUNTER_METRICS
from secperf.mechanisms.dut_counters import Observer
from secperf.rulesets.addrmap import map_iptables, map_nft
from secperf.rulesets.flows import derive
from secperf.rulesets.load import load
from secperf.rulesets.model import FileFormat, RuleSet
from secperf.rulesets.placement import interface_ends
from secperf.testbed.hosts import Host
from secperf.tools import Tool

SUFFIX_FORMATS = {".nft": "nft", ".json": "nft-json"}
HOST_RE = re.compile(r"^[a-z][a-z0-9-]{0,19}$")


class RuleSetSpec(MechanismSpec):
    """A rule file as the user wrote it, on a testbed shaped for it."""

    kind: Literal["ruleset"] = "ruleset"
    file: Path = Field(strict=False)
    """The nftables file (includes resolved as nft does) or the iptables-save output; relative to
    the scenario file's directory, or absolute.
    """
    # nft, nft-json (libnftables JSON: `nft -j list ruleset`) or iptables (iptables-save
    # output); default from the suffix: .nft -> nft, .json -> nft-json.
    format: Literal["nft", "nft-json", "iptables"] | None = None
    """The file's syntax (`nft-json`: libnftables JSON, below)."""
    backend: Literal["iptables-legacy", "iptables-nft"] = "iptables-nft"
    """For `format = "iptables"`: which iptables loads it."""
    # The rule set's interface name -> the testbed host behind it.
    interfaces: dict[str, str] = Field(default_factory=dict)
    """The host behind each interface the file names: `{ lan0 = "client", wan0 = "server" }` names
    the DUT's end of its link to the client `lan0` (inside the DUT's namespace), so `iifname
    "lan0"` matches as written.
    """
    # After each test, a `mechanism` record of what the DUT counted (as `custom`'s).
    counters: bool = False
    """As `custom`'s: a `mechanism` record of the DUT's counters after each test."""

    @field_validator("file")
    @classmethod
    def _resolve(cls, value: Path, info: ValidationInfo) -> Path:
        # Relative to the scenario file (the loader passes its directory), as `custom`.
        context = info.context if isinstance(info.context, dict) else {}
        base = context.get("base_dir")
        resolved = value if value.is_absolute() else Path(base or Path.cwd()) / value
        if context.get("check_files", True) and not resolved.is_file():
            raise ValueError(f"rule file {str(value)!r} not found (looked for {resolved})")
        return resolved

    @field_validator("interfaces")
    @classmethod
    def _hosts(cls, value: dict[str, str]) -> dict[str, str]:
        for name, host in value.items():
            if not HOST_RE.match(host):
                raise ValueError(
                    f"interfaces.{name} = {host!r} is not a host name: write a host of the "
                    'testbed (e.g. "client", "server")'
                )
        return value

    @field_validator("on")
    @classmethod
    def _one_host(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) or value in ("ends", "gateways"):
            raise ValueError(
                f"on = {value!r}: a rule set is loaded on one host (its interfaces are "
                'that host\'s): write one host name, e.g. on = "dut"'
            )
        return value

    @model_validator(mode="after")
    def _format(self) -> RuleSetSpec:
        if self.format is None:
            fmt = SUFFIX_FORMATS.get(self.file.suffix.lower())
            if fmt is None:
                raise ValueError(
                    f"format is required for {self.file.name} (only a .nft or .json file "
                    'says its own): write format = "nft", "nft-json" (`nft -j list ruleset`) or '
                    '"iptables" (iptables-save output)'
                )
            self.format = fmt  # type: ignore[assignment]
        return self

    @property
    def fmt(self) -> FileFormat:
        assert self.format is not None  # set by _format
        return self.format

    @property
    def host(self) -> str:
        assert isinstance(self.on, str)  # _one_host
        return self.on

    @property
    def loader(self) -> str:
        return self.backend if self.fmt == "iptables" else "nft"


class RuleSetMechanism(Mechanism):
    spec: RuleSetSpec

    def __init__(self, spec: RuleSetSpec) -> None:
        super().__init__(spec)
        self._counts = Observer() if spec.counters else None
        self._loaded: RuleSet | None = None

    def backends(self) -> set[str]:
        return {self.spec.loader}

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        """The mapped rule set and the map itself, into files_dir."""
        amap = ctx.address_map
        if amap is None:
            raise MechanismError(
                f"{self.spec.file}: no address map to render the rule set with",
                fix="build the plan with Plan.of (it maps every rule set of the scenario)",
            )
        rs = self._loaded = load(self.spec.file, self.spec.fmt)
        ctx.files_dir.mkdir(parents=True, exist_ok=True)
        (ctx.files_dir / f"{ctx.name}.addrmap.json").write_text(
            json.dumps({**amap.to_json(), "lines": amap.describe()}, indent=1) + "\n"
        )
        if rs.format == "nft":
            doc = map_nft(rs.raw, amap, ruleset=rs)
            # The DUT is reset before every variant; a flush here would also remove what
            # a mechanism before this one in the variant loaded.
            doc["nftables"] = [o for o in doc["nftables"] if "flush" not in o]
            out = ctx.files_dir / f"{ctx.name}.nft.json"
            out.write_text(json.dumps(doc, indent=1) + "\n")
            return [RenderedFile(out, "nft-json")]
        out = ctx.files_dir / f"{ctx.name}.iptables"
        out.write_text(map_iptables(str(rs.raw), amap, source=str(self.spec.file)))
        return [RenderedFile(out, "iptables-restore")]

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        for f in ctx.rendered:
            if f.tool == "nft-json":
                run_tool(host, ["nft", "-j", "-f", str(f.path)], what="nft -j -f", source=f.path)
            else:
                apply_files(host, [f], self.spec.backend, ctx.plan.family)
        if self._counts is not None:
            self._counts.start(host)

    def observe(self) -> dict[str, Any] | None:
        observed = self._counts.observe() if self._counts is not None else None
        return None if observed is None else {"kind": self.kind, **observed}

    def rule_files(self) -> tuple[Path, ...]:
        """The file and every file it includes (as loaded), or the file alone before."""
        rs = self._loaded
        return tuple(rs.files) if rs is not None and rs.files else (self.spec.file,)

    def rule_source(self, family: str, table: str, chain: str, index: int) -> str | None:
        """The rule's file:line in the user's file (the loaded rule set knows it)."""
        rs = self._loaded
        found = rs.chain(family, table, chain) if rs is not None else None
        if found is None or not 0 <= index < len(found.rules):
            return None
        return found.rules[index].ref.where()


def rule_sets(spec: RuleSetSpec) -> list[RuleSetUse]:
    return [RuleSetUse(spec.file, spec.fmt, dict(spec.interfaces), spec.host)]


def check(spec: RuleSetSpec, ctx: CheckContext) -> None:
    """What needs no root: the interfaces map against the testbed's graph."""
    if ctx.topology is None:
        return
    if spec.host not in ctx.topology.names:
        raise ScenarioError(
            f"on = {spec.host!r} is not a host of the testbed",
            where=f"{ctx.key}.on",
            fix=f"name one of: {', '.join(ctx.topology.names)}",
        )
    interface_ends(ctx.topology, spec.host, spec.interfaces, ctx.key)


def kernel_check(spec: RuleSetSpec, ctx: CheckContext) -> None:
    """The file through its own tool (nft in a throwaway namespace): a file it rejects
    is bad input, with the tool's own file:line; so is an interface its rules match on
    that `interfaces` does not map (no flow could enter or leave by it)."""
    try:
        flows = derive(load(spec.file, spec.fmt), list(spec.interfaces))
    except MechanismError as exc:
        raise ScenarioError(
            exc.message,
            where=exc.where or str(spec.file),
            fix=exc.fix or "correct the line the tool names, then run `secperf check` again",
        ) from None
    named = set(spec.interfaces)
    for f in flows:
        for side in (f.ingress, f.egress):
            if side is not None and side != "lo" and side not in named:
                raise ScenarioError(
                    f"the rule set matches interface {side!r} "
                    f"({f.rule.where() if f.rule else f.describe()}), which interfaces "
                    "does not map to a host",
                    where=f"{ctx.key}.interfaces",
                    fix=f'add {side} = "HOST" (the testbed host behind it) to interfaces',
                )


def tools(spec: RuleSetSpec) -> list[Tool]:
    return backend_tools(spec.loader)


KIND = MechanismKind(
    name="ruleset",
    model=RuleSetSpec,
    runtime=RuleSetMechanism,
    tools=tools,
    known_tools=tuple(backend_tools("nft", "iptables-legacy", "iptables-nft")),
    filters=True,
    check=check,
    kernel_check=kernel_check,
    kernel_check_note="rule sets NOT loaded by their own tool (nft, iptables-restore)",
    metrics=COUNTER_METRICS,
    rule_sets=rule_sets,
)
