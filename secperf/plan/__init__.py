"""Scenario -> plan: everything a run builds and measures, resolved once, without root.

A plan is the scenario read against its testbed graph: the topology (with an attacker
or an ids host only where a kind asks for one), every workload point and its client
and server hosts (and its generators), the traffic each pair sends, the hosts the
inventory puts on other machines, a rule-set review's one address map and placed
flows (secperf.plan.review: only when a mechanism loads a user's rule set), and, once
rendered, every variant's mechanisms with their rule files written into the run
directory. A test can build and inspect a plan
without root; the runner (secperf.run.runner) only executes rounds over it.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secperf.engine import CONTROL_PORT
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismSpec,
    TrafficPlan,
    traffic_plan,
)
from secperf.mechanisms.registry import MECHANISMS
from secperf.plan.graph import build_topology
from secperf.plan.inventory import ssh_specs
from secperf.plan.placement import (
    default_endpoint,
    endpoints,
    generator_hosts,
    placement_hook,
    resolve_placement,
)
from secperf.plan.review import RuleSetPlan, plan_rule_sets
from secperf.rulesets.addrmap import AddressMap
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import WorkloadPoint, expand_scenario
from secperf.testbed.hosts.registry import BACKENDS
from secperf.testbed.hosts.ssh_transport import SshSpec
from secperf.testbed.hosts.vmconfig import VmSettings
from secperf.testbed.topology import DUT, LinkSpec, Topology
from secperf.workloads.registry import WORKLOADS

BASELINE = "baseline"


@dataclass
class Variant:
    """One configuration of the DUT, rendered and ready to apply."""

    name: str
    mechanisms: list[tuple[Mechanism, MechanismContext]] = field(default_factory=list)
    direct: bool = False  # the baseline of a `direct` scenario bypasses the DUT
    backend: str = BACKENDS.default.name  # what the DUT host is in this variant

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


def expanded_variants(
    scenario: Scenario,
) -> list[tuple[str, list[MechanismSpec], dict[str, object]]]:
    """Every variant, a swept one (rules = [1, 10, ...]) as one variant per value."""
    return [x for name, spec in scenario.variants.items() for x in spec.expand(name)]


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
    traffic: TrafficPlan,
    files_dir: Path,
    table: str,
    topology: Topology,
    ends: tuple[str, str] | None = None,
    suffix: str = "",
    address_map: AddressMap | None = None,
) -> list[Variant]:
    """Render every variant's mechanisms into the run directory (no side effects elsewhere),
    each for the hosts its `on` names and for the traffic between `ends` (client and
    server hosts; `traffic` is theirs). `suffix` keeps the files of several pairs apart."""
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
                plan=traffic,
                files_dir=files_dir,
                name=f"{stem}.{i}{suffix}",
                table=table,
                hosts=hosts,
                hook=placement_hook(topology, kind, hosts, where=where),
                topology=topology,
                ends=ends,
                address_map=address_map,
            )
            ctx.rendered = mech.render(ctx)
            v.mechanisms.append((mech, ctx))
        variants.append(v)
    return variants


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


def hostport(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


@dataclass
class Plan:
    """What a run of `scenario` builds and measures (see the module's docstring)."""

    scenario: Scenario
    family: int
    points: list[WorkloadPoint]
    topology: Topology
    # point id -> its (client, server) hosts, checked against the graph
    endpoints: dict[str, tuple[str, str]]
    # point id -> the client hosts that drive it at once (several generators)
    generators: dict[str, tuple[str, ...]]
    # the traffic between the default client and server (what executors' rules permit)
    traffic: TrafficPlan
    # hosts the inventory puts on other machines (SSH)
    remotes: dict[str, SshSpec]
    # (client, server) pair -> its variants, rendered (empty until `render`)
    variant_sets: dict[tuple[str, str], list[Variant]] = field(default_factory=dict)
    # A rule-set review's one address map and placed traffic (secperf.plan.review);
    # None unless a mechanism loads a user's rule set or a workload sends its traffic.
    rule_sets: RuleSetPlan | None = None

    @classmethod
    def of(cls, scenario: Scenario) -> Plan:
        """Resolve `scenario` against its graph; nothing rendered, nothing started."""
        family = 6 if scenario.testbed.family == "ipv6" else 4
        points = expand_scenario(scenario)
        topology = topology_for(scenario, points)
        rule_sets = plan_rule_sets(scenario, topology)
        if rule_sets is not None:
            topology = rule_sets.topology(topology)
        client, server = (default_endpoint(topology, r) for r in ("client", "server"))
        traffic = traffic_plan(topology, family, client, server)
        return cls(
            scenario=scenario,
            family=family,
            points=points,
            topology=topology,
            endpoints={p.point_id: endpoints(topology, p) for p in points},
            generators={p.point_id: tuple(generator_hosts(topology, p)) for p in points},
            traffic=dataclasses.replace(traffic, flows=rule_sets.flows) if rule_sets else traffic,
            remotes=ssh_specs(scenario, topology),
            rule_sets=rule_sets,
        )

    @property
    def address_map(self) -> AddressMap | None:
        """The scenario's one address map (secperf.rulesets.addrmap), or None."""
        return self.rule_sets.address_map if self.rule_sets is not None else None

    def traffic_for(self, client: str, server: str, generators: list[str]) -> TrafficPlan:
        """The traffic between one (client, server) pair, with the review's flows."""
        tp = traffic_plan(self.topology, self.family, client, server, generators=generators)
        return dataclasses.replace(tp, flows=self.traffic.flows)

    def rule_set_map(self) -> dict[str, Any] | None:
        """For run.json: the map as kept and printed, the named interfaces, the flows."""
        return self.rule_sets.describe() if self.rule_sets is not None else None

    # -- rendering -----------------------------------------------------------------------
    def render(self, files_dir: Path, prefix: str) -> None:
        """Render every variant once per (client, server) pair the workloads use, so the
        rules permit, translate or tunnel exactly the traffic each workload runs; the files
        go to `files_dir`, the nft tables carry the run's `prefix`."""
        pairs = sorted(set(self.endpoints.values()))
        # Every generator host of a pair's points sends what the rules must let by.
        senders: dict[tuple[str, str], list[str]] = {}
        for pid, pair in self.endpoints.items():
            senders.setdefault(pair, [])
            senders[pair] += [g for g in self.generators[pid] if g not in senders[pair]]
        self.variant_sets = {
            pair: prepare_variants(
                self.scenario,
                self.traffic_for(*pair, generators=senders[pair]),
                files_dir,
                f"secperf_{prefix}",
                self.topology,
                ends=pair,
                suffix=f".{pair[0]}-{pair[1]}" if len(pairs) > 1 else "",
                address_map=self.address_map,
            )
            for pair in pairs
        }

    @property
    def variants(self) -> list[Variant]:
        """Every rendered variant of every pair."""
        return [v for vs in self.variant_sets.values() for v in vs]

    def variant_names(self) -> list[str]:
        """The baseline and every (expanded) variant, in file order."""
        return [BASELINE, *(name for name, _m, _s in expanded_variants(self.scenario))]

    def variants_at(self, point: WorkloadPoint) -> list[Variant]:
        """The rendered variants measured at `point`: the baseline and those it names."""
        pair = self.endpoints[point.point_id]
        return [v for v in self.variant_sets[pair] if v.name == BASELINE or point.measures(v.name)]

    # -- what the testbed needs --------------------------------------------------------------
    def vm_hosts(self) -> tuple[str, ...]:
        """Hosts that some variant runs as a VM (only the DUT can be one)."""
        virtual = (BACKENDS.get(v.backend).virtual for v in self.scenario.variants.values())
        return (DUT,) if any(virtual) else ()

    def external_interfaces(self) -> dict[str, dict[str, str]]:
        """External hosts (secperf runs nothing on them) and their interfaces."""
        return {
            name: inv.interfaces
            for name, inv in self.scenario.testbed.hosts.items()
            if BACKENDS.get(inv.backend).runs_nothing
        }

    def mechanism_hosts(self) -> list[str]:
        """Every host that carries a mechanism in some variant (and the DUT): the hosts
        whose connection tracking is flushed before every test."""
        return sorted(
            {h for v in self.variants for _, c in v.mechanisms for h in c.hosts}
            | ({DUT} if DUT in self.topology.roles else set())
        )

    def target(self, variant: Variant, server: str) -> str:
        """The server's control address for this variant: through the testbed, or the
        address a mechanism gives it (a host-to-host tunnel's inner address)."""
        for mech, ctx in variant.mechanisms:
            addr = mech.target_address(ctx, server, self.family)
            if addr is not None:
                return hostport(addr, CONTROL_PORT)
        via = "direct" if variant.direct else "dut"
        return hostport(self.topology.server_address(self.family, via, server), CONTROL_PORT)

    def path_links(self, point: WorkloadPoint) -> list[LinkSpec]:
        """The links between the point's client and server."""
        return path_links(self.topology, *self.endpoints[point.point_id])

    # -- what run.json records -----------------------------------------------------------------
    def variant_sweeps(self) -> dict[str, dict[str, object]]:
        """Variants expanded from a list (rules = [1, 10, ...]): family and value, so
        reports can draw a line per family against the swept value."""
        return {
            name: {"family": name.split("[", 1)[0], **swept}
            for name, _mechs, swept in expanded_variants(self.scenario)
            if swept
        }

    def placements(self) -> dict[str, list[dict[str, Any]]]:
        """Variant -> each mechanism's kind and the hosts it ran on (over every pair)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for v in self.variants:
            entries = out.setdefault(
                v.name, [{"kind": m.kind, "hosts": []} for m, _ in v.mechanisms]
            )
            for entry, (_m, ctx) in zip(entries, v.mechanisms, strict=True):
                entry["hosts"] += [h for h in ctx.hosts if h not in entry["hosts"]]
        return out

    def remote_hosts(self) -> dict[str, str]:
        """Hosts that are not namespaces here: ssh://DESTINATION, or their backend's name
        (a device secperf runs nothing on)."""
        hosts = self.scenario.testbed.hosts
        return {name: f"ssh://{spec.destination}" for name, spec in self.remotes.items()} | {
            n: hosts[n].backend for n in self.external_interfaces()
        }

    def multi_generators(self) -> dict[str, list[str]]:
        """Points driven from several client hosts at once: point -> hosts."""
        return {pid: list(hosts) for pid, hosts in self.generators.items() if len(hosts) > 1}
