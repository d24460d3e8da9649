"""`secperf review --current-from HOST`: the live rule set of a lab host as the current
one. HOST is a host of an inventory file (`[hosts.NAME]` tables, or a scenario's
`[testbed.hosts.NAME]`, with `backend = "ssh"`: docs/scenario-format.md, "Remote
hosts"). Read-only: secperf logs in and runs exactly `nft -j list ruleset` there, nothing
else (docs/security.md); the JSON it prints is written to a local file, which the review
loads as format `nft-json`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from secperf.errors import ScenarioError, TestbedError
from secperf.schema.sections import Testbed
from secperf.testbed.hosts.registry import BACKENDS
from secperf.testbed.hosts.ssh_transport import SshSpec, connect, remote_run

# The one command run on the host.
LIST = ("nft", "-j", "list", "ruleset")


def inventory_hosts(path: Path) -> dict[str, Any]:
    """The hosts of an inventory file, its relative key and known_hosts paths resolved
    against it (as a scenario's `inventory` key reads it)."""
    path = path.absolute()
    try:
        loaded = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ScenarioError(
            f"cannot read the inventory: {exc.strerror}", where=str(path), fix="give its path"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(
            f"the inventory is not TOML: {exc}", where=str(path), fix="correct the line it names"
        ) from None
    testbed = loaded.get("testbed")
    if isinstance(testbed, dict) and "hosts" in testbed:
        data: dict[str, Any] = {"hosts": testbed["hosts"]}  # a scenario's [testbed.hosts]
        for entry in data["hosts"].values():
            for key in ("ansible_ssh_private_key_file", "known_hosts"):
                value = entry.get(key) if isinstance(entry, dict) else None
                if isinstance(value, str) and not Path(value).expanduser().is_absolute():
                    entry[key] = str(path.parent / value)
    else:
        data = {"inventory": str(path)}
    try:
        bed = Testbed.model_validate(data, context={"base_dir": str(path.parent)})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ScenarioError(
            f"the inventory: {first['msg']}",
            where=f"{path} {'.'.join(str(p) for p in first['loc'])}",
            fix="write [hosts.NAME] tables with the keys of docs/scenario-format.md, "
            '"Remote hosts"',
        ) from None
    return dict(bed.hosts)


def ssh_spec(path: Path, host: str) -> SshSpec:
    hosts = inventory_hosts(path)
    inv = hosts.get(host)
    if inv is None:
        raise ScenarioError(
            f"--current-from {host}: the inventory has no host {host!r}",
            where=str(path),
            fix=f"name one of: {', '.join(hosts) or '(none: add a [hosts.NAME] table)'}",
        )
    if not BACKENDS.get(inv.backend).logs_in:
        raise ScenarioError(
            f'--current-from {host}: its backend is "{inv.backend}": secperf can read the '
            'rule set of a host it logs in to only (backend = "ssh")',
            where=f"{path} hosts.{host}",
            fix='give a host with backend = "ssh", or save its rule set yourself '
            "(nft -j list ruleset > FILE.json) and review FILE.json",
        )
    assert inv.ansible_host is not None  # the schema requires it for ssh
    return SshSpec(
        name=host,
        host=inv.ansible_host,
        user=inv.ansible_user,
        port=inv.ansible_port,
        key_file=inv.ansible_ssh_private_key_file,
        known_hosts=inv.known_hosts,
        host_key_checking=inv.host_key_checking,
    )


def fetch_live(inventory: Path, host: str, into: Path) -> Path:
    """The host's live rule set, read over SSH with `nft -j list ruleset` (nothing else
    runs there), written to `into`/HOST.live.json."""
    spec = ssh_spec(inventory, host)
    where = f"host {host} (ssh {spec.destination})"
    client = connect(spec)
    try:
        proc = remote_run(client, list(LIST), timeout=60.0, where=where)
    finally:
        client.close()
    if proc.returncode != 0:
        raise TestbedError(
            f"`{' '.join(LIST)}` failed there (exit {proc.returncode}): "
            f"{proc.stderr.strip() or proc.stdout.strip()}",
            where=where,
            fix="the login must be root (or may read the rule set) and nft must be installed",
        )
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise TestbedError(
            f"`{' '.join(LIST)}` printed no JSON: {exc}",
            where=where,
            fix="check the host's nft (libnftables JSON needs nftables 0.9.3 or later)",
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nftables"), list):
        raise TestbedError(
            "the listing has no `nftables` list", where=where, fix="check the host's nft"
        )
    into.mkdir(parents=True, exist_ok=True)
    out = into / f"{host}.live.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return out
