"""Document 000's security appliance, built from namespace parts on the DUT.

The paper put SmoothWall Express (a Linux firewall distribution) in a VirtualBox
VM between a PC and the network: a stateful filter, NAT towards the outside, and
logging/IDS, designed to fail closed (no packet reaches the PC except through the
VM). secperf composes the same functions on the DUT namespace:

- a stateful nftables filter (forward policy drop): established and related
  traffic passes, new connections from the inside (the client's side) pass, new
  connections from the outside are dropped; the DUT itself answers only the inside;
- PAT (masquerade) towards the server side, so the server sees the DUT's outside
  address (`nat = false` leaves addresses alone);
- `secperf-nfq`, a user-space daemon on NFQUEUE that gives every new connection a
  verdict (accept, for now) and logs it as one JSON line. The iptables-nft rule
  `-m conntrack --ctstate NEW -j NFQUEUE --queue-num N` has no `--queue-bypass`:
  without its daemon the kernel drops what the rule queues, so nothing new passes.
  That is the fail-closed design; `fail_open = true` adds `--queue-bypass` (and has
  a full queue accept) to show the other kind. The engine's control connection
  passes beside the queue (secperf.mechanisms.nfq.control_bypass): it is the
  measurement's own, not the protected traffic.

The filter's chain runs at priority `filter - 10`, before the iptables-nft FORWARD
chain, so the daemon sees (and logs) only connections the filter let through.
Conntrack calls every packet of a flow NEW until the flow has a reply, so a
one-way UDP stream is queued packet by packet; TCP queues its SYN only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from secperf.mechanisms import nfq
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
    TrafficPlan,
    apply_files,
    backend_tools,
)
from secperf.testbed.hosts import Host, ManagedProcess

READY_TIMEOUT_S = 10.0


class ApplianceSpec(MechanismSpec):
    """Document 000's security appliance on the DUT: a stateful filter (the inside
    opens connections, the outside cannot), PAT towards the server side, and a
    daemon on NFQUEUE that logs every new connection. Without its daemon nothing
    new passes (fail-closed), unless `fail_open` asks the kernel to bypass it."""

    kind: Literal["appliance"] = "appliance"
    queue: int = Field(default=0, ge=0, le=65535)
    """The NFQUEUE number the connection-logging daemon binds."""
    nat: bool = True
    """PAT (masquerade) towards the server side: the server sees the DUT's outside address."""
    fail_open: bool = False
    """Add `--queue-bypass` to the NFQUEUE rule: without its daemon new connections then pass (to
    show what fail-open looks like).
    """


def render_nft(appl: ApplianceSpec, plan: TrafficPlan, table: str) -> str:
    ip = "ip" if plan.family == 4 else "ip6"
    inside = plan.client_net
    input_extra = (
        # IPv6 neighbour discovery is not tracked as a connection: let it in first.
        [
            "icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, "
            "nd-router-solicit, nd-router-advert } accept"
        ]
        if plan.family == 6
        else []
    )
    lines = [
        f"# secperf appliance family {plan.family}: queue={appl.queue} nat={appl.nat} "
        f"fail_open={appl.fail_open}; inside = {inside}",
        f"table inet {table} {{",
        "  chain forward {",
        "    type filter hook forward priority filter - 10; policy drop;",
        "    ct state established,related accept",
        "    ct state invalid drop",
        f"    {ip} saddr {inside} ct state new accept",
        "  }",
        "  chain input {",
        "    type filter hook input priority filter - 10; policy drop;",
        "    ct state established,related accept",
        '    iifname "lo" accept',
        *(f"    {r}" for r in input_extra),
        f"    {ip} saddr {inside} accept",
        "  }",
    ]
    if appl.nat:
        lines += [
            "  chain postrouting {",
            "    type nat hook postrouting priority srcnat; policy accept;",
            f"    {ip} saddr {inside} {ip} daddr != {inside} masquerade",
            "  }",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_iptables(appl: ApplianceSpec, plan: TrafficPlan) -> str:
    target = nfq.queue_target(appl.queue, 1, appl.fail_open)
    lines = [
        f"# secperf appliance: every new connection the filter let through goes to "
        f"secperf-nfq on queue {appl.queue}"
        + ("; --queue-bypass: FAIL-OPEN when the daemon is gone" if appl.fail_open else ""),
        "*filter",
        ":INPUT ACCEPT [0:0]",
        ":FORWARD ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        *nfq.control_bypass("FORWARD", plan),
        f"-A FORWARD -m conntrack --ctstate NEW -j {target}",
        "COMMIT",
    ]
    return "\n".join(lines) + "\n"


class Appliance(Mechanism):
    spec: ApplianceSpec

    def __init__(self, spec: ApplianceSpec) -> None:
        super().__init__(spec)
        self._daemon: ManagedProcess | None = None

    # -- files ---------------------------------------------------------------------
    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        ctx.files_dir.mkdir(parents=True, exist_ok=True)
        nft = ctx.files_dir / f"{ctx.name}.nft"
        nft.write_text(render_nft(self.spec, ctx.plan, f"{ctx.table}_appl"))
        ipt = ctx.files_dir / f"{ctx.name}.iptables"
        ipt.write_text(render_iptables(self.spec, ctx.plan))
        return [RenderedFile(nft, "nft"), RenderedFile(ipt, "iptables-restore")]

    def backends(self) -> set[str]:
        return {"nft", "iptables-nft"}

    @staticmethod
    def log_path(ctx: MechanismContext) -> Path:
        """The daemon's connection log (JSON lines), kept in the run directory."""
        return ctx.files_dir / f"{ctx.name}.connections.jsonl"

    @staticmethod
    def stderr_path(ctx: MechanismContext) -> Path:
        return ctx.files_dir / f"{ctx.name}.nfq.stderr"

    # -- life cycle --------------------------------------------------------------------
    def apply(self, host: Host, ctx: MechanismContext) -> None:
        # The daemon first: once the rules are in, every new connection needs it.
        self.start_daemon(host, ctx)
        apply_files(host, ctx.rendered, "iptables-nft", ctx.plan.family)

    def release(self, host: Host, ctx: MechanismContext) -> None:
        """Stop the daemon (SIGTERM: it unbinds and exits); the rules go with reset_dut."""
        if self._daemon is not None:
            self._daemon.stop(timeout=5.0)
            self._daemon = None

    def start_daemon(self, host: Host, ctx: MechanismContext) -> ManagedProcess:
        if self._daemon is not None and self._daemon.poll() is None:
            self._daemon.stop(timeout=5.0)
        ctx.files_dir.mkdir(parents=True, exist_ok=True)
        queue = self.spec.queue
        self._daemon = nfq.start(
            host,
            [
                *nfq.daemon_queue_args(queue, 1, self.spec.fail_open),
                "--log",
                str(self.log_path(ctx)),
            ],
            self.stderr_path(ctx),
            timeout=READY_TIMEOUT_S,
            what=f"secperf-nfq did not bind NFQUEUE {queue}",
            fix="check that the kernel has NFQUEUE (nfnetlink_queue) and that no other "
            "daemon holds this queue number",
        )
        return self._daemon

    # -- DaemonMechanism (secperf.mechanisms.daemons) ------------------------------------
    def daemons(self) -> list[ManagedProcess]:
        d = self._daemon
        return [d] if d is not None and d.poll() is None else []

    def kill_daemons(self) -> list[str]:
        killed = nfq.kill(self.daemons())
        self._daemon = None
        return killed

    def restart_daemons(self, host: Host, ctx: MechanismContext) -> None:
        self.start_daemon(host, ctx)


KIND = MechanismKind(
    name="appliance",
    model=ApplianceSpec,
    runtime=Appliance,
    # filter + NAT in nft, the NFQUEUE rule in iptables-nft (nft has no `queue` here)
    known_tools=tuple(backend_tools("nft", "iptables-nft")),
    filters=True,
    forwarding_only=True,
    run_check=nfq.built,
)
