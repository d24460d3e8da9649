"""What every mechanism is: its scenario entry, its declaration, and its runtime.

A mechanism kind declares itself once, in its own module (or package): its scenario
model (a `MechanismSpec`), its runtime (a `Mechanism`, built from the validated model),
and one `MechanismKind` that says, as data and small functions, what the rest of
secperf needs to know: the tools it needs, where it may run, whether it filters,
the checks it makes before a run. `secperf.mechanisms.registry` lists the kinds.

A runtime renders files, applies them on its hosts and releases them. It never
guesses what state it left behind: a host belongs to the run, so `reset_dut` returns
it to plain forwarding by flushing every packet filter backend, which is exactly the
baseline state, and `flush_flow_state` makes its kernel forget every connection it
tracks. What other parts of secperf may ask every runtime (a tunnel's target address,
what it observed) are methods of `Mechanism` with defaults, overridden by the kinds
that have an answer; what only some kinds can answer (a proxy's SOCKS endpoint, a
detector's counters, a CA to trust) are protocols in secperf.mechanisms.capabilities.
"""

from __future__ import annotations

import ipaddress
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar

from pydantic import Field, field_validator

from secperf.engine import CONTROL_PORT, DATA_PORTS
from secperf.errors import MechanismError
from secperf.metric import MetricRow
from secperf.rulesets.addrmap import AddressMap
from secperf.rulesets.model import PlacedFlow
from secperf.schema.fields import StrictModel
from secperf.testbed.hosts import Host
from secperf.testbed.topology import Topology
from secperf.tools import Tool

# The attacker's "allowed" flood port (secperf.workloads.parts.flood aims floods there): a
# filter permits it from the attacker, so an allowed flood reaches the server.
FLOOD_ALLOWED_PORT = 9


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
    # A rule-set review's traffic, placed on the testbed (secperf.rulesets): the flows
    # workload sends these; empty for every other scenario.
    flows: tuple[PlacedFlow, ...] = ()

    @property
    def excluded_host(self) -> str | None:
        """The inside source a filter denies to show a rejected stream (document 004's,
        a filter's `exclude_one`): the last emulated client host, when there is one."""
        return self.client_hosts[-1] if len(self.client_hosts) > 1 else None

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
    # (the TCP options a SYN proxy promises); set by the runner once the testbed exists.
    server: Host | None = None
    # The scenario's one address map (secperf.rulesets.addrmap.AddressMap) when some
    # entry loads a rule set (MechanismKind.rule_sets): every rule set of every
    # variant and the traffic share it. None for every other scenario.
    address_map: AddressMap | None = None


# ---------------------------------------------------------------- the scenario entry


Placement = Annotated[str | list[str], Field(min_length=1)]


class MechanismSpec(StrictModel):
    """Keys every mechanism has: where it runs. Each kind's model narrows `kind` to
    its `Literal` and adds its own keys.

    `on` is a host name ("dut", the default; "server" puts a host firewall on the
    target itself), a list of names (the same mechanism on each), "ends" (the
    workload's client and server hosts) or "gateways" (every host with role
    gateway). The runner resolves it against the testbed graph."""

    # Keys that take a list: the variant then expands into one variant per value
    # (Variant.expand), e.g. rules = [1, 10] -> NAME[rules=1], NAME[rules=10].
    sweepable: ClassVar[tuple[str, ...]] = ()

    kind: str
    on: Placement = "dut"
    """Where it runs: a host of the graph (`"server"` puts a host firewall on the target
    itself), a list of hosts (the same mechanism on each), `"ends"` (the workload's client and
    server hosts) or `"gateways"` (every host with role gateway).
    """

    @field_validator("on")
    @classmethod
    def _placement_names(cls, value: str | list[str]) -> str | list[str]:
        for name in [value] if isinstance(value, str) else value:
            if not re.fullmatch(r"[a-z][a-z0-9-]{0,19}", name):
                raise ValueError(
                    f"on = {name!r} is not a host name: write a host of [topology] "
                    '(e.g. "dut", "server"), "ends" or "gateways"'
                )
        return value

    def swept_keys(self) -> list[str]:
        """The sweepable keys that still hold a list (a variant not yet expanded)."""
        return [key for key in self.sweepable if isinstance(getattr(self, key), list)]


# ---------------------------------------------------------------- the runtime


class Mechanism(ABC):
    """A mechanism at run time, built from its validated scenario entry (`spec`).

    `render` writes its files (no other side effect), `apply` loads them on a host and
    starts its daemons, `release` stops what `apply` started beyond rules (rules go with
    reset_dut). The other methods are what the rest of secperf may ask any mechanism;
    their defaults are the answer of a mechanism that has nothing to say."""

    spec: MechanismSpec

    def __init__(self, spec: MechanismSpec) -> None:
        self.spec = spec

    @property
    def kind(self) -> str:
        return self.spec.kind

    @abstractmethod
    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        """Write the files this mechanism loads; no side effects beyond files_dir."""

    def backends(self) -> set[str]:
        """The packet-filter backends (and ipset) this mechanism loads into, for reset_dut."""
        return set()

    @abstractmethod
    def apply(self, host: Host, ctx: MechanismContext) -> None:
        """Load the files render() wrote (ctx.rendered) on the host; start its daemons."""

    def release(self, host: Host, ctx: MechanismContext) -> None:
        """Stop what apply() started beyond rules (daemons); rules go with reset_dut."""
        return  # a mechanism of rules alone has nothing to stop

    def apply_group(self, hosts: Sequence[Host], ctx: MechanismContext) -> None:
        """Apply on every host `on` names, in order. A mechanism that needs all its hosts
        at once (a tunnel's two ends, an IDS's routers and sensor) overrides this."""
        for host in hosts:
            self.apply(host, ctx)

    def release_group(self, hosts: Sequence[Host], ctx: MechanismContext) -> None:
        for host in hosts:
            self.release(host, ctx)

    def target_address(self, ctx: MechanismContext, server: str, family: int) -> str | None:
        """The address a workload must target to reach `server` through this mechanism
        (a host-to-host tunnel's inner address), or None for the usual one."""
        return None

    def observe(self) -> dict[str, Any] | None:
        """What the mechanism did in the test just measured (the runner keeps it as a
        `mechanism` record), or None when it reports nothing."""
        return None

    def translated_sources(self, ctx: MechanismContext) -> list[str]:
        """Addresses or prefixes ("198.18.5.0/24") the server sees the client's traffic
        come from instead of the client's own (a NAT), or [] when it sees the client's.
        The engine server serves them too (a spec's `peers`): it answers only the
        control connection's peer and the addresses a spec declares."""
        return []

    def rule_files(self) -> tuple[Path, ...]:
        """The user's rule files this mechanism loads (a rule set and its includes):
        flows derived from them are this variant's own, whose verdicts it must keep."""
        return ()

    def rule_source(self, family: str, table: str, chain: str, index: int) -> str | None:
        """Where the rule at `index` (0-based) of FAMILY TABLE CHAIN was written, as
        `file:line`, when this mechanism loaded it and knows (a user's rule set); None
        otherwise (the attribution round then names the rule by its text)."""
        return None


# ---------------------------------------------------------------- the declaration


@dataclass(frozen=True)
class CheckContext:
    """Where a mechanism entry stands, for a kind's checks and their messages."""

    key: str  # e.g. "variants.acl-set.mechanisms[0]"
    where: str  # the scenario file
    family: int  # 4 or 6
    # The scenario's testbed graph (None in contexts built by hand), for checks that
    # name hosts and links (a rule set's interfaces map).
    topology: Topology | None = None


@dataclass(frozen=True)
class RuleSetUse:
    """A user's rule file an entry loads as written (MechanismKind.rule_sets): the plan
    loads it, derives its traffic, maps its addresses with every other rule set of the
    scenario, and names the interfaces of `host` towards the hosts `interfaces` gives."""

    path: Path
    format: Literal["nft", "nft-json", "iptables"]
    # The rule set's interface name -> the testbed host behind it (its link from `host`).
    interfaces: dict[str, str]
    host: str = "dut"  # where it is loaded (the entry's `on`)


S = TypeVar("S", bound=MechanismSpec)
Check = Callable[[S, CheckContext], None]


@dataclass(frozen=True)
class MechanismKind(Generic[S]):
    """Everything secperf needs to know about one mechanism kind, stated once.

    The registry (secperf.mechanisms.registry) maps `name` to it; the scenario schema
    validates a `{ kind = name, ... }` entry through `model`, and the runner, the
    preflight and the workloads read the rest."""

    name: str
    model: type[S]
    # The runtime of one validated entry (usually the runtime class itself).
    runtime: Callable[[S], Mechanism]
    # Every program an entry of this kind may need on its hosts (`secperf doctor` lists
    # them), and those one entry needs (None: all of them; see tools_for).
    known_tools: tuple[Tool, ...] = ()
    tools: Callable[[S], Sequence[Tool]] | None = None
    # About how long loading one entry takes (seconds): the runner loads the variant
    # afresh before every test, so each test of it costs this beyond its own length (a
    # tunnel's daemons and handshake); `secperf check`'s estimate adds it.
    apply_s: float = 0.0
    # It drops what its policy does not permit: the `illegal` kind judges "no denied
    # packet reached the server" only through a variant with such a mechanism.
    filters: bool = False
    # Where it may run: only on hosts that forward (it rewrites or proxies forwarded
    # traffic), or also on an end host (its filter then goes in the input hook).
    forwarding_only: bool = False
    # The role of a host among those `on` names that is its sensor, not a place it
    # filters (an IDS's): not counted when choosing the hook.
    sensor_role: str | None = None
    # Hosts (by role) the testbed must have for it, beyond client, dut and server.
    hosts: frozenset[str] = frozenset()
    # Why one variant takes one of it at most (None: any number compose).
    single: str | None = None
    # Checks before any testbed exists: `check` needs nothing (`secperf check` and
    # `run`), `kernel_check` asks the kernel (needs root; `kernel_check_note` says what
    # is skipped without it), `run_check` runs before `secperf run` only.
    check: Check[S] | None = None
    kernel_check: Check[S] | None = None
    kernel_check_note: str = ""
    run_check: Check[S] | None = None
    # The metrics of the `mechanism` records its runtime's `observe` writes after each
    # test (a tunnel's daemons' memory), read as a workload's result records are.
    metrics: tuple[MetricRow, ...] = ()
    # The user's rule files an entry loads as written (None: it loads none): the plan
    # maps them onto the testbed with one map for the whole scenario (secperf.plan.review).
    rule_sets: Callable[[S], Sequence[RuleSetUse]] | None = None

    def tools_for(self, spec: S) -> list[Tool]:
        """The programs this entry needs (preflight refuses a run without them)."""
        return list(self.known_tools if self.tools is None else self.tools(spec))

    def build(self, spec: S) -> Mechanism:
        """The runtime for one entry of a variant; a swept entry is expanded first."""
        swept = spec.swept_keys()
        if swept:
            raise MechanismError(
                f"a {self.name} entry with a list in {', '.join(swept)} is a sweep: it must "
                "be expanded into variants first (Variant.expand)"
            )
        return self.runtime(spec)


# ---------------------------------------------------------------- packet filter backends


BACKEND_TOOLS: dict[str, tuple[Tool, ...]] = {
    "nft": (Tool("nft", "nftables", "nft rule sets"),),
    "iptables-legacy": (
        Tool("iptables-legacy-restore", "iptables", "iptables-legacy rule sets"),
        Tool("ip6tables-legacy-restore", "iptables", "ip6tables-legacy rule sets"),
    ),
    "iptables-nft": (
        Tool("iptables-nft-restore", "iptables", "iptables-nft rule sets"),
        Tool("ip6tables-nft-restore", "iptables", "ip6tables-nft rule sets"),
    ),
    "ipset": (Tool("ipset", "ipset", "ACLs with layout = set on an iptables backend"),),
}


def backend_tools(*backends: str) -> list[Tool]:
    """The loaders of the named packet-filter backends."""
    return [tool for b in backends for tool in BACKEND_TOOLS[b]]


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


def apply_files(dut: Host, files: list[RenderedFile], backend: str, family: int) -> None:
    """Load rendered files on the DUT in order (ipsets before the rules that use them)."""
    for f in files:
        if f.tool == "nft":
            run_tool(dut, ["nft", "-f", str(f.path)], what="nft -f", source=f.path)
        elif f.tool == "ipset":
            run_tool(
                dut, ["ipset", "restore", "-f", str(f.path)], what="ipset restore", source=f.path
            )
        else:
            restore = IPTABLES_TOOLS[(backend, family)][1]
            proc = dut.run([restore], input=f.path.read_text(), check=False)
            if proc.returncode != 0:
                raise MechanismError(
                    f"{restore} failed: {(proc.stderr or proc.stdout).strip()}",
                    where=str(f.path),
                    fix="correct the rule file at the line the tool names",
                )


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


def interfaces(host: Host) -> list[str]:
    """Every interface of the host but loopback (fastpath offloads them, rps steers them)."""
    proc = host.run(["ip", "-j", "link", "show"])
    return sorted(
        str(link["ifname"]) for link in json.loads(proc.stdout or "[]") if link["ifname"] != "lo"
    )


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
