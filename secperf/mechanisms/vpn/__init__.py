"""The `vpn` mechanism: a tunnel between two hosts, one module per implementation
behind one interface (`Vpn`).

    vpn = make("openvpn", cipher="aes-256-gcm", compression="lz4")
    vpn.render(a, b, files_dir, tunnel_name(prefix, 0))   # keys, certificates, configs
    vpn.start(a, b)                                       # daemons up, a ping crossed it
    ... measure; device_counters(host, vpn.devices()[end]); memory(vpn)
    vpn.stop()                                            # daemons, devices, routes gone

The scenario entry is `spec.VpnSpec`; `tunnel.Tunnel` is the mechanism the runner
applies, which places the ends (`TunnelEnd`: host-to-host on the client and server,
or site-to-site on a gateway pair) on the testbed graph; `tunnel.KIND` declares the
kind. docs/studies/003.md says what each implementation runs and
what this machine cannot.
"""

from __future__ import annotations

from secperf.mechanisms.vpn import ipsec, openvpn, pptp, tinc, vtun, wireguard
from secperf.mechanisms.vpn.base import (
    TUNNEL_NET4,
    TUNNEL_NET6,
    TunnelEnd,
    Vpn,
    daemon_cpu,
    device_counters,
    memory,
    tunnel_addresses,
    tunnel_name,
)
from secperf.mechanisms.vpn.ipsec import Ipsec
from secperf.mechanisms.vpn.openvpn import OpenVpn
from secperf.mechanisms.vpn.spec import VpnSpec
from secperf.mechanisms.vpn.tinc import Tinc
from secperf.mechanisms.vpn.tunnel import IMPLEMENTATIONS, KIND, Tunnel, from_spec, make
from secperf.mechanisms.vpn.vtun import Vtun
from secperf.mechanisms.vpn.wireguard import Wireguard
from secperf.testbed.procfs import cpu_seconds, rss_bytes

__all__ = [
    "IMPLEMENTATIONS",
    "KIND",
    "TUNNEL_NET4",
    "TUNNEL_NET6",
    "Ipsec",
    "OpenVpn",
    "Tinc",
    "Tunnel",
    "TunnelEnd",
    "Vpn",
    "VpnSpec",
    "Vtun",
    "Wireguard",
    "cpu_seconds",
    "daemon_cpu",
    "device_counters",
    "from_spec",
    "ipsec",
    "make",
    "memory",
    "openvpn",
    "pptp",
    "rss_bytes",
    "tinc",
    "tunnel_addresses",
    "tunnel_name",
    "vtun",
    "wireguard",
]
