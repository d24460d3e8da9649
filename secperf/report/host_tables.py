"""The machine and the testbed of a run as tables a person reads (run.json's `host`,
`testbed`, `topology` and `placements`): kernel and CPUs, tool versions, sysctls,
each host's role, addresses, pinning, qdiscs and offloads, the links and their
rates, and where each variant's mechanisms ran. A number is only comparable with
one taken on a like machine; these tables say what the machine was."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from secperf.tables import Cell, ReportTable

# ethtool's feature names, as a person writes them
_FEATURES = {
    "tcp-segmentation-offload": "TSO",
    "generic-segmentation-offload": "GSO",
    "generic-receive-offload": "GRO",
    "rx-checksumming": "rx csum",
    "tx-checksumming": "tx csum",
    "scatter-gather": "SG",
}


def _cell(x: Any) -> Cell:
    return Cell("–" if x in (None, "", [], {}) else str(x), numeric=False)


def _table(title: str, columns: list[str], rows: Sequence[Sequence[Any]]) -> ReportTable:
    return ReportTable(
        workload="",
        metric="host",
        title=title,
        columns=columns,
        rows=[[_cell(x) for x in row] for row in rows],
    )


def _rate(bps: Any) -> str:
    if not isinstance(bps, int | float) or bps <= 0:
        return "unshaped"
    for div, unit in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if bps >= div:
            return f"{bps / div:g} {unit}"
    return f"{bps:g} bit/s"


def _engine(text: Any) -> str | None:
    """The engine's version line ('{"engine": …, "version": …, "format": 2}') in words."""
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, Mapping) and data.get("version"):
        name = data.get("engine", "secperf-engine")
        return f"{name} {data['version']} (record format {data.get('format', '?')})"
    return text


_IRQ: dict[Any, str] = {
    True: "yes: softirq time is apart from the processes'",
    False: "no: softirq time is charged to the interrupted process",
}


def machine_table(host: Mapping[str, Any]) -> ReportTable | None:
    if not host:
        return None
    nested = host.get("machine")
    if isinstance(nested, Mapping):  # an older run.json kept it under `machine`
        host = {**host, **nested}
    irq = host.get("irq_time_accounting")
    rows = [
        ("hostname", host.get("hostname")),
        ("kernel", " ".join(str(x) for x in (host.get("kernel"), host.get("kernel_version")) if x)),
        ("architecture", host.get("machine") if isinstance(host.get("machine"), str) else None),
        ("CPU", host.get("cpu_model")),
        ("CPUs", host.get("cpus") or host.get("cpu_count")),
        (
            "memory",
            f"{host['memory_mib']:,} MiB" if isinstance(host.get("memory_mib"), int) else None,
        ),
        (
            "IRQ time accounting",
            _IRQ.get(irq, "unknown") if "irq_time_accounting" in host else None,
        ),
        ("secperf", host.get("secperf")),
        ("engine", _engine(host.get("engine"))),
        ("python", host.get("python")),
    ]
    return _table("Machine", ["", "value"], [r for r in rows if r[1] not in (None, "")])


def tools_table(host: Mapping[str, Any]) -> ReportTable | None:
    tools = host.get("tools")
    if not isinstance(tools, Mapping) or not tools:
        return None
    rows = [(name, version if version else "not installed") for name, version in tools.items()]
    return _table("Tool versions", ["tool", "version"], rows)


def sysctl_table(host: Mapping[str, Any]) -> ReportTable | None:
    sysctls = host.get("sysctls")
    if not isinstance(sysctls, Mapping) or not sysctls:
        return None
    return _table("Sysctls (the root namespace)", ["sysctl", "value"], list(sysctls.items()))


def _qdisc(line: str, prefix: str) -> str | None:
    """'qdisc tbf 8001: dev sp1-cd root refcnt 2 rate 100Mbit …' -> 'cd: tbf rate 100Mbit …';
    the loopback's is left out."""
    words = line.split()
    if len(words) < 2 or "dev" not in words:
        return line.strip() or None
    dev = words[words.index("dev") + 1] if words.index("dev") + 1 < len(words) else "?"
    if dev == "lo":
        return None
    rest = words[words.index("dev") + 2 :]
    if "refcnt" in rest:
        rest = rest[rest.index("refcnt") + 2 :]
    elif rest[:1] == ["root"]:
        rest = rest[1:]
    short = dev.removeprefix(f"{prefix}-") if prefix else dev
    return f"{short}: {' '.join([words[1], *rest])}"


def _offloads(features: Mapping[str, Any]) -> str:
    """{feature: on/off} -> 'TSO on, GSO on, GRO off, …'."""
    return ", ".join(
        f"{_FEATURES.get(str(k), str(k))} {v}" for k, v in features.items() if v is not None
    )


def testbed_hosts_table(run_meta: Mapping[str, Any]) -> ReportTable | None:
    testbed: Mapping[str, Any] = run_meta.get("testbed") or {}
    hosts: Mapping[str, Any] = testbed.get("hosts") or {}
    topology: Mapping[str, Any] = run_meta.get("topology") or {}
    if not hosts and not topology.get("hosts"):
        return None
    prefix = str(testbed.get("prefix") or run_meta.get("prefix") or "")
    pin: Mapping[str, Any] = (testbed.get("cgroups") or {}).get("pin") or {}
    nodes = {str(h.get("name")): h for h in topology.get("hosts") or [] if isinstance(h, Mapping)}
    addresses: dict[str, list[str]] = {}
    for link in topology.get("links") or []:
        for host, addr in (link.get("addresses") or {}).items():
            addresses.setdefault(str(host), []).append(str(addr))
    remote: Mapping[str, Any] = run_meta.get("remote_hosts") or {}
    rows = []
    for name in dict.fromkeys([*nodes, *hosts]):
        node = nodes.get(name) or {}
        state: Mapping[str, Any] = hosts.get(name) or {}
        offloads = state.get("offloads") or {}
        same = {_offloads(f) for f in offloads.values() if isinstance(f, Mapping)}
        off_text = (
            next(iter(same))
            if len(same) == 1
            else "; ".join(
                f"{dev.removeprefix(prefix + '-')}: {_offloads(f)}" for dev, f in offloads.items()
            )
        )
        qdiscs = [q for line in state.get("qdiscs") or [] if (q := _qdisc(str(line), prefix))]
        cpus = pin.get(name)
        rows.append(
            (
                name,
                " / ".join(str(x) for x in (node.get("role"), node.get("zone")) if x),
                "yes" if node.get("forwarding") or state.get("ip_forward") == "1" else "no",
                ", ".join(addresses.get(name, [])),
                remote.get(name) or "namespace " + str(state.get("netns") or "?"),
                ",".join(str(c) for c in cpus) if cpus else "any",
                "; ".join(qdiscs),
                off_text,
            )
        )
    return _table(
        "Testbed hosts (as built and read back)",
        ["host", "role / zone", "forwards", "addresses", "where", "CPUs", "qdiscs", "offloads"],
        rows,
    )


def links_table(run_meta: Mapping[str, Any]) -> ReportTable | None:
    topology: Mapping[str, Any] = run_meta.get("topology") or {}
    links = [link for link in topology.get("links") or [] if isinstance(link, Mapping)]
    if not links:
        return None
    rows = [
        (
            link.get("name"),
            " – ".join(str(e) for e in link.get("ends") or []),
            link.get("net4"),
            link.get("net6"),
            _rate(link.get("rate_bps")),
            f"{link['queue_s'] * 1000:g} ms"
            if isinstance(link.get("queue_s"), int | float)
            else None,
            link.get("offloads"),
        )
        for link in links
    ]
    return _table(
        "Links",
        ["link", "ends", "IPv4", "IPv6", "rate", "queue", "offloads"],
        rows,
    )


def placement_table(run_meta: Mapping[str, Any]) -> ReportTable | None:
    placements: Mapping[str, Any] = run_meta.get("placements") or {}
    rows = []
    for variant, entries in placements.items():
        if not entries:
            rows.append((variant, "none (plain forwarding)", ""))
        for entry in entries or []:
            rows.append((variant, entry.get("kind"), ", ".join(entry.get("hosts") or [])))
    if not rows:
        return None
    return _table("Where each variant's mechanisms ran", ["variant", "mechanism", "hosts"], rows)


def host_tables(run_meta: Mapping[str, Any]) -> list[ReportTable]:
    """Every table of the machine and the testbed that run.json has the facts for."""
    host: Mapping[str, Any] = run_meta.get("host") or {}
    found = [
        machine_table(host),
        testbed_hosts_table(run_meta),
        links_table(run_meta),
        placement_table(run_meta),
        tools_table(host),
        sysctl_table(host),
    ]
    return [t for t in found if t is not None]
