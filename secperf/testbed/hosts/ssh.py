"""The SSH host backend: a real machine reached over SSH (hosts/ssh_transport.py).

`SshHost` implements the Host protocol over one SSH connection: one long-lived
remote shell for commands, one exec channel per spawned process (hosts/ssh_process.py),
and one for the run's watchdog on the host.

Everything lives in the host's work directory, which must be root's own and writable by
no one else (hosts/remote_workdir.py; made with mode 0700 when missing). What a run
leaves on the remote host is written down there first, in a per-host ledger,
`<workdir>/<prefix>.ledger.jsonl` (the same add/remove lines as the local ledger), and
the run's own files live in `<workdir>/<prefix>/` (mode 0700, files 0600). The local
ledger records an `ssh` entry for each remote host before connecting to it, so
`secperf clean` finds the remote ledgers of a run that died and empties them over SSH
(hosts/remote_teardown.py).

The host's nftables ruleset, iptables-legacy tables and ipsets are saved when the run
starts (a `state` entry in the remote ledger) and put back at teardown, or by the
host's watchdog as soon as the controller is gone. Every rule set loaded there with
`nft -f` or an `*tables-restore` gets an accept for this SSH session first in every
chain that sees the host's own packets (hosts/mgmt_guard.py): no rule secperf loads
cuts the session that drives the host.

The engine is put on each host as `<workdir>/secperf-engine`, copied when missing
or different (sha256), and run once (`version`) to prove it runs there; an argv
that names this machine's engine, or a file under a staged directory (the run's
rendered rule files), is rewritten to the remote copy.
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from secperf import verbose
from secperf.errors import TestbedError
from secperf.testbed.hosts.mgmt_guard import GuardError, Management, guarded, loads_rules
from secperf.testbed.hosts.protocol import (
    BackendKind,
    BuildContext,
    InterfaceCounters,
    ManagedProcess,
    Power,
    Redirect,
    Switch,
    parse_ip_stats,
)
from secperf.testbed.hosts.remote_teardown import (
    SAVE,
    remote_ledger,
    remote_rundir,
    remote_teardown,
    setting_line,
    setting_problem,
)
from secperf.testbed.hosts.remote_workdir import check_workdir
from secperf.testbed.hosts.ssh_process import (
    WRAPPER,
    HostWatchdog,
    RemotePopen,
    RemoteProcess,
)
from secperf.testbed.hosts.ssh_transport import (
    CONNECT_TIMEOUT_S,
    RemoteShell,
    SshSpec,
    connect,
    remote_run,
    sha256_file,
    upload,
)
from secperf.testbed.ledger import Ledger
from secperf.tools import engine_path, remote_engine_file

ENGINE_NAME = "secperf-engine"


class SshHost:
    """A host that is a remote machine reached over SSH."""

    def __init__(
        self,
        spec: SshSpec,
        prefix: str,
        ledger: Ledger,
        *,
        engine: str | None = None,
        upload: str | None = None,
        stage_dirs: Sequence[Path] = (),
    ) -> None:
        """`engine` is the engine's path in commands made here; `upload` the binary
        copied to the host in its place (the static build; default: `engine`)."""
        self.spec = spec
        self.role = spec.name
        self.prefix = prefix
        self._ledger = ledger
        self._engine_local = engine
        self._engine_upload = upload or engine
        self._stage_dirs = [str(Path(d).resolve()) for d in stage_dirs]
        self._staged: dict[str, tuple[float, int]] = {}
        self._client: Any = None
        self._processes: list[RemoteProcess] = []
        self.engine_remote = posixpath.join(spec.workdir, ENGINE_NAME)
        self.rundir = remote_rundir(spec, prefix)
        self.remote_ledger = remote_ledger(spec, prefix)
        self.engine_version: str | None = None
        self._lock = threading.RLock()
        self._shell: RemoteShell | None = None
        self._watchdog: HostWatchdog | None = None
        # This session as the host sees it: every rule set loaded there accepts it first.
        self.management: Management | None = None

    @classmethod
    def build(cls, name: str, bed: BuildContext, spec: SshSpec) -> SshHost:
        """The factory: settings are the inventory's SshSpec; the engine is copied there
        (the static build where there is one)."""
        return cls(
            spec,
            bed.prefix,
            bed.ledger,
            engine=engine_path(),
            upload=remote_engine_file(),
            stage_dirs=bed.stage_dirs,
        )

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def where(self) -> str:
        return f"host {self.spec.name} (ssh {self.spec.destination})"

    @property
    def location(self) -> str:
        return f"ssh://{self.spec.destination}"

    @property
    def local_links(self) -> bool:
        return False  # cabled in the lab

    # -- life cycle (the Backend protocol) ----------------------------------------------

    def open(self) -> None:
        """Connect, check the work directory, write down the remote ledger and run dir,
        save the host's firewall as found, start the run's watchdog, put the engine
        there."""
        self._ledger.add("ssh", **self.spec.as_entry(), prefix=self.prefix)
        self._client = connect(self.spec)
        check_workdir(self._client, self.spec, create=True, where=self.where)
        seen = remote_run(self._client, 'printf "%s" "$SSH_CONNECTION"', where=self.where)
        self.management = Management.parse(seen.stdout)
        self._shell = RemoteShell(self._client, self.rundir, self.where)
        w = shlex.quote
        header = json.dumps(
            {"op": "run", "prefix": self.prefix, "controller": socket.gethostname()}
        )
        lines = [
            header,
            json.dumps({"op": "add", "type": "file", "path": self.rundir}),
            json.dumps({"op": "add", "type": "state", "path": self.rundir}),
        ]
        self._must(
            f"umask 077 && [ ! -e {w(self.remote_ledger)} ] && "
            f"printf '%s\\n' {' '.join(w(line) for line in lines)} > {w(self.remote_ledger)} "
            f"&& mkdir {w(self.rundir)} && {shlex.join(['sh', '-c', SAVE, 'save', self.rundir])}",
            "could not make its ledger and run directory, or save its firewall as found",
            f"check that {self.spec.user} may write {self.spec.workdir} there, and that no "
            f"other run uses prefix {self.prefix}",
        )
        self._watchdog = HostWatchdog(
            self._client, self.rundir, self.remote_ledger, self.spec.watchdog_s, self.where
        )
        if self._engine_upload is not None:
            if not self.spec.keep_engine:
                self.track_file(self.engine_remote)  # removed with the run's files
            self.engine_version = self._put_engine(self._engine_upload)

    def start(self) -> None:
        """Nothing: a real machine's links are its own."""

    def _must(self, cmd: str, what: str, fix: str) -> str:
        proc = remote_run(self._client, cmd, where=self.where)
        if proc.returncode != 0:
            raise TestbedError(
                f"{what}: {(proc.stderr or proc.stdout).strip()}", where=self.where, fix=fix
            )
        return proc.stdout

    def _put_engine(self, local: str) -> str:
        """Copy the engine if it is missing or differs; return the version it reports there."""
        want = sha256_file(local)
        q = shlex.quote(self.engine_remote)
        have = remote_run(
            self._client, f"sha256sum {q} 2>/dev/null | cut -d' ' -f1", where=self.where
        ).stdout.strip()
        if have != want:
            tmp = f"{self.engine_remote}.{self.prefix}.part"
            upload(self._client, local, tmp, where=self.where)
            self._must(
                f"chmod 755 {shlex.quote(tmp)} && mv -f {shlex.quote(tmp)} {q}",
                "could not install the engine",
                f"check that {self.spec.workdir} is writable there",
            )
        out = self._must(
            f"{q} version",
            "the engine does not run there",
            "the host needs x86_64 Linux; without the static build (`make setup-all` makes it "
            "in engine/target/static) the copied binary also needs Debian 12's glibc or newer",
        )
        try:
            return str(json.loads(out.strip().splitlines()[0]).get("version"))
        except (ValueError, IndexError, AttributeError):
            raise TestbedError(
                f"the engine there answered `version` with {out.strip()[:200]!r}",
                where=self.where,
                fix="remove it (it is copied again on the next run)",
            ) from None

    def close(self) -> list[str]:
        """Stop what this run started there, empty its remote ledger, disconnect."""
        with self._lock:
            removed: list[str] = []
            for proc in reversed(self._processes):
                if proc.returncode is None:
                    removed.append(f"process {proc.pid} ({proc.label}) on {self.name}")
                proc.stop(timeout=2.0)
            if self._shell is not None:
                self._shell.close()
            if self._watchdog is not None:
                self._watchdog.disarm()  # the teardown below does its work, in order
                self._watchdog = None
            if self._client is not None:
                try:
                    removed += remote_teardown(self._client, self.spec, self.prefix)
                finally:
                    self._client.close()
                    self._client = None
            self._ledger.remove("ssh", name=self.spec.name, prefix=self.prefix)
            return removed

    # -- the host interface -----------------------------------------------------------

    @property
    def cpu_groups(self) -> list[dict[str, Any]]:
        return []  # no cgroup is made on a remote host: CPU there is the engine's own

    @property
    def runs_commands(self) -> bool:
        return True

    @property
    def shares_files(self) -> bool:
        return False  # another machine: its files are its own

    @property
    def ledger(self) -> Ledger | None:
        return None  # nothing local is made for it (its own ledger is remote)

    @property
    def power(self) -> Power | None:
        return None

    @property
    def switch(self) -> Switch | None:
        return None

    def proc_stat(self) -> dict[str, int] | None:
        return None  # not read on a remote machine (docs/methodology.md)

    def translate(self, argv: Sequence[str]) -> list[str]:
        """This machine's engine and staged files -> their copies on the host."""
        out: list[str] = []
        for arg in argv:
            if self._engine_local is not None and arg == self._engine_local:
                out.append(self.engine_remote)
                continue
            staged = self._stage(arg)
            out.append(staged if staged is not None else arg)
        return out

    def _stage(self, arg: str) -> str | None:
        if not arg.startswith("/") or not self._stage_dirs:
            return None
        path = str(Path(arg).resolve())
        root = next((d for d in self._stage_dirs if path.startswith(d + "/")), None)
        if root is None or not os.path.isfile(path):
            return None
        remote = posixpath.join(self.rundir, "files", os.path.relpath(path, root))
        st = os.stat(path)
        if self._staged.get(path) != (st.st_mtime, st.st_size):
            self._must(
                f"umask 077 && mkdir -p {shlex.quote(posixpath.dirname(remote))}",
                "could not copy a file there",
                "check the work directory",
            )
            upload(self._client, path, remote, where=self.where)
            self._staged[path] = (st.st_mtime, st.st_size)
        return remote

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float = 30.0,
    ) -> subprocess.CompletedProcess[str]:
        if self._client is None:
            raise TestbedError(f"{self.where} is not connected", fix="this is a bug")
        assert self._shell is not None
        if loads_rules(argv) is not None:
            argv, input = self._guard(argv, input)
        cmd = shlex.join(self.translate(argv))
        verbose.command(f"[ssh {self.name}] {cmd}")
        proc = self._shell.run(cmd, input=input, timeout=timeout)
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()
            raise TestbedError(
                f"command failed (exit {proc.returncode}) on {self.name}: {proc.args}\n  {detail}",
                where=self.where,
                fix="read the command's error above; `secperf clean` removes leftovers",
            )
        return proc

    def _guard(self, argv: Sequence[str], input: str | None) -> tuple[list[str], str | None]:
        """A rule load, rewritten so that the rules it loads accept this session first
        (hosts/mgmt_guard.py). Rules given as input stay input; a file (the run's
        rendered rules) is loaded from a guarded copy beside it, `NAME.ssh-HOST.SUFFIX`
        (kept in the run directory: what was loaded there), copied to the host."""
        files = [a for a in argv[1:] if not a.startswith("-") and a != "-"]
        try:
            if self.management is None:
                raise GuardError(
                    "sshd did not say which connection this is ($SSH_CONNECTION is empty)"
                )
            if input is not None:
                return guarded(argv, input, self.management)
            if len(files) != 1 or not os.path.isfile(files[0]):
                raise GuardError(f"the rules of `{shlex.join(argv)}` are not readable here")
            source = Path(files[0])
            new_argv, text = guarded(argv, source.read_text(), self.management)
            if not any(str(source.resolve()).startswith(d + "/") for d in self._stage_dirs):
                return new_argv, text  # not one of the run's files: as input
            copy = source.with_name(f"{source.stem}.ssh-{self.name}{source.suffix}")
            if not copy.is_file() or copy.read_text() != text:
                copy.write_text(text)
            if new_argv[-1:] == ["-"] or "-" in new_argv:  # nft -f -: the copy instead
                new_argv[new_argv.index("-")] = str(copy)
                return new_argv, None
            return [*new_argv, str(copy)], None
        except GuardError as exc:
            raise TestbedError(
                f"refused on {self.name}: {exc.message}; secperf loads rules on an SSH host "
                "only with an accept for its own session first, so that no rule cuts it",
                where=self.where,
                fix="write the rules in one file without `include`, in nft's block or "
                "command syntax, loaded with nft -f or iptables-restore",
            ) from None

    def spawn(
        self,
        argv: Sequence[str],
        *,
        stdout: Redirect = subprocess.DEVNULL,
        stderr: Redirect = subprocess.DEVNULL,
        label: str = "",
        stdin: Redirect = subprocess.DEVNULL,
        env: dict[str, str] | None = None,
        pass_fds: Sequence[int] = (),
    ) -> ManagedProcess:
        if self._client is None:
            raise TestbedError(f"{self.where} is not connected", fix="this is a bug")
        if pass_fds:
            raise TestbedError(
                f"cannot pass open files to a process on {self.name} over SSH",
                where=self.where,
                fix="this is a bug: a remote host has no cpu_groups",
            )
        label = label or posixpath.basename(argv[0])
        safe_label = "".join(c for c in label if c.isalnum() or c in "-_.")
        env_argv = ["env", *(f"{k}={v}" for k, v in (env or {}).items())] if env else []
        cmd = shlex.join(
            [
                "sh",
                "-c",
                WRAPPER,
                "secperf-wrap",
                self.remote_ledger,
                safe_label,
                "20",
                *env_argv,
                *self.translate(argv),
            ]
        )
        verbose.command(f"[ssh {self.name}] {shlex.join(self.translate(argv))}")
        try:
            chan = self._client.get_transport().open_session(timeout=CONNECT_TIMEOUT_S)
            chan.exec_command(cmd)
        except (OSError, EOFError, AttributeError) as exc:
            raise TestbedError(
                f"lost the SSH connection starting {label}: {exc!r}", where=self.where
            ) from None
        popen = RemotePopen(chan, list(argv), stdout, stderr, on_pid=lambda _p, _s: None)
        proc = RemoteProcess(popen, host=self, label=label, argv=list(argv))
        if not proc.pid:
            proc.stop(timeout=1.0)
            raise TestbedError(
                f"{label} did not start on {self.name} (no pid from the watchdog)",
                where=self.where,
                fix="check that sh, sed, setsid (util-linux) and env --default-signal "
                "(coreutils 8.31 or newer: Debian 11+) exist there",
            )
        self._processes.append(proc)
        return proc

    def interface_counters(self) -> dict[str, InterfaceCounters]:
        return parse_ip_stats(self.run(["ip", "-s", "-j", "link", "show"]).stdout)

    def cpu_seconds(self) -> float | None:
        return None  # not counted per host on a remote machine (docs/methodology.md)

    def memory_bytes(self) -> int:
        pids = [str(p.pid) for p in self._processes if p.returncode is None and p.pid]
        if not pids:
            return 0
        script = (
            'total=0; todo="$*"; while [ -n "$todo" ]; do set -- $todo; p=$1; shift; '
            'todo="$*"; kb=$(sed -n "s/^VmRSS:[^0-9]*\\([0-9]*\\).*/\\1/p" /proc/$p/status '
            "2>/dev/null); total=$((total + ${kb:-0})); "
            'kids=$(cat /proc/$p/task/*/children 2>/dev/null); todo="$todo $kids"; '
            'todo=$(echo $todo); done; echo "$total"'
        )
        out = self.run(["sh", "-c", script, "rss", *pids], check=False).stdout.strip()
        return int(out or 0) * 1024

    def stop_started(self) -> list[str]:
        stopped: list[str] = []
        for proc in reversed(self._processes):
            if proc.returncode is None:
                proc.stop(timeout=2.0)
                stopped.append(f"process {proc.pid} ({proc.label})")
        return stopped

    def track_file(self, path: str) -> None:
        self._ledger_line(json.dumps({"op": "add", "type": "file", "path": path}))

    def track_setting(self, path: str, value: str) -> None:
        """A `setting` line (remote_teardown.SETTINGS writes it back, at teardown and
        from the watchdog); only a path and value it would act on."""
        problem = setting_problem(path, value)
        if problem is not None:
            raise TestbedError(
                f"secperf puts back only network settings it can name safely: {problem}",
                where=self.where,
            )
        self._ledger_line(setting_line(path, value))

    def _ledger_line(self, line: str) -> None:
        q = shlex.quote
        self.run(["sh", "-c", f"printf '%s\\n' {q(line)} >> {q(self.remote_ledger)}"])

    def ifname(self, peer: str) -> str:
        """The interface toward `peer`, from the inventory."""
        try:
            return self.spec.interfaces[peer]
        except KeyError:
            raise TestbedError(
                f"the inventory gives host {self.name} no interface toward {peer}",
                where=f"[testbed.hosts.{self.name}] interfaces",
                fix=f'add interfaces = {{ {peer} = "eth1" }} (the interface cabled to {peer})',
            ) from None

    def __repr__(self) -> str:
        return f"SshHost({self.spec.name!r}, {self.spec.destination})"


# A Linux machine of a lab that secperf logs in to.
KIND = BackendKind(name="ssh", build=SshHost.build, inventory=True, lab=True, logs_in=True)
