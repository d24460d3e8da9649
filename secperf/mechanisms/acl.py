"""An access-control list on the DUT's forward path, as a router would have it.

The ACL is stateless by default, like a router ACL (document 004): every packet of
the measured flow, in both directions, walks the list. `rules = N` generated
entries never match the measured traffic; the permits that do are placed before
(`match = "first"`) or after (`match = "last"`) them, and the chain's policy drops
everything else.

With an attacker host in the testbed (floods, document 002) the permits also let
the attacker reach the server's FLOOD_ALLOWED_PORT (udp/tcp, and ICMP echo), and the
server answer it, always as an extended entry; FLOOD_DENIED_PORT is never permitted,
so a "denied" flood walks the whole list and meets the drop policy.
`flood_permit = false` leaves the attacker out entirely.

Generated entries come from 198.19.0.0/17 (2001:2:0:ff::/64), which no testbed
host uses (198.19.128.0/17 holds a rule-set review's mapped addresses), so at most
32767 standard IPv4 entries have sources of their own. `standard` entries match
the source only; `extended` entries match source, destination, protocol and
port: they share the measured hosts and differ in the port, so a packet compares
every field of every entry, as on a router.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from pydantic import PlainValidator

from secperf.errors import MechanismError
from secperf.mechanisms.base import (
    FLOOD_ALLOWED_PORT,
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
    TrafficPlan,
    apply_files,
    backend_tools,
)
from secperf.schema.fields import bounded, one_or_sweep, parse_count
from secperf.testbed.hosts import Host
from secperf.tools import Tool

# secperf.testbed.topology.ACL_RESERVED_NET4 / _NET6
GENERATED_V4 = ipaddress.ip_network("198.19.0.0/17")
GENERATED_V6 = ipaddress.ip_network("2001:2:0:ff::/64")
FIRST_GENERATED_PORT = 10000  # above every port the engine uses
MAX_RULES = 65536

Layout = Literal["linear", "set"]
Entries = Literal["standard", "extended"]
Match = Literal["first", "last"]
Backend = Literal["nft", "iptables-legacy", "iptables-nft"]

RuleCount = Annotated[
    int | list[int],
    PlainValidator(one_or_sweep(bounded(parse_count, 0, 65_536, "a rule count"))),
]


class AclSpec(MechanismSpec):
    """An nftables/iptables filter of `rules` rules on the DUT's forward path."""

    sweepable: ClassVar[tuple[str, ...]] = ("rules",)

    kind: Literal["acl"] = "acl"
    rules: RuleCount
    """Generated entries that never match the measured traffic."""
    layout: Layout = "linear"
    """One rule per entry in a chain, or one set lookup."""
    entries: Entries = "extended"
    """Standard: match the source address only; extended: source, destination, protocol and port."""
    match: Match = "last"
    """Whether the permits for the measured traffic come before or after the generated entries."""
    backend: Backend = "nft"
    """Which tool installs the rules."""
    stateful: bool = False
    """Accept established/related traffic first (conntrack), so only a flow's first packet walks
    the list.
    """
    # Deny the last client-side emulated host just before the permits (document
    # 004's rejected stream: a latency workload's `rejected_stream` sends from it).
    exclude_one: bool = False
    """With emulated hosts: deny the last client-side emulated host just before the permits (the
    source of a latency workload's `rejected_stream`, document 004's "50 % rejected").
    """
    # With an attacker in the testbed: permit its "allowed" flood port (9), never port 19.
    flood_permit: bool = True
    """When the testbed has an attacker (a flood workload): permit attacker → server port 9
    (udp/tcp) and ICMP echo, and the server's answers, as extended entries after the generated
    ones (`match = "last"`); port 19 ("denied" floods) is never permitted.
    """

    @property
    def rule_count(self) -> int:
        """`rules` of an expanded entry (one value, not a sweep)."""
        if isinstance(self.rules, list):
            raise MechanismError("a rule-count sweep must be expanded into variants first")
        return self.rules


@dataclass(frozen=True)
class Entry:
    """One generated ACL entry; `dst`, `proto` and `port` are None for standard entries."""

    src: str
    dst: str | None = None
    proto: str | None = None
    port: int | None = None


def generated_address(i: int, family: int) -> str:
    """The i-th never-matching address (i from 0), inside GENERATED_V4 / GENERATED_V6."""
    net = GENERATED_V4 if family == 4 else GENERATED_V6
    if i + 1 >= net.num_addresses:
        raise MechanismError(
            f"generated entry {i + 1} has no address of its own in {net}",
            fix=f"ask for at most {net.num_addresses - 1} such entries "
            '(entries = "extended" shares the hosts and differs in the port)',
        )
    return str(net.network_address + 1 + i)


def generated_entries(n: int, entries: Entries, plan: TrafficPlan) -> list[Entry]:
    """N entries that match none of the measured traffic (nor its replies)."""
    if n > MAX_RULES:
        raise MechanismError(
            f"rules = {n} is more than the {MAX_RULES} distinct entries secperf can generate",
            fix=f"ask for at most {MAX_RULES} rules",
        )
    if entries == "standard":
        return [Entry(src=generated_address(i, plan.family)) for i in range(n)]
    span = 65535 - FIRST_GENERATED_PORT
    out = []
    for i in range(n):
        # Same hosts as the measured flow, another port; past the port space,
        # another destination too.
        dst = plan.server_addr if i < span else generated_address(i - span, plan.family)
        proto = "tcp" if i % 2 == 0 else "udp"
        out.append(Entry(plan.client_addr, dst, proto, FIRST_GENERATED_PORT + i % span))
    return out


class Acl(Mechanism):
    spec: AclSpec

    def __init__(self, spec: AclSpec) -> None:
        super().__init__(spec)

    # -- rendering -------------------------------------------------------------------
    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        acl = self.spec
        gen = generated_entries(acl.rule_count, acl.entries, ctx.plan)
        ctx.files_dir.mkdir(parents=True, exist_ok=True)
        if acl.backend == "nft":
            path = ctx.files_dir / f"{ctx.name}.nft"
            path.write_text(render_nft(acl, gen, ctx.plan, ctx.table, hook=ctx.hook))
            return [RenderedFile(path, "nft")]
        files: list[RenderedFile] = []
        if acl.layout == "set":
            sets = ctx.files_dir / f"{ctx.name}.ipset"
            sets.write_text(render_ipset(acl, gen, ctx.plan, set_name(ctx.table)))
            files.append(RenderedFile(sets, "ipset"))
        rules = ctx.files_dir / f"{ctx.name}.iptables"
        rules.write_text(render_iptables(acl, gen, ctx.plan, set_name(ctx.table), hook=ctx.hook))
        files.append(RenderedFile(rules, "iptables-restore"))
        return files

    def backends(self) -> set[str]:
        return backends_of(self.spec)

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        apply_files(host, ctx.rendered, self.spec.backend, ctx.plan.family)


def backends_of(acl: AclSpec) -> set[str]:
    """The loaders an ACL uses: its backend, and ipset for a set on iptables."""
    used: set[str] = {acl.backend}
    if acl.backend != "nft" and acl.layout == "set":
        used.add("ipset")
    return used


def _excluded(acl: AclSpec, plan: TrafficPlan) -> str:
    host = plan.excluded_host
    if acl.exclude_one and host is None:
        raise MechanismError(
            "exclude_one needs emulated hosts on the client side",
            fix="set testbed.emulated_hosts to 2 or more",
        )
    return host or ""


def set_name(table: str) -> str:
    return f"{table}_acl"[:31]


def _nft_proto_match(family: int) -> str:
    return "ip" if family == 4 else "ip6"


def render_nft(
    acl: AclSpec, gen: list[Entry], plan: TrafficPlan, table: str, *, hook: str = "forward"
) -> str:
    """The ACL as an nft table. `hook = "input"` makes it a host firewall on the
    target itself (document 002's NIC firewall): the same list on the host's input
    path, with loopback and IPv6 neighbour discovery let through first."""
    ip = _nft_proto_match(plan.family)
    addr_type = "ipv4_addr" if plan.family == 4 else "ipv6_addr"
    ports = f"{{ {plan.control_port}, {plan.data_ports[0]}-{plan.data_ports[1]} }}"
    if acl.entries == "standard":
        permits = [f"{ip} saddr {plan.client_net} accept", f"{ip} saddr {plan.server_net} accept"]
    else:
        permits = [
            f"{ip} saddr {plan.client_net} {ip} daddr {plan.server_net} "
            f"meta l4proto {{ tcp, udp }} th dport {ports} accept",
            f"{ip} saddr {plan.server_net} {ip} daddr {plan.client_net} "
            f"meta l4proto {{ tcp, udp }} th sport {ports} accept",
        ]
    lines = [
        f"# secperf acl family {plan.family}: rules={acl.rules} layout={acl.layout} "
        f"entries={acl.entries} match={acl.match} stateful={acl.stateful}",
        f"table inet {table} {{",
    ]
    body: list[str] = []
    if acl.layout == "set" and gen:
        if acl.entries == "standard":
            lines.append(f"  set acl {{ type {addr_type}; size {max(len(gen), 1) * 2}")
            elems = [e.src for e in gen]
            body.append(f"{ip} saddr @acl accept")
        else:
            lines.append(
                f"  set acl {{ type {addr_type} . {addr_type} . inet_proto . inet_service; "
                f"size {max(len(gen), 1) * 2}"
            )
            elems = [f"{e.src} . {e.dst} . {e.proto} . {e.port}" for e in gen]
            body.append(f"{ip} saddr . {ip} daddr . meta l4proto . th dport @acl accept")
        lines.append("    elements = {")
        lines.extend(f"      {e}," for e in elems)
        lines.append("    }")
        lines.append("  }")
    elif acl.entries == "standard":
        body = [f"{ip} saddr {e.src} accept" for e in gen]
    else:
        body = [
            f"{ip} saddr {e.src} {ip} daddr {e.dst} {e.proto} dport {e.port} accept" for e in gen
        ]
    if acl.exclude_one:
        permits.insert(0, f"{ip} saddr {_excluded(acl, plan)} drop")
    if acl.flood_permit and plan.attacker_net:
        att, srv, port = plan.attacker_net, plan.server_net, FLOOD_ALLOWED_PORT
        icmp = "icmp" if plan.family == 4 else "icmpv6"
        permits += [
            f"{ip} saddr {att} {ip} daddr {srv} meta l4proto {{ tcp, udp }} th dport {port} accept",
            f"{ip} saddr {srv} {ip} daddr {att} meta l4proto {{ tcp, udp }} th sport {port} accept",
            f"{ip} saddr {att} {ip} daddr {srv} {icmp} type echo-request accept",
            f"{ip} saddr {srv} {ip} daddr {att} {icmp} type echo-reply accept",
        ]
    chain = permits + body if acl.match == "first" else body + permits
    if acl.stateful:
        chain.insert(0, "ct state established,related accept")
    if hook == "input":
        chain[:0] = [
            "iif lo accept",
            "icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept",
        ]
    lines.append(f"  chain {hook} {{")
    lines.append(f"    type filter hook {hook} priority filter; policy drop;")
    lines.extend(f"    {rule}" for rule in chain)
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_ipset(acl: AclSpec, gen: list[Entry], plan: TrafficPlan, name: str) -> str:
    fam = "inet" if plan.family == 4 else "inet6"
    kind = "hash:ip" if acl.entries == "standard" else "hash:ip,port,ip"
    lines = [f"create {name} {kind} family {fam} hashsize 1024 maxelem {max(len(gen), 1) * 2}"]
    for e in gen:
        if acl.entries == "standard":
            lines.append(f"add {name} {e.src}")
        else:
            lines.append(f"add {name} {e.src},{e.proto}:{e.port},{e.dst}")
    return "\n".join(lines) + "\n"


def render_iptables(
    acl: AclSpec, gen: list[Entry], plan: TrafficPlan, name: str, *, hook: str = "forward"
) -> str:
    """The ACL as an iptables-restore file (its FORWARD chain, or INPUT for `hook =
    "input"`, like render_nft)."""
    ports = f"{plan.control_port},{plan.data_ports[0]}:{plan.data_ports[1]}"
    if acl.entries == "standard":
        permits = [f"-A FORWARD -s {plan.client_net} -j ACCEPT"]
        permits.append(f"-A FORWARD -s {plan.server_net} -j ACCEPT")
    else:
        permits = []
        for proto in ("tcp", "udp"):
            permits.append(
                f"-A FORWARD -s {plan.client_net} -d {plan.server_net} -p {proto} "
                f"-m multiport --dports {ports} -j ACCEPT"
            )
            permits.append(
                f"-A FORWARD -s {plan.server_net} -d {plan.client_net} -p {proto} "
                f"-m multiport --sports {ports} -j ACCEPT"
            )
    if acl.flood_permit and plan.attacker_net:
        att, srv, port = plan.attacker_net, plan.server_net, FLOOD_ALLOWED_PORT
        icmp = "icmp" if plan.family == 4 else "icmpv6"
        for proto in ("tcp", "udp"):
            permits.append(f"-A FORWARD -s {att} -d {srv} -p {proto} --dport {port} -j ACCEPT")
            permits.append(f"-A FORWARD -s {srv} -d {att} -p {proto} --sport {port} -j ACCEPT")
        permits.append(
            f"-A FORWARD -s {att} -d {srv} -p {icmp} --{icmp}-type echo-request -j ACCEPT"
        )
        permits.append(f"-A FORWARD -s {srv} -d {att} -p {icmp} --{icmp}-type echo-reply -j ACCEPT")
    if acl.layout == "set" and gen:
        flags = "src" if acl.entries == "standard" else "src,dst,dst"
        body = [f"-A FORWARD -m set --match-set {name} {flags} -j ACCEPT"]
    elif acl.entries == "standard":
        body = [f"-A FORWARD -s {e.src} -j ACCEPT" for e in gen]
    else:
        body = [
            f"-A FORWARD -s {e.src} -d {e.dst} -p {e.proto} --dport {e.port} -j ACCEPT" for e in gen
        ]
    if acl.exclude_one:
        permits.insert(0, f"-A FORWARD -s {_excluded(acl, plan)} -j DROP")
    chain = permits + body if acl.match == "first" else body + permits
    if acl.stateful:
        chain.insert(0, "-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT")
    policy = {"INPUT": "ACCEPT", "FORWARD": "DROP"}
    if hook == "input":
        chain = [rule.replace("-A FORWARD ", "-A INPUT ", 1) for rule in chain]
        icmp6 = ["-A INPUT -p icmpv6 -j ACCEPT"] if plan.family == 6 else []
        chain[:0] = ["-A INPUT -i lo -j ACCEPT", *icmp6]
        policy = {"INPUT": "DROP", "FORWARD": "ACCEPT"}
    lines = [
        f"# secperf acl family {plan.family}: rules={acl.rules} layout={acl.layout} "
        f"entries={acl.entries} match={acl.match} stateful={acl.stateful} hook={hook}",
        "*filter",
        f":INPUT {policy['INPUT']} [0:0]",
        f":FORWARD {policy['FORWARD']} [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        *chain,
        "COMMIT",
    ]
    return "\n".join(lines) + "\n"


def tools(acl: AclSpec) -> list[Tool]:
    return backend_tools(acl.backend, *(["ipset"] if "ipset" in backends_of(acl) else []))


KIND = MechanismKind(
    name="acl",
    model=AclSpec,
    runtime=Acl,
    tools=tools,
    known_tools=tuple(backend_tools("nft", "iptables-legacy", "iptables-nft", "ipset")),
    filters=True,
    # Each ACL renders its own complete filter (permits, then the default drop) into the
    # one table and chain of the variant: a second one would sit behind the first's
    # permits and never be evaluated. Refuse it rather than measure nothing.
    single="one variant takes one ACL (a second would come after the first's permits and "
    "never be evaluated); give it the total rule count, or put each ACL in its own variant",
)
