"""The client addresses a workload's connections come from, when it holds more than one
address's ports allow.

One client address holds ~60 k connections to the server's one port (the testbed's
client ports are 1024-65000, less a margin for other sockets), so a kind that holds
more spreads them round-robin over `sources` addresses of the client: its own, then its
emulated hosts' (`[testbed] emulated_hosts`). "auto" takes as many as the count needs,
and more where the client has them (AUTO_SPREAD).
A count that needs more addresses than the testbed gives is refused before any
traffic: the engine would stop at its source ports, and a lower bound would stand in
for the path's limit.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from secperf.errors import ScenarioError
from secperf.schema.fields import StrictModel
from secperf.schema.sections import Testbed as TestbedSection
from secperf.schema.sections import TopologySection
from secperf.workloads.base import MeasureContext, Refused

PER_SOURCE = 60_000
MAX_SOURCES = 4096
# "auto" spreads the connections wider where the testbed has the addresses: the
# kernel's search for a free source port slows as an address's range fills (60,000
# connections from one address opened at 2,000-2,500/s, from five at 37,000-39,000/s,
# 19,000 from one at 12,000-30,000/s: bench/runs/connections_open_rate-2026-11-29.json),
# so each address carries at most this many when there are enough.
AUTO_SPREAD = 20_000


class ManySources(StrictModel):
    """A workload that may hold more connections than one client address can: its
    `held()` most at once, the key that asks for them `held_key`."""

    # its heading in the generated docs/scenario-format.md
    part_title: ClassVar[str] = "Connections from many client addresses"

    held_key: ClassVar[str]

    # Client addresses the connections come from, round-robin: "auto" as many as the
    # count needs (one per PER_SOURCE), or a number; each beyond the first is an
    # emulated host of the client ([testbed] emulated_hosts).
    sources: Literal["auto"] | int = Field(default="auto")
    """1 … 4096 client addresses the connections come from, round-robin: the client's own, then its
    emulated hosts' (`[testbed] emulated_hosts`); `"auto"`: as `connections`' (at least one per
    60,000 connections of the largest `parallel`, up to one per 20,000 where the client has
    them); asking more than the testbed gives is refused by `secperf check`.
    """

    @field_validator("sources")
    @classmethod
    def _sources_in_range(cls, value: Literal["auto"] | int) -> Literal["auto"] | int:
        if value != "auto" and not 1 <= value <= MAX_SOURCES:
            raise ValueError(f'sources must be "auto" or 1 to {MAX_SOURCES} addresses, not {value}')
        return value

    def held(self) -> int:
        """The most connections the workload holds at once."""
        raise NotImplementedError

    def source_count(self) -> int:
        """How many client addresses the connections are spread over."""
        if self.sources == "auto":
            return max(1, math.ceil(self.held() / PER_SOURCE))
        return self.sources


def enough_sources(
    spec: ManySources, testbed: TestbedSection, topology: TopologySection | None
) -> Refused | None:
    """Refused when the workload needs more client addresses than the testbed gives."""
    need = spec.source_count()
    have = 1 if topology is not None else 1 + testbed.emulated_hosts
    if need <= have:
        return None
    key = "sources" if spec.sources != "auto" else spec.held_key
    return Refused(
        f"needs {need} client addresses ({spec.held()} connections, ~{PER_SOURCE:,} "
        f"per address to the server's one port) but the testbed gives the client {have}: "
        f"set [testbed] emulated_hosts = {need - 1} (at most 200), or ask fewer",
        key=key,
    )


def source_addresses(ctx: MeasureContext, spec: ManySources) -> list[str]:
    """The client's addresses the connections come from: its own, then its emulated
    hosts', as many as the workload needs ("auto": up to one per AUTO_SPREAD
    connections where the client has them)."""
    need = spec.source_count()
    mine = [
        ctx.topology.primary_address(ctx.client, ctx.family),
        *ctx.topology.emulated_addresses(ctx.client, ctx.family),
    ]
    if need > len(mine):
        raise ScenarioError(
            f"the workload needs {need} client addresses; host {ctx.client} has {len(mine)}",
            where="[[workloads]] sources",
            fix=f"set [testbed] emulated_hosts = {need - 1}, or ask fewer connections",
        )
    if spec.sources == "auto":
        need = max(need, min(len(mine), math.ceil(spec.held() / AUTO_SPREAD)))
    return mine[:need]


def sources_spec(ctx: MeasureContext, spec: ManySources) -> dict[str, list[str]]:
    """The engine spec's `sources`, left out for one address (the kernel picks it)."""
    sources = source_addresses(ctx, spec)
    return {"sources": sources} if len(sources) > 1 else {}


def peers_spec(ctx: MeasureContext) -> dict[str, list[str]]:
    """The engine spec's `peers`: what the variant's mechanisms (a NAT) make of the
    client's addresses, which the engine server must serve as well (it answers only
    the control connection's peer and the addresses a spec declares); left out when
    none."""
    peers = sorted({p for mech, mctx in ctx.mechanisms for p in mech.translated_sources(mctx)})
    return {"peers": peers} if peers else {}
