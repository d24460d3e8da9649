"""The host's side of the VM guest's agent: one TCP connection per command.

The guest listens on its management NIC (IPv6 link-local fe80::2, port 7000; the
NIC's tap lives in the DUT host's namespace, so only that namespace reaches it;
never routed, never in the root namespace). A connection carries one request, a
header line of space-separated words, base64 where a word could hold anything:

  run   SCRIPT_LEN TIMEOUT_S                + the script (stdin, if any, is a here-document in it)
        -> "RC OUT_LEN ERR_LEN\\n" + stdout + stderr   (the guest kills it at TIMEOUT_S)
  put   B64(path) LEN MODE                + LEN bytes   -> "0 0 0\\n"
  get   B64(path)                         -> "0 LEN 0\\n" + bytes, or "1 0 0\\n"
  spawn B64(script) B64(stderr path)|-    -> the program's stdout, raw, until it exits
        the host writes "TERM\\n" to have it SIGTERMed; when the host closes the
        connection the guest SIGKILLs it: a program never outlives its connection.

`script` is `exec ARGV` shell-quoted. The guest side is busybox sh
(secperf.testbed.hosts.vmimage.AGENT). A spawned program is relayed by a real process
on the host (`python3 vmagent.py relay ...`, started with the DUT namespace host's
spawn, so it is in the ledger and the cgroup): its stdout is the program's, a
SIGTERM to it becomes "TERM", a SIGKILL closes the connection (the guest then
kills the program). This file is also that relay's script, so it imports only
the standard library.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import os
import secrets
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

CLONE_NEWNET = 0x40000000


class AgentError(Exception):
    """The agent could not be reached or broke off (the message says which step)."""


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def script_for(argv: Sequence[str], stdin: str | None = None) -> str:
    """The guest shell script that runs argv in place of the shell; `stdin` (text) comes
    as a quoted here-document (a newline is added where the text has none)."""
    line = "exec " + shlex.join(list(argv))
    if stdin is None:
        return line + "\n"
    mark = "SECPERF_" + secrets.token_hex(8)
    body = stdin if stdin.endswith("\n") else stdin + "\n"
    return f"{line} <<'{mark}'\n{body}{mark}\n"


def request_line(op: str, *words: str | int) -> bytes:
    return (" ".join([op, *(str(w) for w in words)]) + "\n").encode()


def connect_in_netns(netns: str, addr: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection opened from inside namespace `netns` (a thread enters it with
    setns; the socket keeps that namespace, the thread ends)."""
    out: dict[str, object] = {}

    def enter_and_connect() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {netns}: {os.strerror(err)}")
            finally:
                os.close(fd)
            out["sock"] = socket.create_connection((addr, port), timeout=timeout)
        except BaseException as exc:  # handed to the caller's thread
            out["error"] = exc

    worker = threading.Thread(target=enter_and_connect, name=f"connect-{netns}")
    worker.start()
    worker.join()
    sock = out.get("sock")
    if isinstance(sock, socket.socket):
        return sock
    raise AgentError(f"cannot connect to the guest agent {addr} port {port}: {out.get('error')}")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 16))
        if not chunk:
            raise AgentError("the guest agent closed the connection mid-answer")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv_line(sock: socket.socket) -> bytes:
    out = bytearray()
    while not out.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise AgentError("the guest agent closed the connection without an answer")
        out += chunk
    return bytes(out)


@dataclass(frozen=True)
class Answer:
    rc: int
    out: bytes
    err: bytes


def exchange(sock: socket.socket, header: bytes, payload: bytes, timeout: float) -> Answer:
    """Send one request, read its "RC OUT ERR" answer and the bytes that follow."""
    sock.settimeout(timeout)
    try:
        sock.sendall(header + payload)
        line = _recv_line(sock).split()
        rc, n_out, n_err = (int(x) for x in line)
        out = _recv_exact(sock, n_out)
        err = _recv_exact(sock, n_err)
    except TimeoutError:
        raise AgentError(f"the guest agent gave no answer within {timeout:.0f} s") from None
    except (OSError, ValueError) as exc:
        raise AgentError(f"the guest agent's answer broke off: {exc}") from None
    finally:
        sock.close()
    return Answer(rc, out, err)


# -- the relay (a host process per spawned guest program) ----------------------------


def relay(netns: str, addr: str, port: int, script: str, stderr_path: str) -> int:
    """Connect, start the program, copy its stdout to ours until it ends."""
    if netns == "-":  # already in the namespace (started there by the host's spawn)
        try:
            sock = socket.create_connection((addr, port), timeout=10.0)
        except OSError as exc:
            raise AgentError(f"cannot connect to the guest agent {addr}: {exc}") from None
    else:
        sock = connect_in_netns(netns, addr, port, 10.0)
    err_word = b64(stderr_path) if stderr_path != "-" else "-"
    sock.sendall(request_line("spawn", b64(script), err_word))
    stopping = threading.Event()

    def on_term(signum: int, frame: object) -> None:
        if not stopping.is_set():
            stopping.set()
            with contextlib.suppress(OSError):
                sock.sendall(b"TERM\n")

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    out = sys.stdout.buffer
    deadline: float | None = None
    sock.settimeout(0.2)
    while True:
        if stopping.is_set() and deadline is None:
            deadline = time.monotonic() + 4.0
        if deadline is not None and time.monotonic() > deadline:
            break  # closing the connection makes the guest SIGKILL it
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            continue
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        try:
            out.write(chunk)
            out.flush()
        except BrokenPipeError:
            break
    sock.close()
    return 143 if stopping.is_set() else 0


def main(args: list[str]) -> int:
    if len(args) == 6 and args[0] == "relay":
        _, netns, addr, port, script_b64, err = args
        script = base64.b64decode(script_b64).decode()
        try:
            return relay(netns, addr, int(port), script, err)
        except AgentError as exc:
            print(f"secperf vm relay: {exc}", file=sys.stderr)
            return 111
    print("usage: vmagent.py relay NETNS ADDR PORT B64SCRIPT STDERR|-", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
