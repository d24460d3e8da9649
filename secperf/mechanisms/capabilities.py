"""What a workload may ask of a mechanism beyond what every mechanism does: small
protocols a kind's runtime implements, and the consumer checks (`isinstance`, each
protocol is runtime-checkable), instead of methods every mechanism carries.

- `SocksEndpoint` (proxy): the address clients must name as their SOCKS proxy (mix).
- `TrustedCa` (tls_inspect): a CA TLS clients must trust to talk through it (http).
- `Detecting` (ips, ids): what detects attacks, and its counters (attack_mix).

Adding a capability: a protocol here, its methods on the kinds that have it, and an
`isinstance` check where it is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from secperf.mechanisms.base import MechanismContext
from secperf.testbed.hosts import Host


@dataclass(frozen=True)
class Detector:
    """A mechanism that matches traffic against signatures, as an attack mix sees it."""

    label: str  # the record's `detector`, e.g. "ips-nfq", "ids"
    blocks: bool  # inline: a packet that matches a drop rule does not pass


# A detector's counters at one instant: matches per sid ("by_sid"), "drops", "packets", ...
Counts = dict[str, Any]


@runtime_checkable
class SocksEndpoint(Protocol):
    def socks_endpoint(self, ctx: MechanismContext) -> str | None:
        """ADDR:PORT that clients must name as their SOCKS proxy, or None when the
        mechanism is transparent to them."""
        ...


@runtime_checkable
class TrustedCa(Protocol):
    def trusted_ca(self, ctx: MechanismContext) -> Path | None:
        """A CA (PEM) that TLS clients must trust to talk through this mechanism (a
        TLS-inspecting proxy's own CA), or None when it signs nothing."""
        ...


@runtime_checkable
class Detecting(Protocol):
    def detector(self) -> Detector | None:
        """What detects attacks in this mechanism, or None when it detects nothing."""
        ...

    def detection_counts(self, hosts: Sequence[Host], ctx: MechanismContext) -> Counts | None:
        """The detector's counters now (cumulative), read on its `hosts` (those `on`
        names); None when it cannot say (not running)."""
        ...
