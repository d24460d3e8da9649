"""A scenario's inventory: which hosts of the graph are real machines, and how to
reach them (docs/scenario-format.md, "Remote hosts").

`[testbed.hosts.NAME]` tables use Ansible's inventory variable names where one
fits (`ansible_host`, `ansible_port`, `ansible_user`,
`ansible_ssh_private_key_file`, `host_key_checking`). Relative file paths are
relative to the scenario file. Traffic goes only to the inventory's declared test
addresses: every address the plan gives a remote host must be declared for it
(the target guard), and `secperf check` finds each one on the host. Real wires are
never shaped: a workload's `link_rate` through real hosts is refused (refuse_shaping).
`secperf check` runs nothing in a host's work directory before it has checked that
no one else can write it (hosts/remote_workdir.py).
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from secperf.errors import ScenarioError, SecperfError, TestbedError
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import expand_scenario
from secperf.testbed.hosts.registry import BACKENDS
from secperf.testbed.hosts.remote_workdir import check_workdir
from secperf.testbed.hosts.ssh_transport import SshSpec, connect, remote_run, sha256_file
from secperf.testbed.topology import Topology
from secperf.tools import engine_path
from secperf.workloads.base import WorkloadPoint


def _path(scenario: Scenario, value: str | None) -> str | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    if not p.is_absolute() and scenario.source is not None:
        p = scenario.source.parent / p
    return str(p)


def plan_addresses(topology: Topology, name: str, family: int) -> list[str]:
    """Every address the testbed plan gives host `name` (one per link)."""
    out: list[str] = []
    for link in topology.links_of(name):
        try:
            out.append(topology.address(name, link.name, family))
        except KeyError:
            continue  # a switch's port has no address
    return out


def ssh_specs(scenario: Scenario, topology: Topology) -> dict[str, SshSpec]:
    """The remote hosts of the scenario's inventory, checked against the graph (and
    its workloads: no link_rate through them)."""
    refuse_shaping(scenario, expand_scenario(scenario))
    family = 6 if scenario.testbed.family == "ipv6" else 4
    specs: dict[str, SshSpec] = {}
    for name, inv in scenario.testbed.hosts.items():
        where = f"[testbed.hosts.{name}]"
        if name not in topology.names:
            raise ScenarioError(
                f"the inventory names host {name!r}, which the testbed does not have",
                where=where,
                fix=f"name one of: {', '.join(topology.names)}",
            )
        if not BACKENDS.get(inv.backend).lab:
            continue
        declared = set(inv.addresses)
        missing = [a for a in plan_addresses(topology, name, family) if a not in declared]
        if missing:
            raise ScenarioError(
                f"the testbed plan puts {', '.join(missing)} on host {name}, which its "
                "inventory does not declare: secperf sends traffic to declared addresses only",
                where=f"{where} addresses",
                fix=f"configure {', '.join(missing)} on that host's test interface and add "
                "them to addresses (docs/scenario-format.md lists the plan)",
            )
        for peer in topology.links_of(name):
            other = peer.peer(name)
            if other not in inv.interfaces:
                raise ScenarioError(
                    f"host {name} has a link to {other} and no interface for it",
                    where=f"{where} interfaces",
                    fix=f'add interfaces = {{ {other} = "eth1" }}: the interface cabled to it',
                )
        if not BACKENDS.get(inv.backend).logs_in:
            continue  # a device: addresses and interfaces checked, nothing to reach
        assert inv.ansible_host is not None  # the schema requires it for ssh
        specs[name] = SshSpec(
            name=name,
            host=inv.ansible_host,
            user=inv.ansible_user,
            port=inv.ansible_port,
            key_file=_path(scenario, inv.ansible_ssh_private_key_file),
            known_hosts=_path(scenario, inv.known_hosts),
            host_key_checking=inv.host_key_checking,
            workdir=inv.workdir,
            addresses=tuple(inv.addresses),
            interfaces=dict(inv.interfaces),
            keep_engine=inv.keep_engine,
            watchdog_s=inv.watchdog,
        )
    return specs


def refuse_shaping(scenario: Scenario, points: Sequence[WorkloadPoint[Any]]) -> None:
    """A workload's `link_rate` shapes every link of its path with a qdisc on both
    ends; links between real hosts are the lab's wires, which secperf never shapes
    (docs/security.md): refuse it before anything runs."""
    real = sorted(n for n, inv in scenario.testbed.hosts.items() if BACKENDS.get(inv.backend).lab)
    if not real:
        return
    for point in points:
        if point.spec.path_rate() is not None:
            raise ScenarioError(
                f"link_rate shapes the links of its path, and hosts {', '.join(real)} are "
                "real machines whose links are real wires: secperf shapes no real wire",
                where=f"workloads[{point.workload_index}] link_rate",
                fix="drop link_rate; shape the real link yourself and say so in the "
                "scenario's description",
            )


def reach(spec: SshSpec, engine_sha: str | None = None) -> str:
    """Log in, read the engine's version there (if any) and find every declared test
    address on the host; a line saying what was found, or a TestbedError."""
    client = connect(spec)
    where = f"host {spec.name} (ssh {spec.destination})"
    try:
        # Nothing in the work directory runs before no one else can have put it there.
        # A missing one is made at the run's start: until then anything found at its path
        # was put there by someone else, so nothing of it runs (not even `version`).
        exists = check_workdir(client, spec, create=False, where=where)
        engine = shlex.quote(posixpath.join(spec.workdir, "secperf-engine"))
        version = f"not there yet (copied to {spec.workdir}, made at the run's start)"
        if exists:
            got = remote_run(client, f"{engine} version 2>/dev/null", where=where)
            try:
                version = str(json.loads(got.stdout.splitlines()[0])["version"])
            except (ValueError, IndexError, KeyError, TypeError):
                version = "not there yet (copied at the run's start)"
        if exists and engine_sha is not None and version[0].isdigit():
            sha = remote_run(client, f"sha256sum {engine} | cut -d' ' -f1", where=where).stdout
            if sha.strip() != engine_sha:
                version += " (differs from this machine's: replaced at the run's start)"
        addrs = remote_run(client, ["ip", "-j", "addr", "show"], where=where)
        have = {
            a.get("local")
            for link in json.loads(addrs.stdout or "[]")
            for a in link.get("addr_info", [])
        }
        absent = [a for a in spec.addresses if a not in have]
        if absent:
            raise TestbedError(
                f"test address(es) {', '.join(absent)} are not configured on {spec.name}",
                where=where,
                fix="configure them on the test interface, or correct addresses in the inventory",
            )
        return f"{spec.name}: ssh {spec.destination} ok, engine {version}"
    finally:
        client.close()


def check_inventory(scenario: Scenario, topology: Topology) -> list[str]:
    """`secperf check`: every remote host reached, before any traffic; raises the
    first failure (a SecperfError naming the host and the fix)."""
    specs = ssh_specs(scenario, topology)
    if not specs:
        return []
    try:
        sha: str | None = sha256_file(engine_path())
    except (SecperfError, OSError):
        sha = None

    with ThreadPoolExecutor(max_workers=min(8, len(specs))) as pool:
        return list(pool.map(lambda spec: reach(spec, sha), specs.values()))
