"""Where the CPU goes: a sampled profile of one test (`perf record -e cpu-clock -g`).

The software clock event needs no PMU (this kind of VM has none): every CPU sampled
is interrupted at a fixed rate and its call stack, kernel and user space, recorded.
With a placement that pins the testbed, only its CPUs are sampled (`-C`), else all.
The perf data goes to a temporary directory outside the run directory (megabytes a
second) and is removed once folded: `perf script` prints each sample's stack, leaf
first, and each function's share of the samples is kept, as the leaf (`self`: where
the CPU was) and anywhere in the stack (`inclusive`: under which calls). The run
directory keeps the shares in `profile` records (docs/data-format.md); the summary
compares each configuration's with the baseline's (secperf.results.attribution).

Where perf is missing or cannot sample, the record says why ("not profiled: perf
missing (install linux-perf)"), never a silent zero.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from secperf.testbed.placement import cpu_list
from secperf.testbed.testbed import ManagedProcess

MISSING = "perf missing (install linux-perf)"
# Samples a second on each CPU. perf's default (4000) costs more of a 2-CPU machine
# than the profile needs: 1000/s over a 5 s test is 5,000 samples a CPU.
FREQUENCY = 1000
KEEP = 200  # functions kept per profile (by share): the rest is a long tail
START_TIMEOUT_S = 10.0
SCRIPT_TIMEOUT_S = 300.0


def unavailable() -> str | None:
    """Why no profile can be taken here (None: perf can be tried)."""
    return MISSING if shutil.which("perf") is None else None


def record_argv(data: Path, cpus: Sequence[int] | None) -> list[str]:
    where = ["-C", cpu_list(cpus)] if cpus else ["-a"]
    return [
        "perf",
        "record",
        "-e",
        "cpu-clock",
        "-F",
        str(FREQUENCY),
        "-g",
        *where,
        "-q",
        "-o",
        str(data),
    ]


def _symbol(line: str) -> str | None:
    """One stack line of `perf script -F comm,ip,sym,dso` -> the function's name;
    an address without a symbol is named by its object ("[unknown] libc.so.6")."""
    parts = line.strip().split(None, 1)
    if len(parts) < 2:
        return None
    rest = parts[1]
    dso = ""
    if rest.endswith(")") and " (" in rest:
        rest, _, dso = rest.rpartition(" (")
        dso = dso[:-1]
    sym = rest.strip()
    if "+0x" in sym:
        sym = sym.rsplit("+0x", 1)[0]
    if not sym or sym == "[unknown]":
        return f"[unknown] {os.path.basename(dso) or '?'}"
    return sym


def fold(
    lines: Iterable[str], comms: Counter[str] | None = None
) -> tuple[int, Counter[str], Counter[str]]:
    """`perf script` output -> samples, leaf function counts, in-stack counts (and
    into `comms`, the samples of each process name)."""
    leaf: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    by_comm: Counter[str] = Counter() if comms is None else comms
    samples = 0
    stack: list[str] = []
    comm = ""
    in_sample = False

    def close() -> None:
        nonlocal samples
        if not in_sample:
            return
        samples += 1
        by_comm[comm or "?"] += 1
        frames = stack or [f"[{comm or '?'}]"]
        leaf[frames[0]] += 1
        for fn in set(frames):
            inclusive[fn] += 1

    for raw in lines:
        line = raw.rstrip("\n")
        if not line.strip():
            close()
            in_sample, stack = False, []
            continue
        if line[0] in " \t":
            if in_sample and (sym := _symbol(line)) is not None:
                stack.append(sym)
            continue
        close()
        in_sample, stack = True, []
        comm = line.split()[0] if line.split() else ""
    close()
    return samples, leaf, inclusive


def shares(counts: Counter[str], samples: int, keep: int = KEEP) -> dict[str, float]:
    """The `keep` largest counts as fractions of `samples`."""
    if not samples:
        return {}
    return {fn: n / samples for fn, n in counts.most_common(keep)}


def record_of(lines: Iterable[str], cpus: Sequence[int] | None, span_s: float) -> dict[str, Any]:
    """The `profile` record of a folded `perf script` output."""
    comms: Counter[str] = Counter()
    samples, leaf, inclusive = fold(lines, comms)
    if not samples:
        return not_profiled("perf recorded no samples", cpus)
    return {
        "type": "profile",
        "source": "perf",
        "event": "cpu-clock",
        "profiled": True,
        "frequency_hz": FREQUENCY,
        "cpus": list(cpus) if cpus else None,
        "span_s": span_s,
        "samples": samples,
        "self": shares(leaf, samples),
        "inclusive": shares(inclusive, samples),
        # by process name (the task each sample interrupted: softirq work is charged to
        # the task it ran in): what else ran on the sampled CPUs shows here
        "by_comm": shares(comms, samples, keep=20),
    }


def not_profiled(why: str, cpus: Sequence[int] | None = None) -> dict[str, Any]:
    return {
        "type": "profile",
        "source": "perf",
        "profiled": False,
        "why": f"not profiled: {why}",
        "cpus": list(cpus) if cpus else None,
    }


class Profiler:
    """One `perf record` over one test: `start` (returns once perf has opened its
    data file), `stop` (SIGINT: perf writes its data and exits) -> the record."""

    def __init__(
        self, spawn: Callable[[list[str]], ManagedProcess], cpus: Sequence[int] | None
    ) -> None:
        self._spawn = spawn
        self.cpus = list(cpus) if cpus else None
        self._dir = Path(tempfile.mkdtemp(prefix="secperf-perf-"))
        self._data = self._dir / "perf.data"
        self._proc: ManagedProcess | None = None
        self._started = 0.0
        self.error: str | None = None

    def start(self) -> bool:
        why = unavailable()
        if why is not None:
            self.error = why
            return False
        proc = self._spawn(record_argv(self._data, self.cpus))
        self._proc = proc
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if self._data.exists() and self._data.stat().st_size > 0:
                self._started = time.monotonic()
                return True
            time.sleep(0.02)  # poll: perf opens its file once its events are set up
        self.error = f"perf record did not start (exit {proc.poll()}): {_tail(proc)}"
        proc.stop(timeout=2.0)
        self._proc = None
        self.close()
        return False

    def stop(self) -> dict[str, Any]:
        proc = self._proc
        if proc is None:
            return not_profiled(self.error or "perf did not run", self.cpus)
        span = time.monotonic() - self._started
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30.0)
        except subprocess.TimeoutExpired:
            proc.stop(timeout=2.0)
            self.close()
            return not_profiled("perf record did not end on SIGINT", self.cpus)
        finally:
            self._proc = None
        proc.stop(timeout=2.0)  # it has ended: this takes it off the ledger
        try:
            script = subprocess.run(
                ["perf", "script", "-i", str(self._data), "-F", "comm,ip,sym,dso"],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=SCRIPT_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return not_profiled("perf script took too long", self.cpus)
        finally:
            self.close()
        if script.returncode != 0:
            return not_profiled(f"perf script failed: {script.stderr.strip()[-300:]}", self.cpus)
        return record_of(script.stdout.splitlines(), self.cpus, span)

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


def _tail(proc: ManagedProcess) -> str:
    err = proc.stderr
    if err is None:
        return "no output"
    try:
        err.seek(0)
        return " ".join(str(err.read()).split())[-300:] or "no output"
    except (OSError, ValueError):
        return "no output"


def spawner(spawn_here: Callable[..., ManagedProcess]) -> Callable[[list[str]], ManagedProcess]:
    """A Profiler's spawn through the testbed (recorded in its ledger), stderr a file."""

    def spawn(args: list[str]) -> ManagedProcess:
        err = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - read in _tail
        return spawn_here(args, stdout=subprocess.DEVNULL, stderr=err, label="perf")

    return spawn
