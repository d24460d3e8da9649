"""The SSH host backend: a real machine reached over SSH (hosts/ssh_transport.py).

`SshHost` implements the Host protocol over one SSH connection: one long-lived
remote shell for commands, one exec channel per spawned process.

What a run leaves on the remote host is written down there first, in a per-host
ledger, `<workdir>/<prefix>.ledger.jsonl` (the same add/remove lines as the local
ledger), and the run's own files live in `<workdir>/<prefix>/`. The local ledger
records an `ssh` entry for each remote host before connecting to it, so `secperf
clean` finds the remote ledgers of a run that died and empties them over SSH
(hosts/remote_teardown.py).

Every process `spawn` starts runs under a small POSIX sh watchdog (WRAPPER): the
program is started with `setsid` (its own process group), its pid and
/proc starttime go into the remote ledger, and a watcher blocks on the SSH
channel's stdin. When the channel closes (`stop`, Ctrl-C's teardown, secperf
killed, the connection lost) the watcher's read ends and it sends SIGTERM, then
SIGKILL, to the whole group: a remote process never outlives the connection that
started it.

The engine is put on each host as `<workdir>/secperf-engine`, copied when missing
or different (sha256), and run once (`version`) to prove it runs there; an argv
that names this machine's engine, or a file under a staged directory (the run's
rendered rule files), is rewritten to the remote copy.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, cast

from secperf import verbose
from secperf.errors import TestbedError
from secperf.testbed.hosts.protocol import (
    BuildContext,
    InterfaceCounters,
    ManagedProcess,
    Power,
    Redirect,
    Switch,
    parse_ip_stats,
)
from secperf.testbed.hosts.remote_teardown import remote_ledger, remote_rundir, remote_teardown
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

# argv: sh -c WRAPPER secperf-wrap LEDGER LABEL GRACE PROGRAM ARGS...
WRAPPER = r"""
ledger=$1; label=$2; grace=$3; shift 3
exec 3<&0 </dev/null
# A background job of a non-interactive shell ignores SIGINT: put it back, so that
# SIGINT still asks the engine to stop early and report (a flood's interrupt).
setsid env --default-signal=INT,QUIT "$@" &
child=$!
st=$(sed 's/.*) //' "/proc/$child/stat" 2>/dev/null | cut -d' ' -f20)
[ -n "$st" ] || st=0
printf '{"op":"add","type":"process","pid":%s,"starttime":%s,"pgid":%s,"label":"%s"}\n' \
  "$child" "$st" "$child" "$label" >> "$ledger"
printf 'secperf-remote-pid %s %s\n' "$child" "$st" >&2
setsid sh -c 'while read -r _; do :; done
  kill -s TERM -- "-$1" 2>/dev/null
  i=0; while [ $i -lt "$2" ] && kill -s 0 -- "-$1" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
  kill -s KILL -- "-$1" 2>/dev/null' watchdog "$child" "$grace" <&3 >/dev/null 2>&1 &
watcher=$!
exec 3<&-
wait "$child"; rc=$?
kill -s KILL -- "-$watcher" 2>/dev/null
kill -s KILL -- "-$child" 2>/dev/null
printf '{"op":"remove","type":"process","pid":%s,"starttime":%s}\n' "$child" "$st" >> "$ledger"
exit $rc
"""


class RemotePopen:
    """A Popen look-alike over an SSH channel: stdout as a real pipe (selectors work
    on it), stderr copied to a file, the exit status, signals by remote `kill`."""

    def __init__(
        self,
        chan: Any,
        args: list[str],
        stdout: Redirect,
        stderr: Redirect,
        on_pid: Callable[[int, int], None],
    ) -> None:
        self.chan = chan
        self.args = args
        self.returncode: int | None = None
        self.pid = 0
        self.starttime = 0
        self._pid_seen = threading.Event()
        self._on_pid = on_pid
        self.stdout: IO[str] | None = None
        self.stderr: IO[str] | None = None
        self._stdout_w: int | None = None
        if stdout == subprocess.PIPE:
            r, w = os.pipe()
            self.stdout = os.fdopen(r, "r")
            self._stdout_w = w
        self._out_sink = cast(IO[Any], stdout) if _is_file(stdout) else None
        self._err_sink = cast(IO[Any], stderr) if _is_file(stderr) else None
        self._threads = [
            threading.Thread(target=self._pump_out, daemon=True),
            threading.Thread(target=self._pump_err, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _pump_out(self) -> None:
        try:
            while True:
                data = self.chan.recv(65536)
                if not data:
                    break
                if self._stdout_w is not None:
                    _write_all(self._stdout_w, data)
                elif self._out_sink is not None:
                    _write_all(self._out_sink.fileno(), data)
        except OSError:
            pass
        finally:
            if self._stdout_w is not None:
                os.close(self._stdout_w)
                self._stdout_w = None

    def _pump_err(self) -> None:
        buf = b""
        try:
            while True:
                data = self.chan.recv_stderr(65536)
                if not data:
                    break
                if not self._pid_seen.is_set():
                    buf += data
                    if b"\n" not in buf:
                        continue
                    data = self._take_pid(buf)
                    buf = b""
                if data and self._err_sink is not None:
                    _write_all(self._err_sink.fileno(), data)
        except OSError:
            pass
        finally:
            self._pid_seen.set()

    def _take_pid(self, buf: bytes) -> bytes:
        """Strip the wrapper's `secperf-remote-pid PID STARTTIME` line; return the rest."""
        rest: list[bytes] = []
        for line in buf.splitlines(keepends=True):
            parts = line.split()
            if not self._pid_seen.is_set() and parts[:1] == [b"secperf-remote-pid"]:
                self.pid, self.starttime = int(parts[1]), int(parts[2])
                self._on_pid(self.pid, self.starttime)
                self._pid_seen.set()
            else:
                rest.append(line)
        return b"".join(rest)

    def wait_pid(self, timeout: float) -> bool:
        return self._pid_seen.wait(timeout)

    def poll(self) -> int | None:
        if self.returncode is None and self.chan.exit_status_ready():
            rc = self.chan.recv_exit_status()
            # The wrapper passes on the shell's 128+N for a program killed by signal N.
            self.returncode = -(rc - 128) if rc > 128 else rc
        if self.returncode is None and self.chan.closed:
            self.returncode = -9  # the connection is gone, and the watchdog took it down
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.005)
        for t in self._threads:
            t.join(timeout=2.0)
        assert self.returncode is not None
        return self.returncode

    def close_stdin(self) -> None:
        """End the channel's input: the watchdog then stops the process group."""
        with contextlib.suppress(OSError, EOFError):
            self.chan.shutdown_write()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        out = self.stdout.read() if self.stdout is not None else ""
        return out, ""


def _is_file(redirect: Redirect) -> bool:
    return redirect is not None and not isinstance(redirect, int) and hasattr(redirect, "fileno")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class RemoteProcess(ManagedProcess):
    """A process started on a remote host under the watchdog; `stop` closes its
    channel's input (the watchdog sends TERM, then KILL, to its group)."""

    def __init__(self, popen: RemotePopen, *, host: SshHost, label: str, argv: list[str]):
        self.popen = cast(subprocess.Popen[Any], popen)
        self._remote = popen
        self._host = host
        self.label = label
        self.host = host.name
        self.argv = argv
        popen.wait_pid(10.0)
        self.pid = popen.pid
        self.starttime = popen.starttime
        self._stopped = False

    def _exited(self) -> bool:
        return self._remote.poll() is not None

    def send_signal(self, sig: int) -> None:
        if self._remote.poll() is None and self.pid:
            name = signal.Signals(sig).name.removeprefix("SIG")
            self._host.run(["kill", "-s", name, str(self.pid)], check=False)

    def stop(self, timeout: float = 5.0) -> int | None:
        if not self._stopped:
            self._remote.close_stdin()
            try:
                self._remote.wait(timeout + 10.0)
            except subprocess.TimeoutExpired:
                self._remote.chan.close()
                self._remote.returncode = -9
            self._stopped = True
        return self._remote.returncode

    def _signal(self, sig: int) -> None:
        self.send_signal(sig)

    def __repr__(self) -> str:
        return f"RemoteProcess(pid={self.pid}, label={self.label!r}, host={self.host!r})"


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
        """Connect, write down the remote ledger and run dir, put the engine there."""
        self._ledger.add("ssh", **self.spec.as_entry(), prefix=self.prefix)
        self._client = connect(self.spec)
        self._shell = RemoteShell(self._client, self.rundir, self.where)
        w = shlex.quote
        header = json.dumps(
            {"op": "run", "prefix": self.prefix, "controller": socket.gethostname()}
        )
        self._must(
            f"mkdir -p {w(self.spec.workdir)} && "
            f"[ ! -e {w(self.remote_ledger)} ] && "
            f"printf '%s\\n' {w(header)} > {w(self.remote_ledger)} && "
            f"printf '%s\\n' {w(json.dumps({'op': 'add', 'type': 'file', 'path': self.rundir}))}"
            f" >> {w(self.remote_ledger)} && mkdir {w(self.rundir)}",
            "could not make its work directory and ledger",
            f"check that {self.spec.user} may write {self.spec.workdir} there, and that no "
            f"other run uses prefix {self.prefix}",
        )
        # Its firewall as found: put back at teardown if a mechanism changed it.
        saved = posixpath.join(self.rundir, "nft-ruleset-before")
        self.run(
            ["sh", "-c", f"command -v nft >/dev/null || exit 0; nft list ruleset > {w(saved)}"]
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
            "the host needs x86_64 Linux; without the static build (`make setup` makes it "
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
                f"mkdir -p {shlex.quote(posixpath.dirname(remote))}",
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
        line = json.dumps({"op": "add", "type": "file", "path": path})
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
