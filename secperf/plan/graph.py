"""A scenario's testbed graph: the standard plan, or its [topology] made concrete.

`[topology] zones` is shorthand: each zone becomes its hosts (`<zone>-c1..`,
`<zone>-s1..`), a switch (`<zone>-sw`) when it has more than one host, and the
links that join them to the zone's router (created as a `dut` when no host of
that name is declared). Explicit `hosts` and `links` come first, in file order.
"""

from __future__ import annotations

from secperf.errors import ScenarioError, TestbedError
from secperf.scenario.scenario import Scenario
from secperf.testbed.topology import GraphHost, GraphLink, Topology, zone_graph


def build_topology(scenario: Scenario, *, attacker: bool = False, ids: bool = False) -> Topology:
    """The graph `scenario` runs on; `attacker` when a workload needs one, `ids` when
    a mechanism mirrors to a sensor."""
    tb = scenario.testbed
    section = scenario.topology
    if section is None:
        return Topology.standard(
            link_rate_bps=tb.rate_bps,
            direct=tb.baseline == "direct",
            attacker=attacker,
            ids=ids,
            emulated_hosts=tb.emulated_hosts,
            offloads=tb.offloads,
        )
    if tb.baseline == "direct":
        raise ScenarioError(
            'baseline = "direct" needs the standard testbed, not a [topology]',
            where="[testbed] baseline",
            fix='use baseline = "forward", or drop [topology]',
        )
    if tb.emulated_hosts:
        raise ScenarioError(
            "emulated_hosts works on the standard testbed only",
            where="[testbed] emulated_hosts",
            fix="declare the hosts in [topology] instead, or drop [topology]",
        )
    hosts = [GraphHost(h.name, h.role, h.zone) for h in section.hosts]
    links = [
        GraphLink(lk.between[0], lk.between[1], lk.rate, lk.queue, lk.offloads)
        for lk in section.links
    ]
    declared = {h.name for h in hosts}
    for zone, z in section.zones.items():
        if z.router not in declared:
            hosts.insert(0, GraphHost(z.router, "dut"))
            declared.add(z.router)
        zone_hosts, zone_links = zone_graph(zone, z.clients, z.servers, z.router, z.rate)
        hosts += zone_hosts
        links += zone_links
    if attacker and "attacker" not in {h.name for h in hosts}:
        raise ScenarioError(
            "a workload needs an attacker host, which [topology] does not declare",
            where="[topology] hosts",
            fix='add { name = "attacker", role = "attacker" } and a link to the router it attacks',
        )
    if ids and "ids" not in {h.role for h in hosts}:
        raise ScenarioError(
            "an ids mechanism needs a host with role ids, which [topology] does not declare",
            where="[topology] hosts",
            fix='add { name = "ids", role = "ids" } and a link to the router that mirrors',
        )
    try:
        return Topology.graph(hosts, links, link_rate_bps=tb.rate_bps, offloads=tb.offloads)
    except TestbedError as exc:
        raise ScenarioError(
            f"[topology] does not make a testbed: {exc.message}",
            where=exc.where or "[topology]",
            fix=exc.fix or "see docs/scenario-format.md, [topology]",
        ) from None
