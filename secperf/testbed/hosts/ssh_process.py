"""Processes on an SSH host: each under a small watchdog bound to its SSH channel
(WRAPPER, RemotePopen, RemoteProcess), and the host's own watchdog (HostWatchdog),
bound to the controller by a heartbeat.

Every process `SshHost.spawn` starts runs under a POSIX sh wrapper: the program is
started with `setsid` (its own process group), its pid and /proc starttime go into
the remote ledger, and a watcher blocks on the SSH channel's stdin. When the channel
closes (`stop`, Ctrl-C's teardown, secperf killed, the connection lost) the watcher's
read ends and it sends SIGTERM, then SIGKILL, to the whole group.

A channel closes only when sshd notices, and with its default settings sshd never
notices a link that went dead: so the host also runs one HostWatchdog for the run.
The controller sends it a line every quarter of its deadline (`watchdog`, 30 s by
default); when its session closes, or nothing comes for a whole deadline, it stops
every process the run's remote ledger names (pid + starttime checked, as teardown
does) and puts the host's firewall, legacy tables and ipsets back as the run found
them (remote_teardown.RESTORE). The run's files and ledger stay for `secperf clean`.
A run that ends well disarms it first. It needs bash (`read -t`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO, Any, cast

from secperf.errors import TestbedError
from secperf.testbed.hosts.protocol import Host, ManagedProcess, Redirect
from secperf.testbed.hosts.remote_teardown import KILL_GROUP, RESTORE, SETTINGS
from secperf.testbed.hosts.ssh_transport import CONNECT_TIMEOUT_S

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

    def __init__(self, popen: RemotePopen, *, host: Host, label: str, argv: list[str]):
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


# argv: bash -c WATCHDOG secperf-watchdog RUNDIR LEDGER DEADLINE KILL_GROUP RESTORE SETTINGS
WATCHDOG = r"""
rundir=$1; ledger=$2; deadline=$3; kill_group=$4; restore=$5; settings=$6
umask 077
st=$(sed 's/.*) //' "/proc/$$/stat" | cut -d' ' -f20)
printf '{"op":"add","type":"process","pid":%s,"starttime":%s,"pgid":%s,"label":"watchdog"}\n' \
  "$$" "$st" "$$" >> "$ledger"
printf 'secperf-watchdog %s\n' "$$" >&2
exec 3<&0 </dev/null >>"$rundir/watchdog.log" 2>&1
trap '' HUP PIPE INT
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
echo "$(now) watching: a heartbeat at least every $deadline s, or it acts"
while :; do
  IFS= read -r -t "$deadline" line <&3; rc=$?
  [ "$rc" = 0 ] || break
  if [ "$line" = disarm ]; then
    printf '{"op":"remove","type":"process","pid":%s,"starttime":%s}\n' "$$" "$st" >> "$ledger"
    echo "$(now) disarmed: the run ended"
    exit 0
  fi
done
if [ "$rc" -gt 128 ]; then
  echo "$(now) no heartbeat for $deadline s: the controller or its link is gone"
else
  echo "$(now) the controller's session closed"
fi
# the wrapper's own lines (ssh_process.WRAPPER): pid and starttime, digits only
p='^{"op":"add","type":"process","pid":'; n='\([0-9][0-9]*\)'
sed -n "s/$p$n,\"starttime\":$n,.*/\1 \2/p" "$ledger" | while read -r pid pst; do
  [ "$pid" = "$$" ] || sh -c "$kill_group" kill "$pid" "$pst"
done
echo "$(now) stopped what the run started"
sh -c "$restore" restore "$rundir"
sh -c "$settings" settings "$ledger"
if [ "$rc" -gt 128 ]; then
  # A dead link: sshd would hold this session (and the run's remote shell) for hours.
  # End it: the nearest sshd above this process serves this connection only.
  p=$PPID
  while [ "$p" -gt 1 ]; do
    case $(cat "/proc/$p/comm" 2>/dev/null) in sshd|sshd-session) break;; esac
    p=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f2); p=${p:-1}
  done
  [ "$p" -gt 1 ] && kill -s TERM "$p" && echo "$(now) ended its SSH session (sshd $p)"
fi
echo "$(now) done: the run's files and ledger are left for secperf clean"
"""


class HostWatchdog:
    """The run's watchdog on one SSH host, fed by a heartbeat thread here."""

    def __init__(self, client: Any, rundir: str, ledger: str, deadline_s: float, where: str):
        self.where = where
        self.interval = max(0.5, deadline_s / 4)
        argv = ["bash", "-c", WATCHDOG, "secperf-watchdog", rundir, ledger]
        argv += [f"{deadline_s:g}", KILL_GROUP, RESTORE, SETTINGS]
        try:
            self.chan = client.get_transport().open_session(timeout=CONNECT_TIMEOUT_S)
            self.chan.exec_command(shlex.join(argv))
        except (OSError, EOFError, AttributeError) as exc:
            raise TestbedError(
                f"lost the SSH connection starting the watchdog: {exc!r}", where=where
            ) from None
        self.pid = self._wait_ready()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="ssh-heartbeat")
        self._thread.start()

    def _wait_ready(self) -> int:
        """Its pid, once it says it watches (a login script's chatter before is skipped)."""
        buf = b""
        deadline = time.monotonic() + 10.0
        while True:
            for line in buf.split(b"\n")[:-1]:
                words = line.split()
                if words[:1] == [b"secperf-watchdog"] and len(words) == 2 and words[1].isdigit():
                    return int(words[1])
            if self.chan.recv_stderr_ready():
                buf += self.chan.recv_stderr(4096)
            elif self.chan.exit_status_ready() or time.monotonic() > deadline:
                raise TestbedError(
                    f"the run's watchdog did not start there: {buf.decode(errors='replace')}",
                    where=self.where,
                    fix="the host needs bash (its `read -t` times the heartbeat)",
                )
            else:
                time.sleep(0.005)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.chan.sendall(b"\n")
            except (OSError, EOFError):
                return  # the connection is gone: the host acts on its own

    def disarm(self) -> None:
        """The run ends well: the watchdog leaves without acting."""
        self._stop.set()
        with contextlib.suppress(OSError, EOFError):
            self.chan.sendall(b"disarm\n")
            deadline = time.monotonic() + 5.0
            while not self.chan.exit_status_ready() and time.monotonic() < deadline:
                time.sleep(0.01)
        with contextlib.suppress(OSError, EOFError):
            self.chan.close()
