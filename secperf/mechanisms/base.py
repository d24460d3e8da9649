"""What every mechanism is: rendered to files, checked by its own tool, applied on the DUT.

A mechanism never guesses what state it left behind: the DUT namespace belongs to
the run, so `reset_dut` returns it to plain forwarding by flushing every packet
filter backend, which is exactly the baseline state, and `flush_flow_state` makes
its kernel forget every connection it tracks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from secperf.errors import MechanismError
from secperf.testbed.testbed import Host
from secperf.testbed.topology import Topology

# The engine server's control port and the data port range it allocates from:
# a firewall that matches ports must know them.
CONTROL_PORT = 5201
DATA_PORTS = (5300, 5399)


@dataclass(frozen=True)
class TrafficPlan:
    """The measured traffic, as a rule writer needs to know it."""

    family: int  # 4 or 6
    client_net: str  # e.g. 198.18.1.0/24
    server_net: str  # e.g. 198.18.2.0/24
    client_addr: str
    server_addr: str
    control_port: int = CONTROL_PORT
    data_ports: tuple[int, int] = DATA_PORTS
    # Every inside source: the client and its emulated hosts (static NAT maps each).
    client_hosts: tuple[str, ...] = ()
    # The attacker host (when the topology has one), as a host prefix: floods come from it.
    attacker_net: str | None = None

    def __post_init__(self) -> None:
        if not self.client_hosts:
            object.__setattr__(self, "client_hosts", (self.client_addr,))
        for net in (self.client_net, self.server_net):
            if ipaddress.ip_network(net).version != self.family:
                raise ValueError(f"{net} is not an IPv{self.family} network")


def traffic_plan(
    topology: Topology,
    family: int,
    client: str = "client",
    server: str = "server",
    generators: Sequence[str] = (),
) -> TrafficPlan:
    """The measured flow between `client` and `server` hosts across the testbed.

    The permits match the client and server hosts exactly, or their whole links
    when emulated hosts stand beside them, or when several generators (client hosts
    of one zone's LAN, `generators`) send.
    """
    client_if = topology.primary_interface(client, family)
    server_if = topology.primary_interface(server, family)
    client_addr, server_addr = str(client_if.ip), str(server_if.ip)
    emulated = topology.emulated_addresses(client, family)
    others = [g for g in generators if g != client]
    for name in others:
        addr = topology.primary_interface(name, family).ip
        if addr not in client_if.network:
            raise MechanismError(
                f"generator {name} ({addr}) is not on {client}'s LAN ({client_if.network})",
                fix="take the generators from one zone (clients = a zone)",
            )
    emulated = (
        *emulated,
        *(str(topology.primary_interface(g, family).ip) for g in others),
    )
    host_len = 32 if family == 4 else 128
    if emulated:
        client_net, server_net = str(client_if.network), str(server_if.network)
    else:
        client_net, server_net = f"{client_addr}/{host_len}", f"{server_addr}/{host_len}"
    attacker_net = None
    if "attacker" in topology.roles:
        attacker_net = f"{topology.primary_address('attacker', family)}/{host_len}"
    return TrafficPlan(
        family=family,
        client_net=client_net,
        server_net=server_net,
        client_addr=client_addr,
        server_addr=server_addr,
        client_hosts=(client_addr, *emulated),
        attacker_net=attacker_net,
    )


@dataclass(frozen=True)
class RenderedFile:
    """A file a mechanism wrote into the run directory, and the tool that loads it."""

    path: Path
    tool: str  # "nft", "iptables-restore", "ipset"


@dataclass
class MechanismContext:
    plan: TrafficPlan
    files_dir: Path
    name: str  # a unique stem for this variant's files, e.g. "acl-linear.0"
    table: str  # nft table name, carries the run prefix
    rendered: list[RenderedFile] = field(default_factory=list)
    # The testbed hosts it runs on (scenario key `on`, resolved against the graph),
    # and the netfilter hook its filters go in: "forward" on a host that forwards
    # (the DUT, a gateway), "input" on an end host (a firewall on the target itself).
    hosts: tuple[str, ...] = ("dut",)
    hook: str = "forward"
    # The testbed graph (None in contexts built by hand): mechanisms that span hosts
    # (tunnels) find their ends' addresses and what lies behind them here.
    topology: Topology | None = None
    # The workload's client and server hosts this rendering is for.
    ends: tuple[str, str] = ("client", "server")
    # nft flowtables the rendered rules create, as "FAMILY TABLE NAME" (e.g. "inet
    # secperf_x ft"). Their entries are flows offloaded from conntrack, which a
    # conntrack flush does not reach at once: the runner reloads the variant before
    # every test and checks that the reset removed each declared flowtable.
    flowtables: list[str] = field(default_factory=list)
    # The server host, for a mechanism that must copy the server's settings
    # (synproxy's TCP options); set by the runner once the testbed exists.
    server: Host | None = None


class Mechanism(Protocol):
    @property
    def kind(self) -> str: ...

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        """Write the files this mechanism loads; no side effects beyond files_dir."""
        ...

    def backends(self) -> set[str]:
        """The packet-filter backends (and ipset) this mechanism loads into, for reset_dut."""
        ...

    def apply(self, dut: Host, ctx: MechanismContext) -> None:
        """Load the files render() wrote (ctx.rendered) on the DUT; start its daemons."""
        ...

    def release(self, dut: Host, ctx: MechanismContext) -> None:
        """Stop what apply() started beyond rules (daemons); rules go with reset_dut."""
        ...


@runtime_checkable
class GroupMechanism(Protocol):
    """A mechanism that needs all its hosts at once (a tunnel's two ends): the runner
    calls apply_group / release_group once with every host `on` names, in order."""

    @property
    def kind(self) -> str: ...

    def render(self, ctx: MechanismContext) -> list[RenderedFile]: ...

    def backends(self) -> set[str]: ...

    def apply_group(self, hosts: Sequence[Host], ctx: MechanismContext) -> None: ...

    def release_group(self, hosts: Sequence[Host], ctx: MechanismContext) -> None: ...

    def target_address(self, ctx: MechanismContext, server: str, family: int) -> str | None:
        """The address a workload must target to reach `server` through this mechanism
        (a host-to-host tunnel's inner address), or None for the usual one."""
        ...


def run_tool(dut: Host, argv: list[str], *, what: str, source: Path | None = None) -> None:
    """Run a rule loader in the DUT and turn its failure into an error that names the file."""
    proc = dut.run(argv, check=False)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise MechanismError(
            f"{what} failed: {detail}",
            where=str(source) if source else None,
            fix="correct the rule file at the line the tool names, then run `secperf check` again",
        )


IPTABLES_TOOLS = {
    ("iptables-legacy", 4): ("iptables-legacy", "iptables-legacy-restore"),
    ("iptables-legacy", 6): ("ip6tables-legacy", "ip6tables-legacy-restore"),
    ("iptables-nft", 4): ("iptables-nft", "iptables-nft-restore"),
    ("iptables-nft", 6): ("ip6tables-nft", "ip6tables-nft-restore"),
}


LEGACY_EMPTY = "".join(
    f"*{table}\n" + "".join(f":{chain} ACCEPT [0:0]\n" for chain in chains) + "COMMIT\n"
    for table, chains in (
        ("filter", ("INPUT", "FORWARD", "OUTPUT")),
        ("nat", ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING")),
        ("mangle", ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING")),
    )
)


def reset_dut(dut: Host, backends: set[str]) -> None:
    """Return the DUT to plain forwarding: undo what the named backends loaded.

    iptables-nft rules live in nft tables, so flushing the nft ruleset clears them too.
    The legacy backend has tables of its own: restoring empty ones flushes them.
    ipsets go last, once no rule refers to them.
    """
    dut.run(["nft", "flush", "ruleset"])
    if "iptables-legacy" in backends:
        for restore in ("iptables-legacy-restore", "ip6tables-legacy-restore"):
            dut.run([restore], input=LEGACY_EMPTY)
    if "ipset" in backends:
        dut.run(["ipset", "destroy"])


def conntrack_entries(host: Host) -> int:
    """How many connections the host's conntrack table holds now."""
    return int(host.run(["conntrack", "-C"]).stdout.strip() or 0)


def flush_flow_state(host: Host) -> None:
    """Make the host's kernel forget every connection it tracks (NAT bindings,
    established and TIME_WAIT entries): `conntrack -F`, before every test. An
    external device's state is its own (its variant's commands reset it)."""
    if not host.runs_commands:
        return
    host.run(["conntrack", "-F"])


def check_flowtables_gone(dut: Host, flowtables: Sequence[str]) -> None:
    """After reset_dut: every declared flowtable ("FAMILY TABLE NAME") is gone, and
    with it every flow it had offloaded, so the next load starts it empty."""
    for ft in flowtables:
        family, table, name = ft.split()
        if dut.run(["nft", "list", "flowtable", family, table, name], check=False).returncode == 0:
            raise MechanismError(
                f"flowtable {ft} survived the reset of the DUT: its offloaded flows "
                "would carry over into the next test",
                where=ft,
                fix="create the flowtable in a table that `nft flush ruleset` removes",
            )
