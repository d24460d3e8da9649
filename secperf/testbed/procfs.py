"""A process's CPU time and resident memory, read from /proc (this machine's: the
namespaces share one /proc), for the mechanisms that report what their daemons cost."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from pathlib import Path


def rss_bytes(pids: Sequence[int], proc_root: Path = Path("/proc")) -> int | None:
    """The summed resident set (VmRSS) of `pids`, in bytes; None if none of them runs.

    A pid that exited between listing and reading counts 0; a kernel thread has no
    VmRSS line and counts 0 as well."""
    total, seen = 0, False
    for pid in pids:
        with contextlib.suppress(OSError):
            text = (proc_root / str(pid) / "status").read_text()
            seen = True
            m = re.search(r"^VmRSS:\s+(\d+)\s+kB", text, re.MULTILINE)
            if m:
                total += int(m.group(1)) * 1024
    return total if seen else None


def cpu_seconds(pids: Sequence[int], proc_root: Path = Path("/proc")) -> float | None:
    """The summed CPU time of `pids` so far, in seconds: every thread's scheduler time
    (/proc/PID/task/TID/schedstat, exact, in ns; wireguard-go works in many threads),
    the kernel work their system calls do included; None if none of them runs. A pid
    or thread that exited in between counts 0."""
    total, seen = 0, False
    for pid in pids:
        base = proc_root / str(pid)
        with contextlib.suppress(OSError):
            files = sorted(base.glob("task/*/schedstat")) or [base / "schedstat"]
            for f in files:
                with contextlib.suppress(OSError, ValueError, IndexError):
                    total += int(f.read_text().split()[0])
                    seen = True
    return total / 1e9 if seen else None
