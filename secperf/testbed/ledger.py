"""The ledger: what a run created, written down before it is created.

One JSONL file per run, `<state_dir>/<prefix>.jsonl`. The first line names the
owner (pid and its /proc starttime, so a reused pid is never mistaken for the
owner); every later line is an `add` or a `remove`. Each line is appended and
fsynced at once, so after a crash or a SIGKILL the file still says what exists.
An `add` is written *before* the thing is made: a ledger may name something
that was never created (teardown tolerates that), but never misses something
that was.

Entry types and their fields:
  netns       name
  veth        name, netns, peer, peer_netns   (gone with its namespace)
  link        name, netns                     (any other interface in a namespace)
  process     pid, starttime, pgid, label, host, argv
  file        path                            (a file or directory, deleted at teardown:
                                               temporary state only, never results)
  nft_table   netns, family, name             (gone with its namespace)
  cgroup      path                            (a host's cgroup directory, removed once
                                               its processes have stopped)
  ssh         name, host, user, port, key_file, known_hosts, host_key_checking,
              workdir, prefix                 (a remote host of the run: its own
                                               ledger, <workdir>/<prefix>.ledger.jsonl,
                                               is emptied over SSH:
                                               secperf.testbed.hosts.remote_teardown)

A remote ledger has the same lines, and one more type:
  state       path                            (the run directory where the host's
                                               firewall, legacy tables and ipsets
                                               were saved as found: put back first)
  setting     path, value                     (a /proc/sys/net file or an interface's
                                               rps_cpus, and what it held before the
                                               run changed it: written back by
                                               teardown and the watchdog)

What a ledger names is acted on only when it is plausible (`process_ids`,
`confined`): a process is a pid above 1 with a positive starttime, a file lies
strictly inside the directory its ledger owns. A line that fails is left alone.
"""

from __future__ import annotations

import json
import os
import posixpath
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from secperf.errors import TestbedError

EntryType = Literal["netns", "veth", "link", "process", "file", "nft_table", "cgroup", "ssh"]
ENTRY_TYPES: tuple[str, ...] = get_args(EntryType)

DEFAULT_STATE_DIR = Path("/run/secperf")
STATE_DIR_ENV = "SECPERF_STATE_DIR"
SUFFIX = ".jsonl"


def resolve_state_dir(state_dir: Path | None = None) -> Path:
    """The explicit dir, else $SECPERF_STATE_DIR, else /run/secperf."""
    if state_dir is not None:
        return Path(state_dir)
    env = os.environ.get(STATE_DIR_ENV)
    return Path(env) if env else DEFAULT_STATE_DIR


def proc_starttime(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (clock ticks since boot), or None if no such process.

    pid + starttime names one process for the life of the machine: a pid reused
    later has a different starttime.
    """
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    fields = data[data.rfind(")") + 2 :].split()
    # fields[0] is field 3 (state); starttime is field 22.
    return int(fields[19])


def proc_state(pid: int) -> str | None:
    """The one-letter state of a process (R, S, Z, …) or None if it does not exist."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return data[data.rfind(")") + 2 :].split()[0]


def process_ids(entry: dict[str, Any]) -> tuple[int, int] | None:
    """(pid, starttime) of a `process` entry that can name one process, else None: a
    pid of 0 or 1, a negative one (a process group, -1: every process) or a missing
    starttime would make a kill reach far more than what secperf started."""
    pid, starttime = entry.get("pid"), entry.get("starttime")
    if type(pid) is not int or type(starttime) is not int:
        return None
    return (pid, starttime) if pid > 1 and starttime > 0 else None


def confined(path: object, root: str) -> str | None:
    """`path` if it is a normalised absolute path strictly inside directory `root`
    (itself absolute and normalised), else None: a ledger line climbing out with `..`,
    naming `root` itself or some other place is never acted on."""
    if not isinstance(path, str) or not path.startswith("/") or not root.startswith("/"):
        return None
    if posixpath.normpath(path) != path or posixpath.normpath(root) != root:
        return None
    return path if path.startswith(root.rstrip("/") + "/") else None


def process_matches(pid: int, starttime: int) -> bool:
    """True if `pid` is still the process that had `starttime` and has not exited."""
    return proc_starttime(pid) == starttime and proc_state(pid) not in (None, "Z", "X")


class Ledger:
    """An append-only record of one run's creations."""

    def __init__(self, path: Path):
        self.path = Path(path)
        # Reentrant: a signal handler's teardown may write while the main thread is mid-write.
        self._lock = threading.RLock()
        self._entries: list[dict[str, Any]] = []
        self._header: dict[str, Any] = {}
        if self.path.exists():
            self._load()

    # -- creation and loading --------------------------------------------

    @classmethod
    def open(cls, prefix: str, state_dir: Path | None = None) -> Ledger:
        """Create the ledger for a new run owned by this process; refuse an existing one."""
        directory = resolve_state_dir(state_dir)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = directory / f"{prefix}{SUFFIX}"
        header = {
            "op": "run",
            "prefix": prefix,
            "pid": os.getpid(),
            "starttime": proc_starttime(os.getpid()),
            "created": datetime.now(UTC).isoformat(),
        }
        # Write the header to a temp file and link it into place, so a ledger
        # file never exists without its owner line, and two runs can't share one.
        tmp = directory / f".{prefix}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(header) + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise TestbedError(
                f"a ledger for prefix {prefix!r} already exists",
                where=str(path),
                fix="choose another prefix, or run `secperf clean` if that run is dead",
            ) from None
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(directory)
        return cls(path)

    def _load(self) -> None:
        lines = self.path.read_text().splitlines()
        for n, line in enumerate(lines):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                if n == len(lines) - 1:
                    break  # a write cut short by a crash: nothing after it exists
                raise TestbedError(
                    "ledger line is not JSON",
                    where=f"{self.path}:{n + 1}",
                    fix="the ledger was edited by hand: remove what it names with `ip netns del` "
                    "and delete the file",
                ) from None
            if entry.get("op") == "run":
                self._header = entry
            else:
                self._entries.append(entry)

    # -- writing -----------------------------------------------------------

    def _append(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=False) + "\n"
        with self._lock:
            with open(self.path, "a") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self._entries.append(entry)

    def add(self, type: EntryType, **fields: Any) -> None:
        """Record that something is about to be created (call before creating it)."""
        if type not in ENTRY_TYPES:
            raise ValueError(f"unknown ledger entry type {type!r}")
        self._append({"op": "add", "type": type, **fields})

    def remove(self, type: EntryType, **fields: Any) -> None:
        """Record that a live entry of `type` whose fields include `fields` is gone.

        A remove that matches no live entry is not written (removal is idempotent).
        """
        if any(_matches(e, type, fields) for e in self.live_entries()):
            self._append({"op": "remove", "type": type, **fields})

    # -- reading -----------------------------------------------------------

    @property
    def header(self) -> dict[str, Any]:
        return dict(self._header)

    @property
    def prefix(self) -> str:
        return str(self._header.get("prefix", self.path.stem))

    def entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._entries)

    def live_entries(self) -> list[dict[str, Any]]:
        """Entries added and not removed, in creation order.

        A remove cancels the earliest live add of its type whose fields include
        the remove's fields.
        """
        live: list[dict[str, Any]] = []
        for entry in self.entries():
            if entry.get("op") == "add":
                live.append(entry)
            elif entry.get("op") == "remove":
                fields = {k: v for k, v in entry.items() if k not in ("op", "type")}
                for i, cand in enumerate(live):
                    if _matches(cand, entry.get("type"), fields):
                        del live[i]
                        break
        return live

    def owner_alive(self) -> bool:
        """True if the process that opened this ledger is still running."""
        pid = self._header.get("pid")
        starttime = self._header.get("starttime")
        if not isinstance(pid, int) or not isinstance(starttime, int):
            return False
        return process_matches(pid, starttime)

    def delete(self) -> None:
        """Remove the ledger file (once everything it names is gone)."""
        self.path.unlink(missing_ok=True)


def _matches(entry: dict[str, Any], type: object, fields: dict[str, Any]) -> bool:
    return entry.get("type") == type and all(entry.get(k) == v for k, v in fields.items())


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ledgers(state_dir: Path | None = None) -> list[Ledger]:
    """Every ledger in the state dir, by name."""
    directory = resolve_state_dir(state_dir)
    if not directory.is_dir():
        return []
    found: list[Ledger] = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        try:
            found.append(Ledger(path))
        except FileNotFoundError:
            continue  # removed by another cleaner since the glob
    return found
