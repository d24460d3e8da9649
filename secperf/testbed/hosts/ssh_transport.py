"""The SSH transport: how secperf reaches a machine over SSH, apart from what it does
there (hosts/ssh.py, the host backend; hosts/remote_teardown.py, the clean-up).

paramiko: a synchronous API like the rest of the control plane, channels that carry
a process's stdin, stdout, stderr and exit status. Authentication is by key only:
the user's agent, or the key file the inventory names; a scenario never holds a
password. Host keys are checked against the inventory's known_hosts file (or
~/.ssh/known_hosts) and an unknown key is refused (RejectPolicy) unless the
inventory turns checking off: then a host's key is trusted on first use and saved
(tofu_file(): $XDG_CONFIG_HOME/secperf/known_hosts, else ~/.config/secperf/known_hosts),
and a key that differs from the saved one later is refused. Every command is
shell-quoted with `shlex`; a long session's commands come back framed by a random
marker with their lengths (RemoteShell); files are copied with `cat` on an exec
channel (no SFTP needed). What secperf writes on a host it writes under umask 077.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import posixpath
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secperf.errors import TestbedError

CONNECT_TIMEOUT_S = 10.0
# Where secperf works on a lab host unless the inventory says otherwise: root's own,
# never world-writable (hosts/remote_workdir.py checks it).
DEFAULT_WORKDIR = "/var/lib/secperf"
# The remote watchdog's deadline: no heartbeat from the controller for this long and
# it stops what the run started on the host and puts its firewall back.
WATCHDOG_S = 30.0


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
    workdir: str = DEFAULT_WORKDIR
    addresses: tuple[str, ...] = ()  # the test addresses this host may be sent traffic on
    interfaces: dict[str, str] = field(default_factory=dict)  # peer host -> interface name
    keep_engine: bool = True  # leave <workdir>/secperf-engine for the next run
    watchdog_s: float = WATCHDOG_S  # the remote watchdog's deadline without a heartbeat

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


def tofu_file() -> Path:
    """Where keys trusted on first use are kept (host_key_checking = false)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "secperf" / "known_hosts"


class TrustOnFirstUse:
    """paramiko's missing-host-key policy for host_key_checking = false: a host with no
    saved key has the one it shows saved (OpenSSH's format, in tofu_file()); a host
    that has a saved key of another type is refused (a man in the middle would show
    whatever type it holds). A key that differs from a saved one of its type is
    refused (BadHostKeyException): by paramiko for the keys loaded when it connected,
    here for one another connection saved since."""

    def __init__(self, path: Path, known: Any) -> None:
        self.path = path
        self.known = known  # the known_hosts keys (read only), a paramiko.HostKeys

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        import paramiko  # type: ignore[import-untyped]

        # Hosts are reached in parallel (`secperf check`), runs may overlap: the file is
        # read again and appended to under a lock, never rewritten from a stale copy.
        with _TOFU_LOCK, open(self.path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            kept = paramiko.HostKeys()
            kept.load(str(self.path))
            saved = kept.lookup(hostname) or self.known.lookup(hostname)
            if not saved:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            elif key.get_name() not in saved:
                raise paramiko.SSHException(
                    f"host key of {hostname} is {key.get_name()}, but the key saved for it in "
                    f"{self.path} is {', '.join(saved.keys())}: refused"
                )
            elif saved[key.get_name()] != key:
                raise paramiko.BadHostKeyException(hostname, key, saved[key.get_name()])
            # else: saved meanwhile by another connection, the same key
        client.get_host_keys().add(hostname, key.get_name(), key)


_TOFU_LOCK = threading.Lock()


def _host_key_policy(client: Any, spec: SshSpec, where: str) -> Any:
    """Load the keys to check against; return the policy for a host with none."""
    import paramiko

    known = os.path.expanduser(spec.known_hosts or "~/.ssh/known_hosts")
    try:
        if spec.known_hosts:
            client.load_system_host_keys(known)
        else:
            client.load_system_host_keys()
    except OSError as exc:
        raise TestbedError(
            f"cannot read known_hosts {spec.known_hosts}: {exc}",
            where=where,
            fix="point known_hosts at a readable file with the host's key "
            "(ssh-keyscan HOST >> FILE)",
        ) from None
    if spec.host_key_checking:
        return paramiko.RejectPolicy()
    path = tofu_file()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.exists():
            path.touch(mode=0o600)
        client.load_host_keys(str(path))
    except OSError as exc:
        raise TestbedError(
            f"cannot keep host keys trusted on first use in {path}: {exc}",
            where=where,
            fix="make that directory writable, set XDG_CONFIG_HOME elsewhere, or set "
            "host_key_checking = true with a known_hosts file",
        ) from None
    keys = paramiko.HostKeys()
    if os.path.isfile(known):
        keys.load(known)
    return TrustOnFirstUse(path, keys)


def connect(spec: SshSpec) -> Any:
    """An authenticated paramiko SSHClient, or a TestbedError saying what failed."""
    import paramiko

    client = paramiko.SSHClient()
    where = f"ssh {spec.destination} (host {spec.name})"
    client.set_missing_host_key_policy(_host_key_policy(client, spec, where))
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
    except paramiko.BadHostKeyException as exc:
        client.close()
        kept = spec.known_hosts or "~/.ssh/known_hosts"
        if not spec.host_key_checking:
            kept += f" or {tofu_file()}"
        raise TestbedError(
            f"the host key of {exc.hostname} ({exc.key.get_name()}) is not the one known for "
            f"it in {kept}: another machine answers on its address, or it was reinstalled",
            where=where,
            fix="check the host; if it was reinstalled, remove its line from that file and "
            "compare the new fingerprint before trusting it",
        ) from None
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
        chan.exec_command(f"umask 077 && cat > {shlex.quote(remote)}")
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
        self._chan.exec_command("umask 077 && exec sh -s")
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


def sha256_file(path: str) -> str:
    """The sha256 of a local file, hex (is the copy there the same binary?)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
