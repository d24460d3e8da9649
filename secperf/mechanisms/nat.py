"""Network address translation on the DUT (document 004's none / static / pool / PAT).

The public side is 198.18.5.0/24 (2001:2:0:5::/64): the server's default route
points at the DUT, so replies to a translated address come back to it without
the DUT having to own (and answer ARP for) the address.

- `static`: each inside host gets its own public address, both ways (snat + dnat),
  so the outside can also reach the inside host at its public address.
- `pool`: sources are translated to a range of `pool_size` public addresses; the
  kernel keeps one mapping per inside source address.
- `pat`: masquerade: every inside source becomes the DUT's outside address, told
  apart by port.
"""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field

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
from secperf.testbed.hosts import Host
from secperf.tools import Tool

PUBLIC_V4 = ipaddress.ip_network("198.18.5.0/24")
PUBLIC_V6 = ipaddress.ip_network("2001:2:0:5::/64")
STATIC_FIRST = 10  # public address of the i-th inside host: .10 + i
POOL_FIRST = 100  # pool: .100 … .100 + pool_size - 1

Mode = Literal["static", "pool", "pat"]
Backend = Literal["nft", "iptables-legacy", "iptables-nft"]


class NatSpec(MechanismSpec):
    """Address translation on the DUT: static 1:1, a pool, or PAT (masquerade)."""

    kind: Literal["nat"] = "nat"
    mode: Mode
    """Static: each inside host gets its own public address both ways (snat + dnat); pool: sources
    translated into a range; pat: masquerade to the DUT's outside address.
    """
    backend: Backend = "nft"
    """Which tool installs the rules."""
    pool_size: int = Field(default=16, ge=1, le=200)
    """Addresses in the pool (`mode = "pool"`)."""


def public_address(offset: int, family: int) -> str:
    net = PUBLIC_V4 if family == 4 else PUBLIC_V6
    return str(net.network_address + offset)


def static_map(plan: TrafficPlan) -> list[tuple[str, str]]:
    """(inside, public) for every inside host: the client and its emulated hosts."""
    return [
        (h, public_address(STATIC_FIRST + i, plan.family)) for i, h in enumerate(plan.client_hosts)
    ]


def pool_range(plan: TrafficPlan, size: int) -> tuple[str, str]:
    return (
        public_address(POOL_FIRST, plan.family),
        public_address(POOL_FIRST + size - 1, plan.family),
    )


class Nat(Mechanism):
    spec: NatSpec

    def __init__(self, spec: NatSpec) -> None:
        super().__init__(spec)

    def backends(self) -> set[str]:
        return {self.spec.backend}

    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        ctx.files_dir.mkdir(parents=True, exist_ok=True)
        if self.spec.backend == "nft":
            path = ctx.files_dir / f"{ctx.name}.nft"
            path.write_text(render_nft(self.spec, ctx.plan, f"{ctx.table}_nat"))
            return [RenderedFile(path, "nft")]
        path = ctx.files_dir / f"{ctx.name}.iptables"
        path.write_text(render_iptables(self.spec, ctx.plan))
        return [RenderedFile(path, "iptables-restore")]

    def apply(self, host: Host, ctx: MechanismContext) -> None:
        apply_files(host, ctx.rendered, self.spec.backend, ctx.plan.family)

    def translated_sources(self, ctx: MechanismContext) -> list[str]:
        """static and pool translate into the public side; PAT to the DUT's outside
        address, which the control connection is translated to as well."""
        if self.spec.mode == "pat":
            return []
        return [str(PUBLIC_V4 if ctx.plan.family == 4 else PUBLIC_V6)]

    def translated_source(self, plan: TrafficPlan, dut_outside: str) -> set[str]:
        """The source addresses the server may see for the client's traffic."""
        if self.spec.mode == "static":
            return {dict(static_map(plan))[plan.client_addr]}
        if self.spec.mode == "pool":
            lo, hi = pool_range(plan, self.spec.pool_size)
            first, last = ipaddress.ip_address(lo), ipaddress.ip_address(hi)
            return {str(first + i) for i in range(int(last) - int(first) + 1)}
        return {dut_outside}


def render_nft(nat: NatSpec, plan: TrafficPlan, table: str) -> str:
    ip = "ip" if plan.family == 4 else "ip6"
    fam = "ip" if plan.family == 4 else "ip6"
    post: list[str] = []
    pre: list[str] = []
    if nat.mode == "static":
        pairs = static_map(plan)
        post.append(
            f"snat {fam} to {ip} saddr map {{ "
            + ", ".join(f"{inside} : {public}" for inside, public in pairs)
            + " }"
        )
        pre.append(
            f"dnat {fam} to {ip} daddr map {{ "
            + ", ".join(f"{public} : {inside}" for inside, public in pairs)
            + " }"
        )
    elif nat.mode == "pool":
        lo, hi = pool_range(plan, nat.pool_size)
        post.append(f"{ip} saddr {plan.client_net} snat {fam} to {lo}-{hi}")
    else:
        post.append(f"{ip} saddr {plan.client_net} masquerade")
    lines = [
        f"# secperf nat family {plan.family}: mode={nat.mode} pool_size={nat.pool_size}",
        f"table inet {table} {{",
        "  chain prerouting {",
        "    type nat hook prerouting priority dstnat; policy accept;",
        *(f"    {r}" for r in pre),
        "  }",
        "  chain postrouting {",
        "    type nat hook postrouting priority srcnat; policy accept;",
        *(f"    {r}" for r in post),
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def render_iptables(nat: NatSpec, plan: TrafficPlan) -> str:
    rules: list[str] = []
    if nat.mode == "static":
        for inside, public in static_map(plan):
            rules.append(f"-A POSTROUTING -s {inside} -j SNAT --to-source {public}")
            rules.append(f"-A PREROUTING -d {public} -j DNAT --to-destination {inside}")
    elif nat.mode == "pool":
        lo, hi = pool_range(plan, nat.pool_size)
        rules.append(f"-A POSTROUTING -s {plan.client_net} -j SNAT --to-source {lo}-{hi}")
    else:
        rules.append(f"-A POSTROUTING -s {plan.client_net} -j MASQUERADE")
    lines = [
        f"# secperf nat family {plan.family}: mode={nat.mode} pool_size={nat.pool_size}",
        "*nat",
        ":PREROUTING ACCEPT [0:0]",
        ":INPUT ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":POSTROUTING ACCEPT [0:0]",
        *rules,
        "COMMIT",
    ]
    return "\n".join(lines) + "\n"


def tools(spec: NatSpec) -> list[Tool]:
    return backend_tools(spec.backend)


KIND = MechanismKind(
    name="nat",
    model=NatSpec,
    runtime=Nat,
    tools=tools,
    known_tools=tuple(backend_tools("nft", "iptables-legacy", "iptables-nft")),
    forwarding_only=True,
)
