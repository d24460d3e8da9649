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
"""

from __future__ import annotations

from dataclasses import dataclass, field

from secperf.mechanisms.base import MechanismContext, RenderedFile, TrafficPlan, run_tool
from secperf.testbed.testbed import Host

LOOSE_SYSCTL = "net.netfilter.nf_conntrack_tcp_loose"
# Run after the filter-priority chains of other tables (the ACL's), before none.
FORWARD_PRIORITY = "filter + 10"
DEFAULT_MSS = {4: 1460, 6: 1440}  # 1500-byte veth MTU minus IP and TCP headers


def proxied_ports(plan: TrafficPlan) -> str:
    """The server's TCP ports as an nft set: the engine's control and data ports."""
    lo, hi = plan.data_ports
    return f"{{ {plan.control_port}, {lo}-{hi} }}"


def render_nft(plan: TrafficPlan, table: str, *, mss: int, wscale: int) -> str:
    ports = proxied_ports(plan)
    syn_only = "tcp flags & (fin | syn | rst | ack) == syn"
    return (
        "\n".join(
            [
                f"# secperf synproxy family {plan.family}: mss={mss} wscale={wscale} ports={ports}",
                f"table inet {table} {{",
                "  chain prerouting {",
                "    type filter hook prerouting priority raw; policy accept;",
                f"    tcp dport {ports} {syn_only} notrack",
                "  }",
                "  chain forward {",
                f"    type filter hook forward priority {FORWARD_PRIORITY}; policy accept;",
                f"    tcp dport {ports} ct state invalid,untracked "
                f"synproxy mss {mss} wscale {wscale} timestamp sack-perm",
                "    ct state invalid drop",
                "  }",
                "}",
            ]
        )
        + "\n"
    )


@dataclass
class Synproxy:
    """nftables synproxy for the server's TCP ports (mss/wscale must match the server's)."""

    mss: int | None = None
    wscale: int = 7
    kind: str = "synproxy"
    # The DUT's nf_conntrack_tcp_loose before apply(), restored by release().
    _saved_loose: dict[str, str] = field(default_factory=dict, repr=False)

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        ctx.files_dir.mkdir(parents=True, exist_ok=True)
        path = ctx.files_dir / f"{ctx.name}.nft"
        mss = self.mss if self.mss is not None else DEFAULT_MSS[ctx.plan.family]
        # Its own table: composable with an ACL or NAT table in the same DUT.
        path.write_text(render_nft(ctx.plan, f"{ctx.table}_syn", mss=mss, wscale=self.wscale))
        return [RenderedFile(path, "nft")]

    def backends(self) -> set[str]:
        return {"nft"}

    def apply(self, dut: Host, ctx: MechanismContext) -> None:
        for f in ctx.rendered:
            run_tool(dut, ["nft", "-f", str(f.path)], what="nft -f", source=f.path)
        old = dut.run(["sysctl", "-n", LOOSE_SYSCTL]).stdout.strip()
        self._saved_loose[ctx.name] = old
        dut.run(["sysctl", "-qw", f"{LOOSE_SYSCTL}=0"])

    def release(self, dut: Host, ctx: MechanismContext) -> None:
        """Give the DUT its conntrack pickup back; the rules go with reset_dut."""
        old = self._saved_loose.pop(ctx.name, None)
        if old is not None:
            dut.run(["sysctl", "-qw", f"{LOOSE_SYSCTL}={old}"])
