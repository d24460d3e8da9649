"""The SSH backend of the host interface: a real machine reached over SSH.

`SshHost` implements secperf.testbed.host.Host over one SSH connection (paramiko:
a synchronous API like the rest of the control plane, channels that carry a
process's stdin, stdout, stderr and exit status, and SFTP for copying the engine
and rule files). Authentication is by key only: the user's agent, or the key file
the inventory names; a scenario never holds a password. Host keys are checked
against the inventory's known_hosts file (or ~/.ssh/known_hosts).

What a run leaves on the remote host is written down there first, in a per-host
ledger, `<workdir>/<prefix>.ledger.jsonl` (the same add/remove lines as the local
ledger), and the run's own files live in `<workdir>/<prefix>/`. The local ledger
records an `ssh` entry for each remote host before connecting to it, so `secperf
clean` finds the remote ledgers of a run that died and empties them over SSH.

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
import hashlib
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from secperf import verbose
from secperf.errors import TestbedError
from secperf.testbed.host import InterfaceCounters, Redirect
from secperf.testbed.ledger import Ledger
from secperf.testbed.netns import ManagedProcess, parse_ip_stats

ENGINE_NAME = "secperf-engine"
CONNECT_TIMEOUT_S = 10.0

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


@dataclass(frozen=True)
class SshSpec:
    """How to reach one remote host and what of it the test may use (the inventory)."""

    name: str  # the host's name in the testbed graph
    host: str  # ansible_host: address or DNS name of its management interface
    user: str = "root"
    port: int = 22
    key_file: str | None = None  # None: the agent (and ~/.ssh's default keys)
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    host_key_checking: bool = True
    workdir: str = "/var/tmp/secperf"
    addresses: tuple[str, ...] = ()  # the test addresses this host may be sent traffic on
    interfaces: dict[str, str] = field(default_factory=dict)  # peer host -> interface name
    keep_engine: bool = True  # leave <workdir>/secperf-engine for the next run

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def as_entry(self) -> dict[str, Any]:
        """The fields `secperf clean` needs to come back (no secret: a key's path only)."""
        return {
            "name": self.name,
            "host": self.host,
            "user": self.user,
            "port": self.port,
            "key_file": self.key_file,
            "known_hosts": self.known_hosts,
            "host_key_checking": self.host_key_checking,
            "workdir": self.workdir,
        }

    @classmethod
    def from_entry(cls, e: dict[str, Any]) -> SshSpec:
        return cls(
            name=str(e["name"]),
            host=str(e["host"]),
            user=str(e["user"]),
            port=int(e["port"]),
            key_file=e.get("key_file"),
            known_hosts=e.get("known_hosts"),
            host_key_checking=bool(e.get("host_key_checking", True)),
            workdir=str(e["workdir"]),
        )


def connect(spec: SshSpec) -> Any:
    """An authenticated paramiko SSHClient, or a TestbedError saying what failed."""
    import paramiko  # type: ignore[import-untyped]

    client = paramiko.SSHClient()
    where = f"ssh {spec.destination} (host {spec.name})"
    try:
        if spec.known_hosts:
            client.load_host_keys(os.path.expanduser(spec.known_hosts))
        else:
            client.load_system_host_keys()
    except OSError as exc:
        raise TestbedError(
            f"cannot read known_hosts {spec.known_hosts}: {exc}",
            where=where,
            fix="point known_hosts at a readable file with the host's key "
            "(ssh-keyscan HOST >> FILE)",
        ) from None
    client.set_missing_host_key_policy(
        paramiko.RejectPolicy() if spec.host_key_checking else paramiko.AutoAddPolicy()
    )
    try:
        client.connect(
            spec.host,
            port=spec.port,
            username=spec.user,
            key_filename=os.path.expanduser(spec.key_file) if spec.key_file else None,
            allow_agent=True,
            look_for_keys=spec.key_file is None,
            timeout=CONNECT_TIMEOUT_S,
            banner_timeout=CONNECT_TIMEOUT_S,
            auth_timeout=CONNECT_TIMEOUT_S,
        )
    except paramiko.SSHException as exc:
        client.close()
        detail = str(exc) or type(exc).__name__
        if "not found in known_hosts" in detail:
            fix = (
                f"add its host key: ssh-keyscan -p {spec.port} {spec.host} >> "
                f"{spec.known_hosts or '~/.ssh/known_hosts'} (check the fingerprint)"
            )
        else:
            fix = (
                "check the key (ansible_ssh_private_key_file, or load it into ssh-agent) and "
                "that the user may log in with it"
            )
        raise TestbedError(f"cannot log in: {detail}", where=where, fix=fix) from None
    except (TimeoutError, OSError) as exc:
        client.close()
        raise TestbedError(
            f"cannot reach the host: {exc}",
            where=where,
            fix="check ansible_host / ansible_port and that sshd runs there",
        ) from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)  # a dead link is noticed in seconds, not hours
    return client


def remote_run(
    client: Any,
    argv: Sequence[str] | str,
    *,
    input: str | None = None,
    timeout: float = 30.0,
    where: str = "",
) -> subprocess.CompletedProcess[str]:
    """Run one command over an open connection; never raises on a non-zero exit."""
    cmd = argv if isinstance(argv, str) else shlex.join(argv)
    try:
        chan = client.get_transport().open_session(timeout=CONNECT_TIMEOUT_S)
        chan.settimeout(timeout)
        chan.exec_command(cmd)
        if input is not None:
            chan.sendall(input.encode())
        chan.shutdown_write()
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout
        while True:
            if chan.recv_ready():
                out += chan.recv(65536)
            elif chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            elif chan.exit_status_ready() and chan.eof_received:
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                break
            elif time.monotonic() > deadline:
                chan.close()
                raise TestbedError(
                    f"command timed out after {timeout} s: {cmd}",
                    where=where,
                    fix="the remote host may be overloaded; `secperf clean` removes leftovers",
                )
            else:
                time.sleep(0.002)
        rc = chan.recv_exit_status()
        chan.close()
    except (OSError, EOFError, AttributeError) as exc:
        raise TestbedError(
            f"lost the SSH connection running {cmd}: {exc!r}",
            where=where,
            fix="check the network to the host; `secperf clean` removes what the run left there",
        ) from None
    return subprocess.CompletedProcess(
        cmd, rc, out.decode(errors="replace"), err.decode(errors="replace")
    )


def upload(client: Any, local: str, remote: str, *, where: str) -> None:
    """Copy a file with `cat > REMOTE` on an exec channel: no SFTP subsystem needed."""
    try:
        chan = client.get_transport().open_session(timeout=CONNECT_TIMEOUT_S)
        chan.settimeout(120.0)
        chan.exec_command(f"cat > {shlex.quote(remote)}")
        with open(local, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                chan.sendall(chunk)
        chan.shutdown_write()
        rc = chan.recv_exit_status()
        err = b""
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
        chan.close()
    except (OSError, EOFError, AttributeError) as exc:
        raise TestbedError(
            f"lost the SSH connection copying {local}: {exc!r}", where=where
        ) from None
    if rc != 0:
        raise TestbedError(
            f"could not write {remote}: {err.decode(errors='replace').strip()}",
            where=where,
            fix="check that the work directory is writable there",
        )


class RemoteShell:
    """One long-lived `sh` on an exec channel that runs command after command: an SSH
    session costs a fork, a login and a shell on the far side (~0.3 s on a loaded
    machine), a command here costs one subshell. Each command's stdout and stderr go
    to files in `tmpdir`, then come back framed by a random marker with their lengths
    and its exit status; its input comes as a here-document."""

    def __init__(self, client: Any, tmpdir: str, where: str) -> None:
        self._client = client
        self._tmp = tmpdir
        self._where = where
        self._mark = "secperf-" + os.urandom(8).hex()
        self._chan: Any = None
        self._out: Any = None
        self._lock = threading.Lock()

    def _open(self) -> None:
        self._chan = self._client.get_transport().open_session(timeout=CONNECT_TIMEOUT_S)
        self._chan.exec_command("exec sh -s")
        self._out = self._chan.makefile("rb")

    def close(self) -> None:
        if self._chan is not None:
            with contextlib.suppress(OSError, EOFError):
                self._chan.close()
        self._chan = self._out = None

    def run(
        self, cmd: str, *, input: str | None = None, timeout: float = 30.0
    ) -> subprocess.CompletedProcess[str]:
        q = shlex.quote
        out, err = q(posixpath.join(self._tmp, ".out")), q(posixpath.join(self._tmp, ".err"))
        if input is None:
            script = f"( {cmd}\n) </dev/null >{out} 2>{err}\n"
        else:
            end = "END-" + os.urandom(8).hex()
            body = input if input.endswith("\n") else input + "\n"
            script = f"( {cmd}\n) >{out} 2>{err} <<'{end}'\n{body}{end}\n"
        script += (
            f"printf '\\n%s %s %s %s\\n' {self._mark} $? "
            f"$(wc -c <{out}) $(wc -c <{err}); cat {out} {err}\n"
        )
        with self._lock:
            try:
                if self._chan is None:
                    self._open()
                self._chan.settimeout(timeout)
                self._chan.sendall(script.encode())
                while True:
                    line = self._out.readline()
                    if not line:
                        raise EOFError("the remote shell ended")
                    parts = line.split()
                    if parts[:1] == [self._mark.encode()]:
                        break
                rc, n_out, n_err = (int(x) for x in parts[1:4])
                stdout = self._out.read(n_out) if n_out else b""
                stderr = self._out.read(n_err) if n_err else b""
            except (OSError, EOFError, ValueError) as exc:
                self.close()
                if isinstance(exc, TimeoutError | socket.timeout):
                    raise TestbedError(
                        f"command timed out after {timeout} s: {cmd}",
                        where=self._where,
                        fix="the remote host may be overloaded; `secperf clean` removes leftovers",
                    ) from None
                raise TestbedError(
                    f"lost the SSH connection running {cmd}: {exc!r}",
                    where=self._where,
                    fix="check the network to the host; `secperf clean` removes what the run "
                    "left there",
                ) from None
        return subprocess.CompletedProcess(
            cmd, rc, stdout.decode(errors="replace"), stderr.decode(errors="replace")
        )


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


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
        self.rundir = posixpath.join(spec.workdir, prefix)
        self.remote_ledger = posixpath.join(spec.workdir, f"{prefix}.ledger.jsonl")
        self.engine_version: str | None = None
        self._lock = threading.RLock()
        self._shell: RemoteShell | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def where(self) -> str:
        return f"host {self.spec.name} (ssh {self.spec.destination})"

    # -- life cycle -------------------------------------------------------------------

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

    def _must(self, cmd: str, what: str, fix: str) -> str:
        proc = remote_run(self._client, cmd, where=self.where)
        if proc.returncode != 0:
            raise TestbedError(
                f"{what}: {(proc.stderr or proc.stdout).strip()}", where=self.where, fix=fix
            )
        return proc.stdout

    def _put_engine(self, local: str) -> str:
        """Copy the engine if it is missing or differs; return the version it reports there."""
        want = _sha256(local)
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


def _live(lines: list[str]) -> list[dict[str, Any]]:
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
    ledger = posixpath.join(spec.workdir, f"{prefix}.ledger.jsonl")
    rundir = posixpath.join(spec.workdir, prefix)
    text = remote_run(client, f"cat {q(ledger)} 2>/dev/null", where=where).stdout
    if not text:
        return []
    removed: list[str] = []
    live = _live(text.splitlines())
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
