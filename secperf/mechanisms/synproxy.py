"""SYN proxy on the DUT (RFC 3511 §5.5): the DUT answers every SYN to the server's
TCP ports with a SYN cookie and opens the connection to the server only once the
client completes the handshake, so a SYN flood from spoofed sources never reaches
the server's backlog.

The rules follow the nftables wiki (Synproxy): SYNs to the proxied ports skip
conntrack (raw prerouting `notrack`); in the forward chain untracked SYNs and the
client's cookie ACK (INVALID, because nf_conntrack_tcp_loose = 0 stops conntrack
from picking the ACK up as a new flow) go to `synproxy`, other INVALID packets are
dropped. The forward chain runs after a filter-priority chain (an ACL in its own
table), so a policy that drops a SYN drops it before the proxy answers it.

`nf_conntrack_tcp_loose` is a per-namespace sysctl: it is set in the DUT only and
restored on release. The server's own `tcp_syncookies` is left as the system has it
(1 by default): synproxy computes its cookies itself.

synproxy answers the client in the server's place and never rewrites the options it
promised, so they must be the server's: the MSS its link allows, the window scale it
will use (the client scales every window the server advertises by it), and whether
it does timestamps and SACK. A real deployment copies them from the server; here,
when the runner hands the mechanism the server host, apply() reads them from the
server's namespace (`server_options`) and renders the rules with them; `mss`,
`wscale`, `timestamp` and `sack_perm` given in the scenario override what was read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from secperf.errors import TestbedError
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
    TrafficPlan,
    backend_tools,
    run_tool,
)
from secperf.testbed.hosts import Host

LOOSE_SYSCTL = "net.netfilter.nf_conntrack_tcp_loose"
# Run after the filter-priority chains of other tables (the ACL's), before none.
FORWARD_PRIORITY = "filter + 10"
DEFAULT_MSS = {4: 1460, 6: 1440}  # 1500-byte veth MTU minus IP and TCP headers
DEFAULT_WSCALE = 7  # used only when the server was not read (render without apply)
HEADERS = {4: 40, 6: 60}  # IP + TCP headers without options
MAX_WSCALE = 14  # RFC 7323


class SynproxySpec(MechanismSpec):
    """nftables synproxy on the DUT for the server's TCP ports (RFC 3511 §5.5): the DUT
    answers SYNs with cookies. The options it promises must be the server's: by default
    they are read from the server's namespace when the rules are loaded (MSS from its
    link MTU, window scale from its tcp_rmem / rmem_max, timestamps and SACK from its
    sysctls); a key given here overrides what was read."""

    kind: Literal["synproxy"] = "synproxy"
    mss: int | None = Field(default=None, ge=536, le=65495)
    """The MSS the proxy announces to clients."""
    wscale: int | None = Field(default=None, ge=0, le=14)
    """The window scale it announces."""
    timestamp: bool | None = None
    """Announce timestamps (they also carry the cookie's window scale and SACK: without them
    synproxy announces neither).
    """
    sack_perm: bool | None = None
    """Announce SACK."""


@dataclass(frozen=True)
class TcpOptions:
    """What a server's TCP puts in its SYN-ACK, and so what synproxy must promise."""

    mss: int
    wscale: int | None  # None: the server does not scale its window
    timestamp: bool
    sack_perm: bool
    source: str = "default"  # "server" when read from the server's namespace

    def nft(self) -> str:
        parts = [f"mss {self.mss}"]
        if self.wscale is not None:
            parts.append(f"wscale {self.wscale}")
        if self.timestamp:
            parts.append("timestamp")
        if self.sack_perm:
            parts.append("sack-perm")
        return " ".join(parts)


def window_scale(rmem_max: int, core_rmem_max: int) -> int:
    """The window scale Linux's tcp_select_initial_window() gives a socket without
    SO_RCVBUF: enough to advertise the largest receive buffer it may grow to."""
    space = max(rmem_max, core_rmem_max, 1)
    return max(0, min(MAX_WSCALE, space.bit_length() - 1 - 15))


def server_options(server: Host, family: int) -> TcpOptions:
    """Reads the server namespace's TCP settings and its smallest link MTU."""
    names = [
        "net.ipv4.tcp_timestamps",
        "net.ipv4.tcp_sack",
        "net.ipv4.tcp_window_scaling",
        "net.ipv4.tcp_rmem",
        "net.core.rmem_max",
    ]
    out = server.run(["sysctl", "-n", *names]).stdout.splitlines()
    if len(out) != len(names):
        raise TestbedError(
            f"could not read the server's TCP settings for synproxy (got {out!r})",
            where=", ".join(names),
            fix="check that procps' sysctl works inside the server namespace",
        )
    ts, sack, scaling, rmem, core_max = out
    links = server.run(["ip", "-o", "link", "show"]).stdout
    mtus = [
        int(m.group(2))
        for m in re.finditer(r"^\d+: ([^:@]+)[^\n]*? mtu (\d+)", links, re.M)
        if m.group(1) != "lo"
    ]
    if not mtus:
        raise TestbedError(
            "the server has no link besides lo: synproxy cannot take its MTU",
            where="ip -o link show",
            fix="build the testbed before applying synproxy",
        )
    return TcpOptions(
        mss=min(mtus) - HEADERS[family],
        wscale=window_scale(int(rmem.split()[2]), int(core_max)) if scaling != "0" else None,
        timestamp=ts != "0",
        sack_perm=sack != "0",
        source="server",
    )


def proxied_ports(plan: TrafficPlan) -> str:
    """The server's TCP ports as an nft set: the engine's control and data ports."""
    lo, hi = plan.data_ports
    return f"{{ {plan.control_port}, {lo}-{hi} }}"


def render_nft(plan: TrafficPlan, table: str, opts: TcpOptions) -> str:
    ports = proxied_ports(plan)
    syn_only = "tcp flags & (fin | syn | rst | ack) == syn"
    return (
        "\n".join(
            [
                f"# secperf synproxy family {plan.family}: {opts.nft()} ports={ports}"
                f" (options: {opts.source})",
                f"table inet {table} {{",
                "  chain prerouting {",
                "    type filter hook prerouting priority raw; policy accept;",
                f"    tcp dport {ports} {syn_only} notrack",
                "  }",
                "  chain forward {",
                f"    type filter hook forward priority {FORWARD_PRIORITY}; policy accept;",
                f"    tcp dport {ports} ct state invalid,untracked synproxy {opts.nft()}",
                "    ct state invalid drop",
                "  }",
                "}",
            ]
        )
        + "\n"
    )


class Synproxy(Mechanism):
    """nftables synproxy for the server's TCP ports, with the server's TCP options."""

    spec: SynproxySpec

    def __init__(self, spec: SynproxySpec) -> None:
        super().__init__(spec)
        # The DUT's nf_conntrack_tcp_loose before apply(), restored by release().
        self._saved_loose: dict[str, str] = {}

    def options(self, read: TcpOptions | None, family: int) -> TcpOptions:
        """The options to promise: the scenario's where given, else the server's."""
        base = read or TcpOptions(DEFAULT_MSS[family], DEFAULT_WSCALE, True, True)
        s = self.spec
        given = (s.mss, s.wscale, s.timestamp, s.sack_perm)
        return TcpOptions(
            mss=base.mss if s.mss is None else s.mss,
            wscale=base.wscale if s.wscale is None else s.wscale,
            timestamp=base.timestamp if s.timestamp is None else s.timestamp,
            sack_perm=base.sack_perm if s.sack_perm is None else s.sack_perm,
            source=base.source + ("+scenario" if any(g is not None for g in given) else ""),
        )

    def _write(self, ctx: MechanismContext, opts: TcpOptions) -> list[RenderedFile]:
        ctx.files_dir.mkdir(parents=True, exist_ok=True)
        path = ctx.files_dir / f"{ctx.name}.nft"
        # Its own table: composable with an ACL or NAT table in the same DUT.
        path.write_text(render_nft(ctx.plan, f"{ctx.table}_syn", opts))
        return [RenderedFile(path, "nft")]

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        # Before the testbed exists: a check that the rules can be written; apply()
        # renders them again with the server's options.
        return self._write(ctx, self.options(None, ctx.plan.family))

    def backends(self) -> set[str]:
        return {"nft"}

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        if ctx.server is not None:
            read = server_options(ctx.server, ctx.plan.family)
            ctx.rendered = self._write(ctx, self.options(read, ctx.plan.family))
        for f in ctx.rendered:
            run_tool(host, ["nft", "-f", str(f.path)], what="nft -f", source=f.path)
        old = host.run(["sysctl", "-n", LOOSE_SYSCTL]).stdout.strip()
        self._saved_loose[ctx.name] = old
        host.run(["sysctl", "-qw", f"{LOOSE_SYSCTL}=0"])

    def release(self, host: Host, ctx: MechanismContext) -> None:
        """Give the DUT its conntrack pickup back; the rules go with reset_dut."""
        old = self._saved_loose.pop(ctx.name, None)
        if old is not None:
            host.run(["sysctl", "-qw", f"{LOOSE_SYSCTL}={old}"])


KIND = MechanismKind(
    name="synproxy",
    model=SynproxySpec,
    runtime=Synproxy,
    # nft for the rules (and sysctl, procps, for nf_conntrack_tcp_loose)
    known_tools=tuple(backend_tools("nft")),
    forwarding_only=True,
)
