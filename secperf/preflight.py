"""Everything that can be checked before a namespace exists or a packet flows.

`secperf doctor` and `secperf run` share one table of tools: which program, which
Debian package brings it, and who needs it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from pathlib import Path

from secperf.engine import engine_path
from secperf.errors import MechanismError, ScenarioError, SecperfError, ToolMissingError
from secperf.scenario.graph import build_topology
from secperf.scenario.loader import _LineMap
from secperf.scenario.schema import (
    AclMechanism,
    ApplianceMechanism,
    CustomMechanism,
    FastpathMechanism,
    IdsMechanism,
    IpsMechanism,
    NatMechanism,
    Scenario,
    SynproxyMechanism,
    VpnMechanism,
)
from secperf.tools import Tool
from secperf.workloads.base import CheckContext
from secperf.workloads.registry import WORKLOADS

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
        FWSNORT_TOOL,
        *(t for ts in VPN_TOOLS.values() for t in ts),
        *PEER_TOOLS,
        *VM_TOOLS,
    ):
        seen.setdefault(tool.program, tool)
    return list(seen.values())


def missing(tools: list[Tool]) -> list[Tool]:
    return [t for t in tools if shutil.which(t.program) is None]


def install_hint(tools: list[Tool]) -> str:
    packages = sorted({t.package for t in tools})
    return "apt-get install -y --no-install-recommends " + " ".join(packages)


FWSNORT_TOOL = Tool("fwsnort", "fwsnort", 'mechanism ips with engine = "fwsnort"')
OFFLOAD_TOOL = Tool("ethtool", "ethtool", 'testbed offloads = "off" (and recording offloads)')


# A variant with backend = "vm": qemu runs the DUT; apt-get download and dpkg-deb
# build its image (secperf.testbed.vmimage) without installing anything.
VM_TOOLS = (
    Tool("qemu-system-x86_64", "qemu-system-x86", 'the DUT as a VM (backend = "vm")'),
    Tool("apt-get", "apt", "downloading the VM image's Debian packages"),
    Tool("dpkg-deb", "dpkg", "unpacking the VM image's Debian packages"),
)


def tools_for(scenario: Scenario) -> list[Tool]:
    tools = list(BASE_TOOLS)
    if scenario.testbed.offloads == "off":
        tools.append(OFFLOAD_TOOL)
    if any(v.backend == "vm" for v in scenario.variants.values()):
        tools += VM_TOOLS
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
            elif isinstance(mech, IpsMechanism):
                tools += BACKEND_TOOLS["iptables-nft"]
                if mech.engine == "fwsnort":
                    tools.append(FWSNORT_TOOL)
            elif isinstance(mech, IdsMechanism):
                tools += BACKEND_TOOLS["nft"]  # the mirror: nft netdev dup
            elif isinstance(mech, FastpathMechanism):
                tools += BACKEND_TOOLS["nft"]  # the flowtable
            elif isinstance(mech, VpnMechanism):
                tools += VPN_TOOLS.get(mech.implementation, ())
    for workload in scenario.workloads:
        tools += WORKLOADS.of(workload).tools(workload)
    return tools


def check_custom_files(scenario: Scenario, family: int) -> None:
    """Parse every custom rule file with its own tool (a dry run that commits nothing)."""
    from secperf.mechanisms.custom import Custom

    for variant in scenario.variants.values():
        for mech in variant.mechanisms:
            if isinstance(mech, CustomMechanism):
                Custom(file=mech.file, format=mech.format, backend=mech.backend).check(family)


def custom_files(scenario: Scenario) -> list[CustomMechanism]:
    return [
        m
        for v in scenario.variants.values()
        for m in v.mechanisms
        if isinstance(m, CustomMechanism)
    ]


# iptables' own verdicts, and the target extensions of Debian's xtables (iptables 1.8).
IPTABLES_TARGETS = frozenset(
    [
        "ACCEPT",
        "DROP",
        "RETURN",
        "QUEUE",
        "AUDIT",
        "CHECKSUM",
        "CLASSIFY",
        "CLUSTERIP",
        "CONNMARK",
        "CONNSECMARK",
        "CT",
        "DNAT",
        "DNPT",
        "DSCP",
        "ECN",
        "HL",
        "HMARK",
        "IDLETIMER",
        "LED",
        "LOG",
        "MARK",
        "MASQUERADE",
        "NETMAP",
        "NFLOG",
        "NFQUEUE",
        "NOTRACK",
        "RATEEST",
        "REDIRECT",
        "REJECT",
        "SECMARK",
        "SET",
        "SNAT",
        "SNPT",
        "SYNPROXY",
        "TCPMSS",
        "TCPOPTSTRIP",
        "TEE",
        "TOS",
        "TPROXY",
        "TRACE",
        "TTL",
        "ULOG",
    ]
)
XTABLES_DIRS = (Path("/usr/lib/x86_64-linux-gnu/xtables"), Path("/usr/lib/xtables"))
_TARGET_OPT = re.compile(r"(?:^|\s)(?:-j|--jump|-g|--goto)\s+(\S+)")
_CHAIN_OPT = re.compile(r"^(?:-A|--append|-I|--insert|-R|--replace)\s+(\S+)")


def _installed_targets() -> set[str]:
    names: set[str] = set()
    for d in XTABLES_DIRS:
        if d.is_dir():
            for f in d.glob("lib*_*.so"):
                name = f.stem.split("_", 1)[1]
                if name.isupper():
                    names.add(name)
    return names


def check_iptables_targets(path: Path) -> None:
    """Every `-j`/`-g` target of an iptables-restore file is a chain the file declares
    in that table or a target iptables knows. `iptables-restore --test` does not check
    this (a misspelt `-j DORP` passes as a jump to a chain), and the load fails only
    on the DUT, after the testbed is built."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise MechanismError(
            f"cannot read the rule file: {exc.strerror}", where=str(path)
        ) from None
    known = IPTABLES_TARGETS | _installed_targets()
    chains: dict[str, set[str]] = {}
    table = "filter"
    uses: list[tuple[int, str, str, str]] = []  # line, table, chain, target
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("*"):
            table = line[1:].strip()
            chains.setdefault(table, set())
        elif line.startswith(":"):
            chains.setdefault(table, set()).add(line[1:].split()[0])
        elif m := re.match(r"^(?:-N|--new-chain)\s+(\S+)", line):
            chains.setdefault(table, set()).add(m.group(1))
        elif (c := _CHAIN_OPT.match(line)) and (t := _TARGET_OPT.search(line)):
            uses.append((number, table, c.group(1), t.group(1)))
    for number, tbl, chain, target in uses:
        if target in known or target in chains.get(tbl, set()):
            continue
        close = [k for k in sorted(known | chains.get(tbl, set())) if _near(target, k)]
        hint = (
            f"did you mean {close[0]}?"
            if close
            else (
                f"declare the chain (`:{target} - [0:0]` or `-N {target}`) in *{tbl}, "
                "or use a target such as ACCEPT, DROP, REJECT or RETURN"
            )
        )
        raise MechanismError(
            f"-A {chain} jumps to {target!r}, which is neither a chain of table {tbl} "
            "in this file nor an iptables target (iptables-restore --test does not catch this)",
            where=f"{path}:{number}",
            fix=hint,
        )


def _near(a: str, b: str) -> bool:
    import difflib

    return difflib.SequenceMatcher(None, a.upper(), b.upper()).ratio() >= 0.6


def check_static(scenario: Scenario) -> None:
    """What `check` and `run` can refuse without root: rule-file targets, socket buffers,
    VPN tunnels this machine or this runner cannot run."""
    for mech in custom_files(scenario):
        if mech.format == "iptables":
            check_iptables_targets(mech.file)
    check_workloads(scenario)
    check_vpn(scenario)


def check_workloads(scenario: Scenario) -> None:
    """Each workload's own static check (its kind's `preflight`): what the file alone
    cannot say, against the scenario's graph or this machine."""
    source = scenario.source
    lines = _LineMap(source.read_text()) if source is not None and source.is_file() else None
    topology = functools.cache(lambda: build_topology(scenario))

    def where(path: tuple[str | int, ...]) -> str:
        line = lines.line_of(path) if lines is not None else None
        file = str(source or "scenario")
        return f"{file}:{line}" if line else file

    for i, workload in enumerate(scenario.workloads):
        check = WORKLOADS.of(workload).preflight
        if check is not None:
            check(workload, CheckContext(i, source, topology, where))


def check_vpn(scenario: Scenario) -> None:
    """IPsec transport mode without the kernel's ESP transform (kernel-libipsec carries
    tunnel mode only), and any vpn mechanism while the runner cannot place tunnel ends:
    both refused now rather than after the testbed is built."""
    from secperf.mechanisms.vpn.ipsec import kernel_has_esp

    where = str(scenario.source or "scenario")
    for name, variant in scenario.variants.items():
        for i, mech in enumerate(variant.mechanisms):
            if not isinstance(mech, VpnMechanism):
                continue
            key = f"variants.{name}.mechanisms[{i}]"
            if mech.implementation == "ipsec" and mech.mode == "transport" and not kernel_has_esp():
                raise ScenarioError(
                    f"{key}: ipsec transport mode needs the kernel's ESP transform, which this "
                    "kernel lacks; kernel-libipsec, the user-space fallback, carries tunnel "
                    "mode only",
                    where=where,
                    fix='use mode = "tunnel" here, or a kernel with ESP (CONFIG_INET_ESP)',
                )


def preflight(scenario: Scenario, family: int) -> None:
    """Stop before any namespace exists if the run cannot work."""
    if os.geteuid() != 0:
        raise SecperfError(
            "secperf run needs root: it creates network namespaces and loads rule sets",
            fix="run it as root (sudo secperf run …); `secperf check` works without root",
        )
    check_static(scenario)
    gone = missing(tools_for(scenario))
    if gone:
        names = ", ".join(t.program for t in gone)
        raise ToolMissingError(f"missing tools: {names}", fix=install_hint(gone))
    engine_path()
    if any(
        isinstance(m, ApplianceMechanism | IpsMechanism | IdsMechanism)
        for v in scenario.variants.values()
        for m in v.mechanisms
    ):
        from secperf.mechanisms.appliance import nfq_path

        nfq_path()  # the appliance's daemon is built with the engine
    check_custom_files(scenario, family)
