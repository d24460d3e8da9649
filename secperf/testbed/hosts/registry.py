"""Every host backend, by the name a scenario gives it: one line a backend.

Adding a backend: its module in secperf/testbed/hosts/ with a `KIND` (a
`protocol.BackendKind`: its name, factory and what it is, as data) and a line here
(docs/architecture.md, "Adding a host backend"). Everything else asks `BACKENDS`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from secperf.errors import TestbedError
from secperf.testbed.hosts import external, netns, ssh, vm
from secperf.testbed.hosts.protocol import BackendKind


class BackendRegistry:
    """The backends by name (and alias); iteration gives each once."""

    def __init__(self, kinds: Sequence[BackendKind]) -> None:
        self._kinds = {k.name: k for k in kinds}
        self._names = {alias: k.name for k in kinds for alias in (k.name, *k.aliases)}
        self.default = kinds[0]  # what a host is when nothing says otherwise

    def __iter__(self) -> Iterator[BackendKind]:
        return iter(self._kinds.values())

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def get(self, name: str) -> BackendKind:
        try:
            return self._kinds[self._names[name]]
        except KeyError:
            raise TestbedError(
                f"no host backend {name!r}", fix=f"use one of {', '.join(self._kinds)}"
            ) from None

    def names(self, *, inventory: bool = False, variant: bool = False) -> list[str]:
        """The backends' names (those a host of the inventory, or a variant, may give)."""
        return [
            k.name for k in self if (not inventory or k.inventory) and (not variant or k.variant)
        ]

    def canonical(self, name: str, *, inventory: bool = False, variant: bool = False) -> str:
        """`name` (or its alias) as the backend's own name, for a scenario's key; a
        ValueError (pydantic's) names the ones that key takes."""
        allowed = self.names(inventory=inventory, variant=variant)
        resolved = self._names.get(name)
        if resolved not in allowed:
            quoted = " | ".join(f'"{n}"' for n in allowed)
            raise ValueError(f"backend = {name!r} is not a host backend here: use {quoted}")
        return resolved


BACKENDS = BackendRegistry([netns.KIND, vm.KIND, ssh.KIND, external.KIND])
