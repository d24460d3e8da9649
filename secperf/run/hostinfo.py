"""What the machine and the testbed were like during a run (embedded in run.json).

A number is only comparable with another taken on a like machine: kernel, CPU,
offloads, qdiscs, socket-buffer sysctls and tool versions all change results.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from secperf import __version__
from secperf.engine import engine_version
from secperf.testbed.links import OFFLOAD_FEATURES
from secperf.testbed.testbed import Testbed

SYSCTLS = (
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.core.netdev_max_backlog",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.ip_local_port_range",
    "net.netfilter.nf_conntrack_max",
)

TOOLS = {
    "nft": ["nft", "--version"],
    "iptables": ["iptables", "--version"],
    "iptables-legacy": ["iptables-legacy", "--version"],
    "ipset": ["ipset", "--version"],
    "ip": ["ip", "-V"],
    "tc": ["tc", "-V"],
    "iperf3": ["iperf3", "--version"],
    "sockperf": ["sockperf", "--version"],
}


def _first_line(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def read_sysctl(name: str, root: Path = Path("/proc/sys")) -> str | None:
    try:
        return (root / name.replace(".", "/")).read_text().strip().replace("\t", " ")
    except OSError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """The root namespace's view: kernel, CPU, memory, tools, sysctls."""
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    uname = platform.uname()
    return {
        "hostname": uname.node,
        "kernel": uname.release,
        "kernel_version": uname.version,
        "machine": uname.machine,
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "memory_mib": mem_kb // 1024,
        "python": platform.python_version(),
        "secperf": __version__,
        "engine": engine_version(),
        "tools": {name: _first_line(argv) for name, argv in TOOLS.items()},
        "sysctls": {name: read_sysctl(name) for name in SYSCTLS},
        "irq_time_accounting": irq_time_accounting(),
    }


def kernel_config(option: str) -> bool | None:
    """Whether the running kernel was built with CONFIG_<option> (None: no config to read)."""
    import gzip

    release = platform.release()
    candidates = [Path("/proc/config.gz"), Path(f"/boot/config-{release}")]
    for path in candidates:
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        except OSError:
            continue
        text = raw.decode(errors="replace")
        return f"\nCONFIG_{option}=y" in "\n" + text
    return None


def irq_time_accounting() -> bool | None:
    """With it, interrupt and softirq time is kept out of the interrupted process's CPU
    (and so out of the hosts' cgroups); without it, the tick charges it to both that
    process and /proc/stat's softirq column. The report reads the CPU table accordingly."""
    return kernel_config("IRQ_TIME_ACCOUNTING")


def testbed_info(testbed: Testbed) -> dict[str, Any]:
    """Each host's qdiscs, offloads and forwarding sysctls, as built for this run.

    `offloads` is the scenario's setting; `offloads_read` what `ethtool -k` reads
    back on every veth for each feature the setting switches: "on", "off", "mixed"
    (ends differ), or null (not read: no ethtool)."""
    hosts: dict[str, Any] = {}
    seen: dict[str, set[str]] = {f: set() for f in SWITCHED}
    for spec in testbed.topology.hosts:
        host = testbed.host(spec.name)
        qdisc = host.run(["tc", "qdisc", "show"], check=False).stdout.strip().splitlines()
        offloads: dict[str, dict[str, str]] = {}
        for link in testbed.topology.links:
            if spec.name not in (link.a, link.b):
                continue
            dev = testbed.ifname(link.name, spec.name)
            out = (
                host.run(["ethtool", "-k", dev], check=False).stdout
                if shutil.which("ethtool")
                else ""
            )
            offloads[dev] = {
                k.strip(): v.split()[0]
                for k, v in (line.split(":", 1) for line in out.splitlines()[1:] if ":" in line)
                if k.strip() in OFFLOADS and v.strip()
            }
            for f in SWITCHED:
                seen[f].add(offloads[dev].get(f, "?"))
        sysctl = host.run(
            [
                "sysctl",
                "-n",
                "net.ipv4.ip_forward",
                "net.ipv6.conf.all.forwarding",
                "net.ipv4.tcp_tw_reuse",
                "net.ipv4.ip_local_port_range",
            ],
            check=False,
        ).stdout.splitlines()
        hosts[spec.name] = {
            "netns": testbed.netns(spec.name),
            "qdiscs": qdisc,
            "offloads": offloads,
            "ip_forward": sysctl[0] if sysctl else None,
            "ipv6_forwarding": sysctl[1] if len(sysctl) > 1 else None,
            # what the orderly close's TIME_WAIT leaves to the next connect()
            "tcp_tw_reuse": sysctl[2] if len(sysctl) > 2 else None,
            "ip_local_port_range": " ".join(sysctl[3].split()) if len(sysctl) > 3 else None,
        }
    layout = testbed.cgroup_layout
    return {
        "prefix": testbed.prefix,
        "offloads": testbed.topology.offloads,
        "offloads_read": {f: _one_word(values) for f, values in seen.items()},
        "hosts": hosts,
        # where each host's CPU is counted, the CPUs a pinned host may use, its quota
        "cgroups": {
            "version": layout.version if layout else None,
            "groups": {role: [str(d) for d in g.dirs] for role, g in testbed.cgroups.items()},
            "pin": {role: cpus for role, cpus in testbed.pin.items()},
            "quota": {r: g.quota for r, g in testbed.cgroups.items() if g.quota is not None},
        },
        # the CPU placement: where every process ran, and what that means for the numbers
        "placement": testbed.placement.describe(),
    }


def _one_word(values: set[str]) -> str | None:
    """One feature over every veth, from what ethtool read."""
    if not values or "?" in values:
        return None
    return next(iter(values)) if len(values) == 1 else "mixed"


# The features `[testbed] offloads` switches.
SWITCHED = tuple(OFFLOAD_FEATURES.values())
OFFLOADS = (
    "tcp-segmentation-offload",
    "generic-segmentation-offload",
    "generic-receive-offload",
    "tx-checksumming",
    "rx-checksumming",
    "scatter-gather",
)
