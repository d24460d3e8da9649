"""Everything that can be checked before a namespace exists or a packet flows.

`secperf doctor` and `secperf run` share one table of tools: which program, which
Debian package brings it, and who needs it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from secperf.errors import ScenarioError, SecperfError, ToolMissingError
from secperf.mechanisms.base import CheckContext, MechanismKind, MechanismSpec
from secperf.mechanisms.registry import MECHANISMS
from secperf.scenario.schema import (
    MixWorkload,
    Scenario,
)
from secperf.scenario.units import human_size
from secperf.tools import Tool, engine_path

BASE_TOOLS = (
    Tool("ip", "iproute2", "the testbed (namespaces, veth, addresses, routes)"),
    Tool("tc", "iproute2", "link rate shaping"),
    Tool("nft", "nftables", "ACLs and resetting the DUT between variants"),
    Tool("conntrack", "conntrack", "emptying the DUT's connection tracking before every test"),
)
PEER_TOOLS = (
    Tool("iperf3", "iperf3", "bench/engine_vs_peers (stream peer)"),
    Tool("sockperf", "sockperf", "bench/engine_vs_peers (rr peer)"),
    Tool("ethtool", "ethtool", "recording offloads in run.json"),
)


def all_tools() -> list[Tool]:
    seen: dict[str, Tool] = {}
    for tool in (
        *BASE_TOOLS,
        *(t for kind in MECHANISMS for t in kind.known_tools),
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


OFFLOAD_TOOL = Tool("ethtool", "ethtool", 'testbed offloads = "off" (and recording offloads)')


# A variant with backend = "vm": qemu runs the DUT; apt-get download and dpkg-deb
# build its image (secperf.testbed.hosts.vmimage) without installing anything.
VM_TOOLS = (
    Tool("qemu-system-x86_64", "qemu-system-x86", 'the DUT as a VM (backend = "vm")'),
    Tool("apt-get", "apt", "downloading the VM image's Debian packages"),
    Tool("dpkg-deb", "dpkg", "unpacking the VM image's Debian packages"),
)


def mechanism_entries(
    scenario: Scenario,
) -> Iterator[tuple[MechanismKind[Any], MechanismSpec, CheckContext]]:
    """Every mechanism entry of every variant: its kind, itself, and where it stands."""
    family = 6 if scenario.testbed.family == "ipv6" else 4
    where = str(scenario.source or "scenario")
    for name, variant in scenario.variants.items():
        for i, mech in enumerate(variant.mechanisms):
            key = f"variants.{name}.mechanisms[{i}]"
            yield MECHANISMS.of(mech), mech, CheckContext(key, where, family)


def tools_for(scenario: Scenario) -> list[Tool]:
    tools = list(BASE_TOOLS)
    if scenario.testbed.offloads == "off":
        tools.append(OFFLOAD_TOOL)
    if any(v.backend == "vm" for v in scenario.variants.values()):
        tools += VM_TOOLS
    for kind, mech, _ctx in mechanism_entries(scenario):
        tools += kind.tools_for(mech)
    return tools


def check_kernel(scenario: Scenario) -> None:
    """The mechanisms' checks that ask the kernel (a dry run that commits nothing, as
    `nft -c` does): they need root."""
    for kind, mech, ctx in mechanism_entries(scenario):
        if kind.kernel_check is not None:
            kind.kernel_check(mech, ctx)


def kernel_check_notes(scenario: Scenario) -> list[str]:
    """What check_kernel would check in this scenario, as said when it cannot (no root)."""
    notes = [k.kernel_check_note for k, _m, _c in mechanism_entries(scenario) if k.kernel_check]
    return list(dict.fromkeys(notes))


def check_static(scenario: Scenario) -> None:
    """What `check` and `run` can refuse without root: each mechanism kind's own checks
    (a rule file's targets, a tunnel this machine cannot run), socket buffers, mixes."""
    for kind, mech, ctx in mechanism_entries(scenario):
        if kind.check is not None:
            kind.check(mech, ctx)
    check_socket_buffers(scenario)
    check_mix(scenario)


def check_mix(scenario: Scenario) -> None:
    """A mix workload's hit table and HTTP shares need one value per server host of
    the scenario's graph (or a single value for all), and hit lists keyed by zone
    need a list for every zone with clients: refused at check time, naming the key."""
    from secperf.scenario.graph import build_topology
    from secperf.scenario.loader import _LineMap

    mixes = [(i, w) for i, w in enumerate(scenario.workloads) if isinstance(w, MixWorkload)]
    if not mixes:
        return
    topo = build_topology(scenario)
    servers = list(topo.hosts_with(role="server"))
    zones = sorted({str(topo.host(c).zone) for c in topo.hosts_with(role="client")})
    source = scenario.source
    lines = _LineMap(source.read_text()) if source is not None and source.is_file() else None

    def where(path: tuple[str | int, ...]) -> str:
        line = lines.line_of(path) if lines is not None else None
        file = str(source or "scenario")
        return f"{file}:{line}" if line else file

    def refuse(path: tuple[str | int, ...], what: str, fix: str) -> None:
        key = "workloads[{}].{}".format(path[1], ".".join(str(p) for p in path[2:]))
        raise ScenarioError(f"{key}: {what}", where=where(path), fix=fix)

    order = ", ".join(servers)
    for i, w in mixes:
        lists: list[tuple[tuple[str | int, ...], list[float]]] = []
        if isinstance(w.hits, dict):
            for zone in zones:
                if zone not in w.hits:
                    refuse(
                        ("workloads", i, "hits"),
                        f"no hit list for zone {zone!r}, which has client hosts",
                        f"add {zone} = [one weight per server host: {order}]",
                    )
            for zone, values in w.hits.items():
                if zone not in zones:
                    refuse(
                        ("workloads", i, "hits", zone),
                        f"zone {zone!r} has no client hosts (zones with clients: "
                        f"{', '.join(zones)})",
                        "key each list by a zone that has clients",
                    )
                lists.append((("workloads", i, "hits", zone), [float(v) for v in values]))
        elif w.hits:
            lists.append((("workloads", i, "hits"), [float(v) for v in w.hits]))
        if w.http_share:
            lists.append((("workloads", i, "http_share"), [float(v) for v in w.http_share]))
        for path, values in lists:
            if len(values) not in (1, len(servers)):
                refuse(
                    path,
                    f"has {len(values)} values but the graph has {len(servers)} server "
                    f"hosts ({order})",
                    "give one value per server host in that order, or a single value for all",
                )


def _sysctl(name: str) -> int | None:
    try:
        return int(Path("/proc/sys", *name.split(".")).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def check_socket_buffers(scenario: Scenario) -> None:
    """A socket_buffer above net.core.rmem_max/wmem_max: the kernel would clamp it, so
    the engine refuses the test; say so now, not after the testbed is built."""
    limits = {k: _sysctl(f"net.core.{k}") for k in ("wmem_max", "rmem_max")}
    for i, w in enumerate(scenario.workloads):
        value = getattr(w, "socket_buffer", None)
        sizes = value if isinstance(value, list) else [value]
        for size in sizes:
            if not isinstance(size, int):
                continue
            for name, limit in limits.items():
                if limit is not None and size > limit:
                    raise ScenarioError(
                        f"workloads[{i}].socket_buffer = {human_size(size)} is above "
                        f"net.core.{name} = {human_size(limit)} on this machine (the kernel "
                        "would clamp it, so the engine refuses the test)",
                        where=str(scenario.source or "scenario"),
                        fix=f"give at most {human_size(limit)}, or raise the limit: "
                        f"sysctl -w net.core.{name}={size}",
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
    for kind, mech, ctx in mechanism_entries(scenario):
        if kind.run_check is not None:
            kind.run_check(mech, ctx)
    check_kernel(scenario)
