"""A rule-set review's flows placed on the testbed (owner: the ruleset mechanism).

A flow names the rule set's interfaces (`iifname "lan0"`); the `ruleset` mechanism's
`interfaces` key says which testbed host lies behind each (`{ lan0 = "client", wan0 =
"server" }`), and the DUT's end of the link to that host carries the name. Placing a
flow picks the hosts and the testbed addresses it runs between:

- the client is the host behind the flow's ingress interface; the server the host
  behind its egress interface, or the DUT itself for a flow to the DUT (input chain);
  a flow whose rule names no interface on a side takes the first host of the map that
  is not on the other side (with no map, as for a host firewall whose rules name no
  interface, the testbed's client, or its server for the egress side);
- it is sent from the mapped source to the mapped destination, and answered on the
  mapped `served_by`/`served_port` after a DNAT (the DUT rewrites the destination on
  the way), else on the mapped destination and port.

`host_addresses` is what each host must own for that: every source on its client,
every listen address on its server (the DUT's own mapped addresses among them). The
testbed adds them as extra host addresses (secperf.testbed.topology.Topology).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from secperf.errors import MechanismError, ScenarioError
from secperf.rulesets.model import Flow, PlacedFlow, RuleSet
from secperf.rulesets.traffic import read_conntrack, read_csv, read_pcap
from secperf.testbed.topology import IFNAME_RE, Topology


class AddressMapping(Protocol):
    """What placing needs of the address map (secperf.rulesets.addrmap.AddressMap)."""

    def address(self, a: str) -> str: ...

    def flow(self, f: Flow) -> Flow: ...


def flow_key(f: Flow) -> tuple[Any, ...]:
    """What makes two coverage flows the same traffic (for deduplication)."""
    return (f.protocol, f.src, f.dst, f.dport, f.ingress, f.egress, f.to_dut)


def dedupe(flows: Iterable[Flow]) -> list[Flow]:
    """The flows in order, each (protocol, src, dst, dport, ingress, egress, to_dut) once."""
    seen: dict[tuple[Any, ...], Flow] = {}
    for f in flows:
        seen.setdefault(flow_key(f), f)
    return list(seen.values())


def read_traffic(path: Path) -> list[Flow]:
    """The user's own traffic file, by its suffix: a CSV of flows, a pcap (.pcap,
    .pcapng, .cap), else a conntrack dump (`conntrack -L -o extended`)."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return read_csv(path)
    if suffix in (".pcap", ".pcapng", ".cap"):
        return read_pcap(path)
    return read_conntrack(path)


def interface_ends(
    topology: Topology, host: str, interfaces: Mapping[str, str], where: str
) -> dict[tuple[str, str], str]:
    """The interface map of a rule set on `host` as the topology's named ends:
    (host, peer) -> name. A name the kernel cannot give, a peer the graph lacks or
    that has no link to `host`, two names for one link: ScenarioError at `where`."""
    out: dict[tuple[str, str], str] = {}
    for name, peer in interfaces.items():
        key = f"{where}.interfaces.{name}"
        if not IFNAME_RE.match(name) or name == "lo":
            raise ScenarioError(
                f"{name!r} cannot name an interface",
                where=key,
                fix="use the rule set's own name: 1-15 letters, digits and ._+- (not lo)",
            )
        if peer not in topology.names:
            raise ScenarioError(
                f"interface {name} lies towards host {peer!r}, which the testbed does not have",
                where=key,
                fix=f"name one of: {', '.join(n for n in topology.names if n != host)}",
            )
        if peer == host or topology.link_between(host, peer) is None:
            linked = [lk.peer(host) for lk in topology.links_of(host)]
            raise ScenarioError(
                f"interface {name} lies towards {peer}, which has no link to {host} "
                "(the rule set's host)",
                where=key,
                fix=f"name a host linked to {host}: {', '.join(linked) or 'none'}",
            )
        if topology.host(peer).is_switch:
            raise ScenarioError(
                f"interface {name} lies towards {peer}, a switch: flows need the host "
                "that sends or answers them behind each interface",
                where=key,
                fix="link that host to the DUT directly (a zone behind a switch is not "
                "supported by a rule set's interfaces yet)",
            )
        if (host, peer) in out:
            raise ScenarioError(
                f"interfaces {out[(host, peer)]} and {name} both name {host}'s link to {peer}",
                where=key,
                fix="give each link one name",
            )
        out[(host, peer)] = name
    return out


def merge_ends(
    into: dict[tuple[str, str], str], ends: Mapping[tuple[str, str], str], where: str
) -> None:
    """Add one rule set's named ends to the scenario's: one link, one name."""
    for end, name in ends.items():
        if into.get(end, name) != name:
            raise ScenarioError(
                f"{end[0]}'s link to {end[1]} is {into[end]!r} in one rule set's interfaces "
                f"and {name!r} in another's",
                where=f"{where}.interfaces.{name}",
                fix="name each link the same in every variant",
            )
        into[end] = name


def _host_behind(
    side: str | None,
    interfaces: Mapping[str, str],
    other: str | None,
    f: Flow,
    what: str,
    hosts: Sequence[str] = (),
) -> str:
    if side is not None:
        if side not in interfaces:
            raise ScenarioError(
                f"flow {f.name} ({f.describe()}) {what} by interface {side!r}, which the "
                "rule set's interfaces map does not name",
                where=f.rule.where() if f.rule is not None else f.origin,
                fix=f'add {side} = "HOST" to the ruleset mechanism\'s interfaces',
            )
        return interfaces[side]
    for host in dict.fromkeys([*interfaces.values(), *hosts]):
        if host != other:
            return host
    raise ScenarioError(
        f"flow {f.name} ({f.describe()}) names no interface, and the interfaces map has no "
        "second host to put it on",
        where=f.rule.where() if f.rule is not None else f.origin,
        fix="map an interface of the rule set to each side's host",
    )


def place(
    flows: Sequence[Flow],
    amap: AddressMapping,
    interfaces: Mapping[str, str],
    topology: Topology,
    dut: str,
) -> list[PlacedFlow]:
    """Each flow on its hosts and mapped addresses (the module's docstring).
    `interfaces` maps the rule set's interface names to the hosts behind them;
    `amap` is the scenario's AddressMap (secperf.rulesets.addrmap)."""
    out: list[PlacedFlow] = []
    # a side no interface names: the hosts of the map, else the testbed's default
    # client and server (a host firewall's rules name no interface)
    ends = [h for h in ("client", "server") if h in topology.names and h != dut]
    for f in flows:
        if f.egress is not None and f.ingress is None:
            server = _host_behind(f.egress, interfaces, None, f, "leaves", ends[::-1])
            client = _host_behind(None, interfaces, server, f, "enters", ends)
        else:
            client = _host_behind(f.ingress, interfaces, None, f, "enters", ends)
            # a flow DNAT'd from the DUT's own address is answered where the DNAT sends it
            server = (
                dut
                if f.to_dut and f.served_by is None
                else _host_behind(f.egress, interfaces, client, f, "leaves", ends[::-1])
            )
        for host in (client, server):
            if host not in topology.names:
                raise MechanismError(f"flow {f.name}: host {host!r} is not in the testbed")
        mapped = amap.flow(f)
        if f.served_by is not None:
            listen = str(amap.address(f.served_by))
            port = f.served_port if f.served_port is not None else f.dport
        else:
            listen, port = mapped.dst, f.dport
        out.append(
            PlacedFlow(
                flow=f,
                client=client,
                server=server,
                src=mapped.src,
                dst=mapped.dst,
                listen=listen,
                listen_port=port,
            )
        )
    return out


def host_addresses(
    placed: Sequence[PlacedFlow], amap: AddressMapping | None = None
) -> dict[str, list[str]]:
    """The testbed addresses each host must own for `placed`: every source on its
    client, every listen address on its server (the DUT's own for flows to it). An
    address two hosts would need is refused (the map put two sides on one address)."""
    owner: dict[str, tuple[str, PlacedFlow]] = {}
    for p in placed:
        for host, addr in ((p.client, p.src), (p.server, p.listen)):
            held = owner.setdefault(addr, (host, p))
            if held[0] != host:
                raise MechanismError(
                    f"address {addr} would be on {held[0]} (flow {held[1].flow.name}, "
                    f"{held[1].flow.describe()}) and on {host} (flow {p.flow.name}, "
                    f"{p.flow.describe()})",
                    where=p.flow.rule.where() if p.flow.rule is not None else p.flow.origin,
                    fix="the two flows need one address on two sides of the DUT: give the "
                    "interfaces map the hosts the rule set expects there",
                )
    out: dict[str, list[str]] = {}
    for addr, (host, _p) in owner.items():
        out.setdefault(host, []).append(addr)
    return {h: sorted(a, key=_addr_key) for h, a in out.items()}


def snat_sources(rs: RuleSet) -> list[str]:
    """The single addresses the rule set's SNAT rules rewrite sources to (`snat to
    193.43.91.203`, `-j SNAT --to-source 193.43.91.203:1024-65535`): the router's own.
    A range is left out (conntrack may pick any of its members)."""
    out: list[str] = []
    for rule in rs.rules():
        if rule.verdict != "snat" or not rule.target:
            continue
        addr = rule.target
        if addr.startswith("["):
            addr = addr[1:].partition("]")[0]
        elif addr.count(":") == 1:
            addr = addr.partition(":")[0]
        if "-" in addr or "/" in addr or not addr:
            continue
        out.append(addr)
    return list(dict.fromkeys(out))


def own_nat_sources(addresses: dict[str, list[str]], host: str, mapped: Sequence[str]) -> None:
    """Give `host` (the one the rule set runs on) the mapped SNAT sources; an address
    another host already owns is refused (the map put two sides on one address)."""
    for addr in mapped:
        held = [h for h, addrs in addresses.items() if addr in addrs]
        if held and held != [host]:
            raise MechanismError(
                f"address {addr}, a source NAT rewrites to, would be on {held[0]} and on {host}",
                fix="a source NAT's address is the router's own: no flow should come from "
                "or go to it on another host",
            )
        if not held:
            addresses.setdefault(host, []).append(addr)
            addresses[host].sort(key=_addr_key)


def _addr_key(addr: str) -> tuple[int, str]:
    return (6 if ":" in addr else 4, addr)
