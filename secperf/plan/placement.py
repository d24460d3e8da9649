"""Where things run in the graph: a workload's client and server hosts, a mechanism's hosts.

A workload's `clients` / `servers` name a host or a zone (its first client /
server host); empty means the host named "client" / "server", else the graph's
first host of that role. A mechanism's `on` names a host, a list of hosts,
"ends" (the default client and server hosts) or "gateways" (every gateway).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from secperf.errors import ScenarioError
from secperf.scenario.sweep import WorkloadPoint
from secperf.testbed.topology import Topology


class PlacementRule(Protocol):
    """Where a mechanism kind may run, as its declaration says (MechanismKind)."""

    @property
    def name(self) -> str: ...

    @property
    def forwarding_only(self) -> bool:
        """It rewrites or proxies forwarded traffic: only a forwarding host can carry it."""
        ...

    @property
    def sensor_role(self) -> str | None:
        """Hosts of this role among its hosts are its sensors, not where it filters."""
        ...


def default_endpoint(topology: Topology, role: str) -> str:
    """The host named `role`, else the graph's first host with that role."""
    if role in topology.roles:
        return role
    found = topology.hosts_with(role=role)
    if not found:
        raise ScenarioError(
            f"the testbed has no {role} host",
            where="[topology] hosts",
            fix=f'add a host with role = "{role}" (or a zone with {role}s = 1)',
        )
    return found[0]


def _endpoint(topology: Topology, names: Sequence[str], role: str, where: str) -> str:
    if not names:
        return default_endpoint(topology, role)
    name = names[0]
    if name in topology.roles:
        if topology.host(name).role in ("switch", "dut", "gateway"):
            raise ScenarioError(
                f"{where} names {name!r}, a {topology.host(name).role}, which runs no workload",
                where=where,
                fix="name a client or server host, or a zone",
            )
        return name
    if name in topology.zones:
        found = topology.hosts_with(role=role, zone=name)
        if found:
            return found[0]
        raise ScenarioError(
            f"{where} names zone {name!r}, which has no {role} host",
            where=where,
            fix=f"give zone {name} a {role} host, or name a host",
        )
    raise ScenarioError(
        f"{where} names {name!r}, which is neither a host nor a zone of the testbed",
        where=where,
        fix=f"use one of: {', '.join((*topology.roles, *topology.zones))}",
    )


def endpoints(topology: Topology, point: WorkloadPoint) -> tuple[str, str]:
    """(client host, server host) of a workload point."""
    where = f"workloads[{point.workload_index}]"
    client = _endpoint(topology, point.clients, "client", f"{where}.clients")
    server = _endpoint(topology, point.servers, "server", f"{where}.servers")
    if client == server:
        raise ScenarioError(
            f"{where} runs from {client} to itself",
            where=where,
            fix="name different hosts in clients and servers",
        )
    return client, server


def generator_hosts(topology: Topology, point: WorkloadPoint) -> tuple[str, ...]:
    """The client hosts a point runs from: its client alone, or with `generators = N`
    the first N client hosts of its `clients` zone (no `clients`: of the testbed)."""
    where = f"workloads[{point.workload_index}].generators"
    client, _server = endpoints(topology, point)
    if point.generators <= 1:
        return (client,)
    name = point.clients[0] if point.clients else None
    if name is not None and name not in topology.zones:
        raise ScenarioError(
            f"{where} = {point.generators}, and clients names the host {name!r}: one host "
            "is one generator",
            where=where,
            fix="name a zone with that many client hosts in clients "
            "([topology.zones.NAME] clients = N)",
        )
    found = topology.hosts_with(role="client", zone=name)
    if len(found) < point.generators:
        raise ScenarioError(
            f"{where} = {point.generators}, but "
            + (f"zone {name!r}" if name else "the testbed")
            + f" has {len(found)} client host(s)",
            where=where,
            fix="lower generators, or give the zone more clients ([topology.zones.NAME] "
            "clients = N)",
        )
    return found[: point.generators]


def resolve_placement(
    topology: Topology, on: str | list[str], ends: tuple[str, str], *, where: str
) -> tuple[str, ...]:
    """The hosts a mechanism's `on` names."""
    names = [on] if isinstance(on, str) else list(on)
    out: list[str] = []
    for name in names:
        if name == "ends":
            out += ends
        elif name == "gateways":
            gws = topology.hosts_with(role="gateway")
            if not gws:
                raise ScenarioError(
                    'on = "gateways", but the testbed has no host with role "gateway"',
                    where=where,
                    fix="declare gateways in [topology], or name the hosts",
                )
            out += gws
        elif name in topology.roles and not topology.host(name).is_switch:
            out.append(name)
        else:
            hosts = [h for h in topology.roles if not topology.host(h).is_switch]
            raise ScenarioError(
                f"on = {name!r}: the testbed has no such host",
                where=where,
                fix=f'use one of: {", ".join(hosts)}, "ends" or "gateways"',
            )
    return tuple(dict.fromkeys(out))


def placement_hook(
    topology: Topology, kind: PlacementRule, hosts: Sequence[str], *, where: str
) -> str:
    """ "forward" when every host forwards, "input" when none does (a host firewall);
    a mix, or a forwarding-only mechanism on an end host, is an error. A mechanism's
    sensor (a host of its `sensor_role`, an IDS's) is its end, not a mix."""
    if kind.sensor_role is not None:
        sensors = {h for h in hosts if topology.host(h).role == kind.sensor_role}
        hosts = [h for h in hosts if h not in sensors] or list(hosts)
    forwarding = {topology.host(h).forwarding for h in hosts}
    if len(forwarding) > 1:
        raise ScenarioError(
            f"{where} mixes forwarding hosts and end hosts ({', '.join(hosts)})",
            where=where,
            fix="write one mechanism entry for the routers and one for the end hosts",
        )
    if forwarding == {True}:
        return "forward"
    if kind.forwarding_only:
        raise ScenarioError(
            f"mechanism {kind.name} needs a host that forwards, not {', '.join(hosts)}",
            where=where,
            fix='put it on the dut or a gateway (on = "dut")',
        )
    return "input"
