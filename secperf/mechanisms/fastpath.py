"""The DUT's fast path (`fastpath`): an nftables flowtable, the Linux analogue of the
Cisco Express Forwarding that document 004 switched on for its IPS runs.

Once conntrack has seen a TCP or UDP flow both ways, the forward chain's `flow add`
rule offloads it into the flowtable: its later packets are forwarded from the
ingress hook of the interface they arrive on, past the routing decision, conntrack's
per-packet work and every hook after ingress (prerouting, forward, postrouting).
That skip is the point of a fast path, and it has a consequence worth knowing: a
filter or an inline IPS in the forward hook (iptables FORWARD, NFQUEUE) sees only
the packets of a flow before it is offloaded. Conntrack marks an offloaded entry
`[OFFLOAD]`; the flowtable's `counter` keeps per-flow counters there.

The table is its own (`<table>_fastpath`), declared in `ctx.flowtables`, so the
runner checks that resetting the DUT removed it (and its offloaded flows) before
the next test.
"""

from __future__ import annotations

from typing import Literal

from secperf.errors import MechanismError
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
    backend_tools,
    interfaces,
)
from secperf.testbed.hosts import Host


class FastpathSpec(MechanismSpec):
    """The DUT's fast path (document 004's CEF): an nftables flowtable on the forwarding
    host's interfaces. Established flows are offloaded from the forward path: their
    packets skip the forward hook (and every filter and NFQUEUE rule there)."""

    kind: Literal["fastpath"] = "fastpath"


def render_flowtable(table: str, devices: list[str]) -> str:
    devs = ", ".join(f'"{d}"' for d in devices)
    return (
        "# secperf fastpath: established TCP/UDP flows offloaded to a flowtable\n"
        f"table inet {table} {{\n"
        "  flowtable ft {\n"
        f"    hook ingress priority filter; devices = {{ {devs} }}; counter;\n"
        "  }\n"
        "  chain forward {\n"
        "    type filter hook forward priority filter; policy accept;\n"
        "    meta l4proto { tcp, udp } flow add @ft\n"
        "  }\n"
        "}\n"
    )


def offloaded_flows(host: Host) -> int:
    """Conntrack entries of the host that the flowtable holds now ([OFFLOAD])."""
    proc = host.run(["conntrack", "-L"], check=False)
    return sum(1 for line in proc.stdout.splitlines() if "[OFFLOAD]" in line)


class Fastpath(Mechanism):
    spec: FastpathSpec

    def __init__(self, spec: FastpathSpec) -> None:
        super().__init__(spec)

    def table(self, ctx: MechanismContext) -> str:
        return f"{ctx.table}_fastpath"

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        ctx.files_dir.mkdir(parents=True, exist_ok=True)
        ft = f"inet {self.table(ctx)} ft"
        if ft not in ctx.flowtables:
            ctx.flowtables.append(ft)
        # The devices are the host's own interfaces: written by apply(), on the host.
        return [RenderedFile(ctx.files_dir / f"{ctx.name}.fastpath.nft", "nft")]

    def backends(self) -> set[str]:
        return {"nft"}

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        devices = interfaces(host)
        if len(devices) < 2:
            raise MechanismError(
                f"the fast path needs a forwarding host with two interfaces or more; "
                f"{host.name} has {devices}",
                where="mechanism fastpath, key on",
                fix='put it on the dut or a gateway (on = "dut")',
            )
        path = ctx.files_dir / f"{ctx.name}.fastpath.nft"
        path.write_text(render_flowtable(self.table(ctx), devices))
        proc = host.run(["nft", "-f", str(path)], check=False)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()
            if "flowtable" in detail and "No such file or directory" in detail:
                raise MechanismError(
                    "this kernel has no flowtables (CONFIG_NF_FLOW_TABLE is not set): the "
                    "fast path cannot run here",
                    where=str(path),
                    fix="run the fast-path variants on a kernel built with nf_flow_table "
                    "(Debian's stock kernels have it), or leave them out",
                )
            raise MechanismError(f"nft -f failed: {detail}", where=str(path))


KIND = MechanismKind(
    name="fastpath",
    model=FastpathSpec,
    runtime=Fastpath,
    # the flowtable
    known_tools=tuple(backend_tools("nft")),
    forwarding_only=True,
)
