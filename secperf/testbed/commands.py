"""Running programs on this machine: `run_command` (a failure is a TestbedError
naming the command and its stderr) and `run_ip_batch` (many `ip` commands in one
process, a failure naming the exact line).

Everything the namespace testbed builds goes through these, on purpose: it is made
of exactly the commands a network engineer would type to rebuild or inspect it, and
no netlink helper process or library sits between secperf and the kernel.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence

from secperf.errors import TestbedError


def run_command(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float = 30.0,
    fix: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command; with check, a failure is a TestbedError naming it and its stderr."""
    cmd = shlex.join(argv)
    try:
        proc = subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise TestbedError(
            f"program not found: {argv[0]}",
            where=cmd,
            fix=f"install {argv[0]} (iproute2 for ip and tc)",
        ) from None
    except subprocess.TimeoutExpired:
        raise TestbedError(
            f"command timed out after {timeout} s: {cmd}",
            where=cmd,
            fix="the machine may be overloaded; `secperf clean` removes what this run left",
        ) from None
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise TestbedError(
            f"command failed (exit {proc.returncode}): {cmd}\n  {detail}",
            where=cmd,
            fix=fix or "read the command's error above; `secperf clean` removes leftovers",
        )
    return proc


def run_ip_batch(netns: str, lines: Sequence[str]) -> None:
    """Run `ip` commands in a namespace in one process (`ip -n NS -batch -`).

    One process instead of hundreds keeps a testbed with 200 emulated hosts
    fast to build; a failure still names the exact line that failed.
    """
    if not lines:
        return
    argv = ["ip", "-n", netns, "-batch", "-"]
    proc = run_command(argv, check=False, input="\n".join(lines) + "\n")
    if proc.returncode != 0:
        match = re.search(r"Command failed -:(\d+)", proc.stderr)
        failed = lines[int(match.group(1)) - 1] if match else "(unknown line)"
        cmd = f"ip -n {netns} {failed}"
        raise TestbedError(
            f"command failed: {cmd}\n  {proc.stderr.strip()}",
            where=cmd,
            fix="read the command's error above; `secperf clean` removes leftovers",
        )
