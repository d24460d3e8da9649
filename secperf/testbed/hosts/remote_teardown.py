"""Remote teardown: emptying an SSH host's ledger, by the running backend at the end
of a run (SshHost.close) or by `secperf clean` for a run that died (clean_remote).

A remote ledger, `<workdir>/<prefix>.ledger.jsonl`, has the local ledger's add and
remove lines (secperf.testbed.ledger). Teardown stops its live processes only while
pid + starttime still match (KILL_GROUP), puts the firewall back as it was found
(`<workdir>/<prefix>/nft-ruleset-before`), and removes the run's files (only under
the work directory) and the ledger, all over one SSH session.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed.hosts.ssh_transport import SshSpec, connect, remote_run

# argv: sh -c KILL_GROUP kill PID STARTTIME: stop a group only while pid+starttime match.
KILL_GROUP = r"""
pid=$1; st=$2
now=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)
[ "$now" = "$st" ] || exit 0
kill -s TERM -- "-$pid" 2>/dev/null || kill -s TERM "$pid" 2>/dev/null
i=0; while [ $i -lt 30 ] && kill -s 0 "$pid" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
kill -s KILL -- "-$pid" 2>/dev/null; kill -s KILL "$pid" 2>/dev/null
exit 0
"""


def remote_ledger(spec: SshSpec, prefix: str) -> str:
    """Where the run `prefix` keeps its ledger on the host."""
    return posixpath.join(spec.workdir, f"{prefix}.ledger.jsonl")


def remote_rundir(spec: SshSpec, prefix: str) -> str:
    """Where the run `prefix` keeps its files on the host."""
    return posixpath.join(spec.workdir, prefix)


def live_entries(lines: list[str]) -> list[dict[str, Any]]:
    """Entries added and not removed (the local ledger's rule, for a remote ledger)."""
    live: list[dict[str, Any]] = []
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a lost connection
        if entry.get("op") == "add":
            live.append(entry)
        elif entry.get("op") == "remove":
            for i, cand in enumerate(live):
                if cand.get("type") == entry.get("type") and all(
                    cand.get(k) == v for k, v in entry.items() if k not in ("op", "type")
                ):
                    del live[i]
                    break
    return live


def remote_teardown(client: Any, spec: SshSpec, prefix: str) -> list[str]:
    """Empty a remote ledger: stop its live processes (pid + starttime checked), put
    the firewall back as it was found, remove the run's files and the ledger."""
    where = f"host {spec.name} (ssh {spec.destination})"
    q = shlex.quote
    ledger = remote_ledger(spec, prefix)
    rundir = remote_rundir(spec, prefix)
    text = remote_run(client, f"cat {q(ledger)} 2>/dev/null", where=where).stdout
    if not text:
        return []
    removed: list[str] = []
    live = live_entries(text.splitlines())
    # One session for all of it: an SSH session is the slow part on the far side.
    kills = [
        shlex.join(["sh", "-c", KILL_GROUP, "kill", str(e["pid"]), str(e["starttime"])])
        for e in reversed(live)
        if e.get("type") == "process"
    ]
    if kills:
        remote_run(client, " ; ".join(kills), where=where, timeout=60.0)
    removed += [
        f"process {e['pid']} ({e.get('label', '')}) on {spec.name}"
        for e in reversed(live)
        if e.get("type") == "process"
    ]
    saved = posixpath.join(rundir, "nft-ruleset-before")
    restore = (
        f"[ -f {q(saved)} ] && command -v nft >/dev/null || exit 0; "
        f'[ "$(nft list ruleset)" = "$(cat {q(saved)})" ] && exit 0; '
        f"nft flush ruleset && nft -f {q(saved)} && echo restored"
    )
    got = remote_run(client, restore, where=where)
    if got.returncode != 0:
        raise TestbedError(
            f"could not put the firewall of {spec.name} back: {got.stderr.strip()}",
            where=where,
            fix=f"its ruleset as found is in {saved}: load it with nft -f; the ledger is kept",
        )
    if "restored" in got.stdout:
        removed.append(f"nft ruleset on {spec.name} (put back as found)")
    paths = [
        str(e["path"])
        for e in reversed(live)
        if e.get("type") == "file"
        and isinstance(e.get("path"), str)
        # only what lives in secperf's work directory
        and str(e["path"]).startswith(spec.workdir.rstrip("/") + "/")
    ]
    gone = remote_run(client, shlex.join(["rm", "-rf", "--", *paths, ledger]), where=where)
    if gone.returncode != 0:
        raise TestbedError(
            f"could not remove the run's files on {spec.name}: {gone.stderr.strip()}",
            where=where,
            fix="the local ledger keeps the host: fix the cause, then `secperf clean`",
        )
    removed += [f"file {p} on {spec.name}" for p in paths]
    removed.append(f"ledger {ledger} on {spec.name}")
    return removed


def clean_remote(entry: dict[str, Any]) -> list[str]:
    """`secperf clean` for one `ssh` entry of a dead run's ledger."""
    spec = SshSpec.from_entry(entry)
    client = connect(spec)
    try:
        return remote_teardown(client, spec, str(entry["prefix"]))
    finally:
        client.close()
