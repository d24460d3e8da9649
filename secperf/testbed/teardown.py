"""Teardown by ledger: remove exactly what a ledger holds, in the safe order, also
for runs that died (`clean`). Nothing outside a ledger is touched.

Newest first within each kind: processes (only while pid + starttime still match),
whatever else still runs inside the run's namespaces, interfaces and nft tables not
inside one of its namespaces, the namespaces (which takes their veths and tables
with them), the hosts' cgroups (empty by then), files, then remote hosts' ledgers
(emptied over SSH, secperf.testbed.hosts.remote_teardown).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed import cgroups
from secperf.testbed.commands import run_command
from secperf.testbed.hosts.netns import (
    delete_netns,
    kill_netns_processes,
    kill_recorded_process,
    netns_exists,
)
from secperf.testbed.hosts.remote_teardown import clean_remote
from secperf.testbed.ledger import EntryType, Ledger, ledgers, process_ids, resolve_state_dir

# Ledger entries that live inside a namespace and vanish with it.
IN_NETNS: tuple[EntryType, ...] = ("nft_table", "link", "veth")


def teardown_entries(ledger: Ledger) -> list[str]:
    """Remove the live entries of a ledger in the safe order; delete the ledger when empty.

    Raises TestbedError listing what could not be removed (after trying all of it).
    """
    live = ledger.live_entries()
    our_netns = {e["name"] for e in live if e["type"] == "netns"}
    removed: list[str] = []
    errors: list[str] = []

    def attempt(what: str, action: Callable[[], object]) -> None:
        try:
            action()
            removed.append(what)
        except (TestbedError, OSError) as exc:
            errors.append(f"{what}: {exc}")

    by_type: dict[str, list[dict[str, Any]]] = {}
    for entry in reversed(live):
        by_type.setdefault(entry["type"], []).append(entry)

    for e in by_type.get("process", []):

        def stop(e: dict[str, Any] = e) -> None:
            ids = process_ids(e)
            # A line that cannot name one process (pid 1 or below, no starttime: one
            # that was gone before its start time could be read) is never signalled.
            if ids is not None:
                kill_recorded_process(*ids, e.get("pgid"))
            ledger.remove("process", pid=e.get("pid"), starttime=e.get("starttime"))

        attempt(f"process {e['pid']} ({e.get('label', '')})", stop)

    # Anything else running in our namespaces (a daemon that left its group) is ours too.
    for ns in sorted(our_netns):
        for pid in kill_netns_processes(ns):
            removed.append(f"process {pid} (left in {ns})")

    for kind in IN_NETNS:
        for e in by_type.get(kind, []):
            ns = e.get("netns")
            if ns in our_netns:
                # Goes with its namespace; recorded as removed when that is deleted.
                continue
            attempt(f"{kind} {e.get('name')} in {ns or 'root'}", _remover(ledger, kind, e))

    for e in by_type.get("netns", []):
        name = e["name"]

        def drop(name: str = name) -> None:
            delete_netns(name)
            for kind in IN_NETNS:
                for inner in by_type.get(kind, []):
                    if inner.get("netns") == name:
                        ledger.remove(kind, **_key(kind, inner))
            ledger.remove("netns", name=name)

        attempt(f"netns {name}", drop)

    prefix = ledger.prefix
    for e in by_type.get("cgroup", []):

        def rmdir(path: str = e["path"]) -> None:
            _check_cgroup_path(path, prefix)
            cgroups.remove(Path(path))
            ledger.remove("cgroup", path=path)

        attempt(f"cgroup {e['path']}", rmdir)

    for e in by_type.get("file", []):
        attempt(f"file {e['path']}", _remover(ledger, "file", e))

    for e in by_type.get("ssh", []):

        def remote(e: dict[str, Any] = e) -> None:
            removed.extend(clean_remote(e))
            ledger.remove("ssh", name=e["name"], prefix=e["prefix"])

        attempt(f"remote host {e['name']} ({e.get('user')}@{e.get('host')})", remote)

    if errors:
        raise TestbedError(
            "teardown left things behind:\n  " + "\n  ".join(errors),
            where=str(ledger.path),
            fix="fix the cause above, then run `secperf clean`",
        )
    if not ledger.live_entries():
        ledger.delete()
    return removed


def _check_cgroup_path(path: str, prefix: str | None) -> None:
    """Only a group this run named: `<prefix>-<host>` right under a cgroup mount."""
    p = Path(path)
    if (
        not prefix
        or not p.is_absolute()
        or ".." in p.parts
        or not str(p).startswith("/sys/fs/cgroup/")
        or not p.name.startswith(f"{prefix}-")
    ):
        raise TestbedError(
            f"the ledger names cgroup {path}, which is not one of run {prefix}'s",
            fix="the ledger was edited or corrupted: remove that line by hand",
        )


def _key(kind: str, e: dict[str, Any]) -> dict[str, Any]:
    keys = {"nft_table": ("netns", "family", "name"), "link": ("netns", "name")}
    return {k: e.get(k) for k in keys.get(kind, ("netns", "name"))}


def _remover(ledger: Ledger, kind: EntryType, e: dict[str, Any]) -> Callable[[], None]:
    def remove() -> None:
        ns = e.get("netns")
        if kind == "file":
            path = Path(e["path"])
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
            ledger.remove("file", path=e["path"])
            return
        if ns is not None and not netns_exists(ns):
            ledger.remove(kind, **_key(kind, e))
            return  # its namespace is gone, so is it
        prefix = ["ip", "netns", "exec", ns] if ns else []
        if kind == "nft_table":
            argv = [*prefix, "nft", "delete", "table", e["family"], e["name"]]
        else:
            argv = ["ip", *(["-n", ns] if ns else []), "link", "del", e["name"]]
        proc = run_command(argv, check=False)
        if (
            proc.returncode != 0
            and "No such" not in proc.stderr
            and "does not exist" not in (proc.stderr)
        ):
            raise TestbedError(
                f"{' '.join(argv)}: {proc.stderr.strip()}",
                fix="the ledger keeps the entry: run `secperf clean` to retry",
            )
        ledger.remove(kind, **_key(kind, e))

    return remove


# -- clean -------------------------------------------------------------------------


def clean(state_dir: Path | None = None) -> list[str]:
    """Tear down what dead runs left behind, by their ledgers only; returns what was removed.

    A ledger whose owner still runs is left alone. Nothing outside a ledger is touched.
    """
    removed: list[str] = []
    errors: list[str] = []
    for ledger in ledgers(resolve_state_dir(state_dir)):
        if ledger.owner_alive():
            continue
        try:
            removed.extend(teardown_entries(ledger))
        except TestbedError as exc:
            errors.append(str(exc))  # keep its ledger, go on with the others
            continue
        ledger.delete()
        removed.append(f"ledger {ledger.path}")
    if errors:
        raise TestbedError(
            "clean could not remove everything:\n" + "\n".join(errors),
            fix="fix the cause above and run `secperf clean` again",
        )
    return removed
