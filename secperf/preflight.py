"""Everything that can be checked before a namespace exists or a packet flows.

`secperf doctor` and `secperf run` share one table of tools: which program, which
Debian package brings it, and who needs it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from secperf.engine import engine_path
from secperf.errors import SecperfError, ToolMissingError
from secperf.scenario.schema import (
    AclMechanism,
    ApplianceMechanism,
    CustomMechanism,
    NatMechanism,
    Scenario,
    SynproxyMechanism,
    VpnMechanism,
)


@dataclass(frozen=True)
class Tool:
    program: str
    package: str
    needed_for: str


BASE_TOOLS = (
    Tool("ip", "iproute2", "the testbed (namespaces, veth, addresses, routes)"),
    Tool("tc", "iproute2", "link rate shaping"),
    Tool("nft", "nftables", "ACLs and resetting the DUT between variants"),
    Tool("conntrack", "conntrack", "emptying the DUT's connection tracking before every test"),
)
BACKEND_TOOLS = {
    "nft": (Tool("nft", "nftables", "nft rule sets"),),
    "iptables-legacy": (
        Tool("iptables-legacy-restore", "iptables", "iptables-legacy rule sets"),
        Tool("ip6tables-legacy-restore", "iptables", "ip6tables-legacy rule sets"),
    ),
    "iptables-nft": (
        Tool("iptables-nft-restore", "iptables", "iptables-nft rule sets"),
        Tool("ip6tables-nft-restore", "iptables", "ip6tables-nft rule sets"),
    ),
    "ipset": (Tool("ipset", "ipset", "ACLs with layout = set on an iptables backend"),),
}
# Per VPN implementation (secperf.mechanisms.vpn). strongSwan's plugins come with it
# from scripts/setup.sh: kernel-libipsec (libcharon-extra-plugins), openssl and gcm
# (libstrongswan-standard-plugins), chapoly and curve25519 (libstrongswan-extra-plugins).
VPN_TOOLS = {
    "wireguard": (
        Tool("wireguard-go", "wireguard-go", "vpn wireguard (user-space WireGuard)"),
        Tool("wg", "wireguard-tools", "vpn wireguard (keys and configuration)"),
    ),
    "openvpn": (
        Tool("openvpn", "openvpn", "vpn openvpn"),
        Tool("openssl", "openssl", "vpn openvpn (a CA and certificates per run)"),
    ),
    "ipsec": (
        Tool("/usr/lib/ipsec/charon", "strongswan-charon", "vpn ipsec (the IKE daemon)"),
        Tool("swanctl", "strongswan-swanctl", "vpn ipsec (loading and starting the SAs)"),
        Tool("unshare", "util-linux", "vpn ipsec (a private /run per charon)"),
    ),
    "tinc": (Tool("tincd", "tinc", "vpn tinc"),),
    "vtun": (
        Tool("vtund", "vtun", "vpn vtun"),
        Tool("unshare", "util-linux", "vpn vtun (a private /run per vtund)"),
    ),
}
PEER_TOOLS = (
    Tool("iperf3", "iperf3", "bench/engine_vs_peers (stream peer)"),
    Tool("sockperf", "sockperf", "bench/engine_vs_peers (rr peer)"),
    Tool("ethtool", "ethtool", "recording offloads in run.json"),
)


def all_tools() -> list[Tool]:
    seen: dict[str, Tool] = {}
    for tool in (
        *BASE_TOOLS,
        *(t for ts in BACKEND_TOOLS.values() for t in ts),
        *(t for ts in VPN_TOOLS.values() for t in ts),
        *PEER_TOOLS,
    ):
        seen.setdefault(tool.program, tool)
    return list(seen.values())


def missing(tools: list[Tool]) -> list[Tool]:
    return [t for t in tools if shutil.which(t.program) is None]


def install_hint(tools: list[Tool]) -> str:
    packages = sorted({t.package for t in tools})
    return "apt-get install -y --no-install-recommends " + " ".join(packages)


OFFLOAD_TOOL = Tool("ethtool", "ethtool", 'testbed offloads = "off" (and recording offloads)')


def tools_for(scenario: Scenario) -> list[Tool]:
    tools = list(BASE_TOOLS)
    if scenario.testbed.offloads == "off":
        tools.append(OFFLOAD_TOOL)
    for variant in scenario.variants.values():
        for mech in variant.mechanisms:
            if isinstance(mech, AclMechanism):
                tools += BACKEND_TOOLS[mech.backend]
                if mech.layout == "set" and mech.backend != "nft":
                    tools += BACKEND_TOOLS["ipset"]
            elif isinstance(mech, NatMechanism):
                tools += BACKEND_TOOLS[mech.backend]
            elif isinstance(mech, CustomMechanism):
                tools += BACKEND_TOOLS["nft" if mech.format == "nft" else mech.backend]
            elif isinstance(mech, ApplianceMechanism):
                # filter + NAT in nft, the NFQUEUE rule in iptables-nft (nft has no `queue` here)
                tools += BACKEND_TOOLS["nft"] + BACKEND_TOOLS["iptables-nft"]
            elif isinstance(mech, SynproxyMechanism):
                tools += BACKEND_TOOLS["nft"]  # and sysctl (procps) for nf_conntrack_tcp_loose
            elif isinstance(mech, VpnMechanism):
                tools += VPN_TOOLS.get(mech.implementation, ())
    return tools


def check_custom_files(scenario: Scenario, family: int) -> None:
    """Parse every custom rule file with its own tool (a dry run that commits nothing)."""
    from secperf.mechanisms.custom import Custom

    for variant in scenario.variants.values():
        for mech in variant.mechanisms:
            if isinstance(mech, CustomMechanism):
                Custom(file=mech.file, format=mech.format, backend=mech.backend).check(family)


def preflight(scenario: Scenario, family: int) -> None:
    """Stop before any namespace exists if the run cannot work."""
    if os.geteuid() != 0:
        raise SecperfError(
            "secperf run needs root: it creates network namespaces and loads rule sets",
            fix="run it as root (sudo secperf run …); `secperf check` works without root",
        )
    gone = missing(tools_for(scenario))
    if gone:
        names = ", ".join(t.program for t in gone)
        raise ToolMissingError(f"missing tools: {names}", fix=install_hint(gone))
    engine_path()
    if any(
        isinstance(m, ApplianceMechanism) for v in scenario.variants.values() for m in v.mechanisms
    ):
        from secperf.mechanisms.appliance import nfq_path

        nfq_path()  # the appliance's daemon is built with the engine
    check_custom_files(scenario, family)
