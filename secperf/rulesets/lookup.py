"""What rewriting a rule file asks of the address map (owner: the address map).

The rewriters (nft_rewrite, ipt_rewrite) depend on this protocol, not on addrmap, so
that addrmap can offer them under its own name without an import cycle.
"""

from __future__ import annotations

from ipaddress import ip_address, ip_network
from typing import Protocol


class KnownAddresses(Protocol):
    def known_address(self, orig: str, obj: str) -> str:
        """The mapped form of a named address; MechanismError naming `obj` if unknown."""
        ...

    def known_network(self, orig: str, obj: str) -> str:
        """The mapped form of a named network ("10.1.0.0/16" -> "198.19.128.0/27")."""
        ...


def is_address(value: str) -> bool:
    try:
        ip_address(value)
    except ValueError:
        return False
    return True


def is_network(value: str) -> bool:
    """A prefix written with its length ("10.1.0.0/16"), not a bare address."""
    if "/" not in value:
        return False
    try:
        ip_network(value, strict=False)
    except ValueError:
        return False
    return True
