"""The plan's rule-set step: one address map and one traffic for the whole scenario.

A review compares rule sets (the current one and the proposed one: two variants) on the
same traffic, so every rule set of every variant and the traffic share one map, or the
flows would differ between them. This step runs only when some mechanism entry loads a
user's rule set (its kind's `rule_sets`) or some workload sends rule-set traffic (its
kind's `rule_set_traffic`); every other scenario plans exactly as before. It:

1. asks every mechanism entry of every variant for the rule files it loads, and loads
   each once (secperf.rulesets.load: a file its tool rejects is bad input, ScenarioError);
2. checks each entry's interfaces map against the graph and names the ends
   (`lan0` on the DUT's link to the client): Topology.ifnames;
3. gathers the traffic the workloads ask for: "coverage" (secperf.rulesets.flows.derive
   over each rule set, deduplicated by protocol, addresses, port, interfaces and
   to_dut) or the user's own flow file;
4. builds one AddressMap over every rule set's named prefixes and every flow's
   addresses, places each flow on its hosts (secperf.rulesets.traffic.place) and gives
   each host the mapped addresses it must own (Topology.extra_addresses); the host a
   rule set runs on owns the addresses its SNAT rules rewrite to (a router's own
   public address), so that the replies come back to it and servers know the source.

The plan keeps the result (`Plan.rule_sets`); executors get the placed flows as
`TrafficPlan.flows`, mechanisms the map as `MechanismContext.address_map`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from typing import Any

from secperf.errors import MechanismError, ScenarioError
from secperf.mechanisms.base import RuleSetUse
from secperf.mechanisms.registry import MECHANISMS
from secperf.rulesets import flows as derive_flows
from secperf.rulesets.addrmap import AddressMap
from secperf.rulesets.load import load
from secperf.rulesets.model import Flow, Named, PlacedFlow, RuleSet
from secperf.rulesets.placement import (
    flow_key,
    host_addresses,
    interface_ends,
    merge_ends,
    own_nat_sources,
    place,
    read_traffic,
    snat_sources,
)
from secperf.rulesets.prefixes import named_prefixes
from secperf.scenario.scenario import Scenario
from secperf.testbed.topology import Topology
from secperf.workloads.registry import WORKLOADS

COVERAGE = "coverage"


@dataclass(frozen=True)
class Use:
    """One mechanism entry's rule file, where it stands in the scenario."""

    key: str  # "variants.current.mechanisms[0]"
    use: RuleSetUse


@dataclass
class RuleSetPlan:
    """What the step resolved: the map, the placed flows, the named ends, the extra
    addresses, and each rule set as loaded."""

    address_map: AddressMap
    flows: tuple[PlacedFlow, ...] = ()
    ifnames: dict[tuple[str, str], str] = field(default_factory=dict)
    addresses: dict[str, list[str]] = field(default_factory=dict)
    rule_sets: dict[tuple[Path, str], RuleSet] = field(default_factory=dict)
    # The rules coverage traffic cannot exercise, and why ("router.nft:12: no flow: ...")
    unexercised: tuple[str, ...] = ()

    def topology(self, base: Topology) -> Topology:
        """`base` with the rule sets' interface names and the flows' addresses."""
        return dataclasses.replace(
            base,
            ifnames={**base.ifnames, **self.ifnames},
            extra_addresses={h: tuple(a) for h, a in self.addresses.items()},
        )

    def describe(self) -> dict[str, Any]:
        """For run.json (`rule_set_map`): the map as kept and printed, and each flow."""
        return {
            "map": self.address_map.to_json(),
            "lines": self.address_map.describe(),
            "interfaces": [{"host": h, "peer": p, "name": n} for (h, p), n in self.ifnames.items()],
            "flows": [
                {
                    **p.flow.as_dict(),
                    "client": p.client,
                    "server": p.server,
                    "testbed_src": p.src,
                    "testbed_dst": p.dst,
                    "listen": p.listen,
                    "listen_port": p.listen_port,
                }
                for p in self.flows
            ],
            "unexercised": list(self.unexercised),
        }


def rule_set_uses(scenario: Scenario) -> list[Use]:
    """Every rule file a mechanism entry of any variant loads (its kind's rule_sets)."""
    out: list[Use] = []
    for name, variant in scenario.variants.items():
        for i, mech in enumerate(variant.mechanisms):
            kind = MECHANISMS.of(mech)
            if kind.rule_sets is not None:
                key = f"variants.{name}.mechanisms[{i}]"
                out += [Use(key, u) for u in kind.rule_sets(mech)]
    return out


def traffic_asked(scenario: Scenario) -> list[tuple[str, str | Path]]:
    """(workload key, "coverage" or a flow file) for every workload that sends
    rule-set traffic (its kind's rule_set_traffic)."""
    out: list[tuple[str, str | Path]] = []
    for i, workload in enumerate(scenario.workloads):
        ask = WORKLOADS.of(workload).rule_set_traffic
        source = ask(workload) if ask is not None else None
        if source is not None:
            out.append((f"workloads[{i}]", source))
    return out


def load_rule_set(use: Use) -> RuleSet:
    """The file as its tool loads it; a file it rejects is bad input."""
    try:
        return load(use.use.path, use.use.format)
    except MechanismError as exc:
        raise bad_input(exc, use) from None


def coverage(
    rs: RuleSet, use: Use, notes: list[str] | None = None, before: Sequence[Flow] = ()
) -> list[Flow]:
    """The rule set's coverage flows (why a rule got none goes to `notes`), each address
    on the side `before` (the flows of the rule sets derived before it) has it on; a rule
    set they cannot be derived from (a loop of jumps, a jump to a chain it lacks) is bad
    input too."""
    try:
        return derive_flows.derive(rs, list(use.use.interfaces), notes, derive_flows.sides(before))
    except MechanismError as exc:
        raise bad_input(exc, use) from None


def dnat_of(f: Flow, uses: list[Use], loaded: dict[tuple[Path, str], RuleSet]) -> Flow:
    """A flow of the user's file answered where the first rule set (in variant order)
    that DNATs it sends it (secperf.rulesets.flows.dnat_served), as coverage flows are."""
    for u in uses:
        try:
            served = derive_flows.dnat_served(
                loaded[(u.use.path, u.use.format)], list(u.use.interfaces), f
            )
        except MechanismError as exc:
            raise bad_input(exc, u) from None
        if served is not f:
            return served
    return f


def bad_input(exc: MechanismError, use: Use) -> ScenarioError:
    return ScenarioError(
        exc.message,
        where=exc.where or str(use.use.path),
        fix=exc.fix or "correct the line the tool names, then run `secperf check` again",
    )


def flow_names(f: Flow) -> list[Named]:
    """The addresses a flow names, for the map (each as its host prefix)."""
    where = f"flow {f.name} ({f.origin})"
    out = []
    for addr, what in ((f.src, "flow"), (f.dst, "flow"), (f.served_by, "nat target")):
        if addr is not None:
            plen = 32 if ip_address(addr).version == 4 else 128
            out.append(Named(f"{addr}/{plen}", where, what))
    return out


def traffic_file(scenario: Scenario, source: str | Path, key: str) -> Path:
    """A workload's flow file, relative to the scenario file as rule files are."""
    path = Path(source)
    if not path.is_absolute() and scenario.source is not None:
        path = scenario.source.parent / path
    if not path.is_file():
        raise ScenarioError(
            f"traffic file {str(source)!r} not found (looked for {path})",
            where=f"{key}.traffic",
            fix='give "coverage" or the path of a CSV, conntrack dump or pcap file',
        )
    return path


def unique_flows(
    wanted: list[tuple[Flow, dict[str, str], str]],
) -> list[tuple[Flow, dict[str, str], str]]:
    """Each flow once (by flow_key, the first kept, with the rules of the others it
    also serves in `also_for`), each name once: two rule sets' own "f1" become "f1" and
    "f1.2"."""
    seen: dict[tuple[Any, ...], tuple[Flow, dict[str, str], str]] = {}
    for entry in wanted:
        key = flow_key(entry[0])
        first = seen.setdefault(key, entry)
        rule = entry[0].rule
        if first is not entry and rule is not None and rule != first[0].rule:
            # the same flow serves another rule set's rule too: keep that rule
            merged = dataclasses.replace(first[0], also_for=(*first[0].also_for, rule))
            seen[key] = (merged, first[1], first[2])
    names: dict[str, int] = {}
    out = []
    for f, i, h in seen.values():
        n = names[f.name] = names.get(f.name, 0) + 1
        out.append((f if n == 1 else dataclasses.replace(f, name=f"{f.name}.{n}"), i, h))
    return out


def plan_rule_sets(scenario: Scenario, topology: Topology) -> RuleSetPlan | None:
    """The step (the module's docstring); None when nothing in the scenario asks."""
    uses = rule_set_uses(scenario)
    asked = traffic_asked(scenario)
    if not uses and not asked:
        return None
    if not uses:
        key = asked[0][0]
        raise ScenarioError(
            "this workload sends a rule set's traffic, and no variant loads a rule set",
            where=key,
            fix='add a variant with mechanisms = [{ kind = "ruleset", file = "...", '
            "interfaces = { ... } }]",
        )
    ends: dict[tuple[str, str], str] = {}
    behind: dict[str, str] = {}  # interface name -> host, over every rule set
    loaded: dict[tuple[Path, str], RuleSet] = {}
    for u in uses:
        merge_ends(ends, interface_ends(topology, u.use.host, u.use.interfaces, u.key), u.key)
        for name, host in u.use.interfaces.items():
            if behind.setdefault(name, host) != host:
                raise ScenarioError(
                    f"interface {name} lies towards {behind[name]} in one rule set's "
                    f"interfaces and towards {host} in another's",
                    where=f"{u.key}.interfaces.{name}",
                    fix="map each interface name to one host in every variant",
                )
        ident = (u.use.path, u.use.format)
        if ident not in loaded:
            loaded[ident] = load_rule_set(u)
    # The flows and, for each, the interfaces map and host it is placed with.
    wanted: list[tuple[Flow, dict[str, str], str]] = []
    notes: list[str] = []
    for key, source in asked:
        if source == COVERAGE:
            for u in uses:
                before = [f for f, _i, _h in wanted]
                derived = coverage(loaded[(u.use.path, u.use.format)], u, notes, before)
                wanted += [(f, u.use.interfaces, u.use.host) for f in derived]
        else:
            own = [
                dnat_of(f, uses, loaded) for f in read_traffic(traffic_file(scenario, source, key))
            ]
            wanted += [(f, behind, uses[0].use.host) for f in own]
    flows = unique_flows(wanted)
    named = [n for rs in loaded.values() for n in named_prefixes(rs)]
    named += [n for f, _i, _h in flows for n in flow_names(f)]
    amap = AddressMap.build(named)
    placed = [p for f, i, h in flows for p in place([f], amap, i, topology, h)]
    addresses = host_addresses(placed, amap)
    for u in uses:
        rs = loaded[(u.use.path, u.use.format)]
        own_nat_sources(addresses, u.use.host, [amap.address(a) for a in snat_sources(rs)])
    return RuleSetPlan(
        address_map=amap,
        flows=tuple(placed),
        ifnames=ends,
        addresses=addresses,
        rule_sets=loaded,
        unexercised=tuple(dict.fromkeys(notes)),
    )
