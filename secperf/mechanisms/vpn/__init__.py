"""VPN tunnels: one module per implementation behind one interface (`Vpn`).

    vpn = make("openvpn", cipher="aes-256-gcm", compression="lz4")
    vpn.render(a, b, files_dir, tunnel_name(prefix, 0))   # keys, certificates, configs
    vpn.start(a, b)                                       # daemons up, a ping crossed it
    ... measure; device_counters(host, vpn.devices()[end]); memory(vpn)
    vpn.stop()                                            # daemons, devices, routes gone

The ends (`TunnelEnd`) say where each daemon runs and what it routes; the
runner's placement (host-to-host on the client and server, or site-to-site on a
gateway pair) builds them from the testbed graph. docs/methodology.md ("VPN
tunnels") says what each implementation runs and what this machine cannot.
"""

from __future__ import annotations

from typing import Any

from secperf.errors import MechanismError
from secperf.mechanisms.vpn import pptp
from secperf.mechanisms.vpn.base import (
    TUNNEL_NET4,
    TUNNEL_NET6,
    TunnelEnd,
    Vpn,
    device_counters,
    memory,
    rss_bytes,
    tunnel_addresses,
    tunnel_name,
)
from secperf.mechanisms.vpn.ipsec import Ipsec
from secperf.mechanisms.vpn.openvpn import OpenVpn
from secperf.mechanisms.vpn.tinc import Tinc
from secperf.mechanisms.vpn.vtun import Vtun
from secperf.mechanisms.vpn.wireguard import Wireguard
from secperf.scenario.schema import VpnMechanism

__all__ = [
    "IMPLEMENTATIONS",
    "TUNNEL_NET4",
    "TUNNEL_NET6",
    "Ipsec",
    "OpenVpn",
    "Tinc",
    "TunnelEnd",
    "Vpn",
    "Vtun",
    "Wireguard",
    "device_counters",
    "from_schema",
    "make",
    "memory",
    "rss_bytes",
    "tunnel_addresses",
    "tunnel_name",
]

IMPLEMENTATIONS = ("wireguard", "openvpn", "ipsec", "tinc", "vtun")


def make(implementation: str, **params: Any) -> Vpn:
    """The implementation with its parameters (None values take its defaults)."""
    params = {k: v for k, v in params.items() if v is not None}
    if implementation == "pptp":
        raise pptp.refuse()
    if implementation == "wireguard":
        return Wireguard(**params)
    if implementation == "openvpn":
        return OpenVpn(**params)
    if implementation == "ipsec":
        return Ipsec(**params)
    if implementation == "tinc":
        return Tinc(**params)
    if implementation == "vtun":
        return Vtun(**params)
    raise MechanismError(
        f"vpn implementation {implementation!r} is unknown",
        fix=f"use one of {', '.join(IMPLEMENTATIONS)}",
    )


def from_schema(spec: VpnMechanism) -> Vpn:
    """The Vpn for a scenario's `{ kind = "vpn", ... }` entry."""
    return make(spec.implementation, **spec.implementation_params())
