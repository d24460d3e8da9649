"""Everything that can be checked before a namespace exists or a packet flows.

`secperf doctor` and `secperf run` share one table of tools: which program, which
Debian package brings it, and who needs it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

from secperf.errors import ScenarioError, SecperfError, ToolMissingError
from secperf.mechanisms.base import CheckContext, MechanismKind, MechanismSpec
from secperf.mechanisms.registry import MECHANISMS
from secperf.plan.graph import build_topology
from secperf.run import softirq
from secperf.run.estimate import RECORDS_MAX_BYTES, records_estimate
from secperf.scenario.loader import _LineMap, load_scenario
from secperf.scenario.scenario import Scenario
from secperf.testbed.hosts.registry import BACKENDS
from secperf.testbed.topology import Topology
from secperf.tools import REPO_ROOT, Tool, engine_path, install_packages
from secperf.workloads.base import CheckContext as WorkloadCheckContext
from secperf.workloads.registry import WORKLOADS

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
    # optional: without it the attribution round says "not profiled: perf missing"
    Tool("perf", "linux-perf", "the attribution round's CPU profile (where the cost goes)"),
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


def shipped_tools() -> list[Tool]:
    """What `secperf doctor` checks: every tool any kind knows, every tool a shipped
    scenario (scenarios/*.toml of this checkout) needs, and the traced round's."""
    tools = [*all_tools(), *softirq.TOOLS]
    for path in sorted((REPO_ROOT / "scenarios").glob("*.toml")):
        try:
            tools += tools_for(load_scenario(path))
        except SecperfError:
            continue  # `secperf check` names a broken scenario; doctor checks the machine
    return list({t.program: t for t in tools}.values())


def missing(tools: list[Tool]) -> list[Tool]:
    return [t for t in tools if not t.present]


def install_hint(tools: list[Tool]) -> str:
    packages = sorted({t.package for t in tools})
    return "apt-get install -y --no-install-recommends " + " ".join(packages)


def install_for(scenario: Scenario, console: Any) -> list[Tool]:
    """Install the packages of the tools `scenario`'s kinds declare that are missing here
    (no service started or enabled: secperf.tools.install_packages); its tools."""
    tools = list({t.program: t for t in tools_for(scenario)}.values())
    packages = sorted({t.package for t in missing(tools)})
    if packages:
        console.print("installing " + " ".join(packages), markup=False)
    install_packages(packages)
    return tools


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
    try:  # for checks that name hosts; a graph that cannot be built is refused elsewhere
        topology: Topology | None = build_topology(scenario)
    except SecperfError:
        topology = None
    for name, variant in scenario.variants.items():
        for i, mech in enumerate(variant.mechanisms):
            key = f"variants.{name}.mechanisms[{i}]"
            yield MECHANISMS.of(mech), mech, CheckContext(key, where, family, topology)


def tools_for(scenario: Scenario) -> list[Tool]:
    tools = list(BASE_TOOLS)
    if scenario.testbed.offloads == "off":
        tools.append(OFFLOAD_TOOL)
    if any(BACKENDS.get(v.backend).virtual for v in scenario.variants.values()):
        tools += VM_TOOLS
    for kind, mech, _ctx in mechanism_entries(scenario):
        tools += kind.tools_for(mech)
    for workload in scenario.workloads:
        tools += WORKLOADS.of(workload).tools(workload)
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
    (a rule file's targets, a tunnel this machine cannot run) and each workload kind's
    (socket buffers against this machine, a mix's hit table against the graph)."""
    for kind, mech, ctx in mechanism_entries(scenario):
        if kind.check is not None:
            kind.check(mech, ctx)
    check_workloads(scenario)
    check_records(scenario)


def check_records(scenario: Scenario) -> None:
    """Refuse a run whose records could take more than RECORDS_MAX_BYTES on disk, with
    the interval floor that would fit and what else to change."""
    planned = records_estimate(scenario)
    if planned.bytes <= RECORDS_MAX_BYTES:
        return
    floor = planned.floor()
    interval = (
        f"an interval of at least {floor:.2g} s (validation.deviation_interval) would fit"
        if floor != float("inf")
        else "even without interval records they do not fit"
    )
    raise ScenarioError(
        f"the run's records could take {planned.bytes / 1024**3:.1f} GiB on disk: a run may "
        f"keep at most {RECORDS_MAX_BYTES // 1024**3} GiB of records; {interval}",
        where=str(scenario.source or "scenario"),
        fix="lengthen the interval, or shorten [repeat] budget or max, duration, the "
        "sweeps, or remeasure",
    )


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
            check(workload, WorkloadCheckContext(i, source, topology, where))


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
