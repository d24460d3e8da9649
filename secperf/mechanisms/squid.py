"""squid on a DUT, for the kinds that run it (proxy, tls_inspect): one start and one stop,
on privdrop (docs/security.md, "On this machine").

squid drops to the `proxy` user. What it writes (pid file, cache log, access log, and
for ssl-bump its certificate database) lives in a folder of its own under the root-owned
runtime directory (`privdrop.RUN_ROOT/<service>/`), made afresh by root for each start;
the folder is root's and writable by root only, each file in it is made by root and then
given to `proxy`, and a sub-folder squid's helpers write (`ssl_db`) is handed over only
after root has made it and before squid runs. No directory of the run changes owner or
mode and no ancestor is opened to others: what squid reads (its config, its hosts table,
a rule helper) is copied into the folder as root's, and a TLS key stays root's, 0600 in
the run directory (squid reads it as root, before it drops). Root's own file beside it,
`squid.stderr` in the run directory, is opened without following a link. At stop, the
logs come back into the run directory and the folder goes; its shared-memory segments in
/dev/shm (outside the namespace) are in the ledger before squid makes them.

Below the kinds: it knows neither, and neither imports the other.
"""

from __future__ import annotations

import os
import pwd
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from secperf.errors import MechanismError
from secperf.services import privdrop
from secperf.services.nginx import accepts
from secperf.testbed.hosts import Host, ManagedProcess
from secperf.testbed.ledger import Ledger

USER = "proxy"
SHM_DIR = Path("/dev/shm")
SHM_SEGMENTS = ("cf__metadata.shm", "cf__queues.shm", "cf__readers.shm")
READY_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
LOGS = ("access.log", "cache.log")


def service(*parts: str) -> str:
    """squid's -n (names its /dev/shm segments and its folder): letters and digits of
    `parts`, unique per run (table) and variant."""
    return re.sub(r"[^A-Za-z0-9]", "", "".join(parts))[:48]


def folder(name: str) -> Path:
    """The folder squid `name` writes in: root's, under the runtime directory."""
    return privdrop.RUN_ROOT / name


def shm_paths(name: str) -> list[Path]:
    """The shared-memory files squid makes under its service name, outside the
    namespace; recorded in the ledger before squid starts and removed at stop."""
    return [SHM_DIR / f"{name}-{seg}" for seg in SHM_SEGMENTS]


def give_tree(path: Path, user: str = USER) -> None:
    """`path` and everything under it given to `user`, never following a link: only for
    a tree root has just made inside a folder no one else can write."""
    pw = pwd.getpwnam(user)
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in [*dirs, *files]:
            os.chown(os.path.join(top, name), pw.pw_uid, pw.pw_gid, follow_symlinks=False)
    os.chown(path, pw.pw_uid, pw.pw_gid, follow_symlinks=False)


class Squid:
    """One squid daemon: its folder, its shared memory in the ledger, its process."""

    def __init__(self, name: str, label: str = "squid") -> None:
        self.name = name
        self.label = label
        self.dir = folder(name)
        self.proc: ManagedProcess | None = None
        self._ledger: Ledger | None = None
        self._made = False
        self._shm: list[Path] = []

    def start(
        self,
        dut: Host,
        *,
        binary: str,
        conf: Path,
        out_dir: Path,
        writes: Sequence[str],
        copies: Sequence[Path] = (),
        prepare: Callable[[Path], None] | None = None,
        fix: str | None = None,
    ) -> ManagedProcess:
        """Make the folder (`writes` for squid, `copies` as root's; `prepare(folder)`
        may add to it before squid runs), check the config and start squid with its
        output in `out_dir`/LABEL.stderr (never through a link); `wait` for it next."""
        self._ledger = dut.ledger
        self._made = True
        privdrop.make_folder(dut.ledger, self.dir, USER, writes, copies)
        if prepare is not None:
            prepare(self.dir)
        check = dut.run([binary, "-k", "parse", "-f", str(conf.resolve())], check=False)
        if check.returncode != 0 or "ERROR" in (check.stderr or ""):
            raise MechanismError(
                f"squid rejects its generated config: {(check.stderr or check.stdout)[-500:]}",
                where=str(conf),
                fix=fix,
            )
        if dut.ledger is not None:
            self._shm = shm_paths(self.name)
            for path in self._shm:
                dut.ledger.add("file", path=str(path))
        with privdrop.open_nofollow(out_dir / f"{self.label}.stderr") as err:
            self.proc = dut.spawn(
                [binary, "-N", "-n", self.name, "-f", str(conf.resolve())],
                stdout=err,
                stderr=err,
                label=self.label,
            )
        return self.proc

    def wait(self, dut: Host, port: int, log: Path) -> None:
        """Until squid accepts on 127.0.0.1:`port`; its errors read from `log`."""
        proc = self.proc
        assert proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if accepts(dut, "127.0.0.1", port):
                return
        said = log.read_text(errors="replace")[-800:] if log.is_file() else ""
        raise MechanismError(
            f"{self.label} did not accept on port {port} in {dut.name} within "
            f"{READY_TIMEOUT_S:.0f} s: {said.strip() or 'no output'}",
            where=str(log),
            fix=f"read {log.name} and cache.log; check that the port is free on the DUT",
        )

    def stop(self, out_dir: Path) -> None:
        """Stop squid, bring its logs into `out_dir`, remove its folder and segments."""
        if self.proc is not None:
            self.proc.stop(timeout=STOP_TIMEOUT_S)
            self.proc = None
        if self._made:
            privdrop.collect(self.dir, LOGS, out_dir)
            privdrop.remove_folder(self._ledger, self.dir)
            self._made = False
        for path in self._shm:
            path.unlink(missing_ok=True)
            if self._ledger is not None:
                self._ledger.remove("file", path=str(path))
        self._shm = []
