"""The kernel's softirq time, exactly, in a traced round (BPF through bpftrace).

`/proc/stat`'s softirq column is tick-sampled here (no IRQ_TIME_ACCOUNTING), so the
kernel's own share of a mechanism's cost (netfilter, forwarding, veth: NET_RX
softirq) cannot be read from it. The `irq:softirq_entry` / `irq:softirq_exit`
tracepoints time every softirq exactly; bpftrace sums them per CPU and vector in
the kernel and prints the sums when it stops. Tracing every softirq costs
throughput (TCP_RR fell from ~56 k to ~12 k/s with it attached), so it runs only in
a traced round of its own, after the point's untraced rounds; that round's rates
are not used, only its softirq time per unit of work (docs/methodology.md, "The
mechanism's own cost").

bpftrace needs tracefs: it is mounted in a mount namespace of bpftrace's own
(`unshare -m`), so nothing on the machine changes. Where bpftrace is missing or
cannot attach, the figure is "not measured", never 0.
"""

from __future__ import annotations

import json
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from secperf.testbed.testbed import ManagedProcess
from secperf.tools import Tool

# Softirq vectors (include/linux/interrupt.h), as the report names them.
VECTORS = {
    0: "HI",
    1: "TIMER",
    2: "NET_TX",
    3: "NET_RX",
    4: "BLOCK",
    5: "IRQ_POLL",
    6: "TASKLET",
    7: "SCHED",
    8: "HRTIMER",
    9: "RCU",
}
NET_RX = 3
NET_TX = 2

SCRIPT = (
    "tracepoint:irq:softirq_entry { @start[cpu] = nsecs; } "
    "tracepoint:irq:softirq_exit /@start[cpu]/ "
    "{ @ns[cpu, args->vec] = sum(nsecs - @start[cpu]); delete(@start[cpu]); }"
)
ATTACH_TIMEOUT_S = 20.0  # bpftrace compiles its program first (LLVM): seconds on a small VM


def argv() -> list[str]:
    """bpftrace with tracefs mounted in its own mount namespace."""
    inner = f"mount -t tracefs nodev /sys/kernel/tracing && exec bpftrace -f json -e '{SCRIPT}'"
    return ["unshare", "-m", "sh", "-c", inner]


TOOLS = (
    Tool("bpftrace", "bpftrace", "the traced round (softirq time, the cost of the rules)"),
    Tool("unshare", "util-linux", "the traced round (tracefs in its own mount namespace)"),
)


def unavailable() -> str | None:
    """Why softirq time cannot be traced here (None: it can be tried)."""
    for tool in TOOLS:
        if not tool.present:
            return f"{tool.program} is not installed (apt-get install {tool.package})"
    return None


def parse_maps(lines: list[str]) -> dict[int, dict[int, int]] | None:
    """bpftrace's JSON output -> CPU -> vector -> ns (the last `@ns` map printed);
    None when no map was printed (nothing was traced)."""
    found: dict[int, dict[int, int]] | None = None
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(rec, dict) or rec.get("type") != "map":
            continue
        data = rec.get("data") or {}
        ns = data.get("@ns")
        if not isinstance(ns, dict):
            continue
        found = {}
        for key, value in ns.items():
            cpu, _, vec = str(key).partition(",")
            if cpu.strip().isdigit() and vec.strip().isdigit() and isinstance(value, int):
                found.setdefault(int(cpu), {})[int(vec)] = value
    return found


@dataclass(frozen=True)
class Traced:
    """Softirq time over a traced test: seconds by CPU and vector."""

    span_s: float
    by_cpu: dict[int, dict[int, float]]

    def on(self, cpus: list[int] | None, vec: int | None = None) -> float:
        """Seconds on `cpus` (None: all), of vector `vec` (None: all vectors)."""
        return sum(
            s
            for cpu, vecs in self.by_cpu.items()
            if cpus is None or cpu in cpus
            for v, s in vecs.items()
            if vec is None or v == vec
        )

    def record(self, cpus: list[int] | None) -> dict[str, Any]:
        """The `softirq` record (docs/data-format.md): the testbed's CPUs' softirq time
        by vector name, and the whole machine's."""
        by_vec: dict[str, float] = {}
        for cpu, vecs in self.by_cpu.items():
            if cpus is not None and cpu not in cpus:
                continue
            for v, s in vecs.items():
                name = VECTORS.get(v, str(v))
                by_vec[name] = by_vec.get(name, 0.0) + s
        return {
            "type": "softirq",
            "source": "bpftrace",
            "span_s": self.span_s,
            "cpus": cpus,
            "by_vector_s": by_vec,
            "net_rx_s": self.on(cpus, NET_RX),
            "net_tx_s": self.on(cpus, NET_TX),
            "total_s": self.on(cpus),
            "machine_total_s": self.on(None),
        }


def _lines(stream: IO[str], until: Callable[[str], bool], deadline: float) -> list[str]:
    """Lines of `stream` up to (and including) the first for which `until` holds."""
    out: list[str] = []
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            line = stream.readline()
            if not line:
                break
            out.append(line)
            if until(line):
                break
    finally:
        sel.close()
    return out


class Tracer:
    """One bpftrace for one test: `start` attaches (and waits until it has), `stop`
    detaches and returns what it summed."""

    def __init__(self, spawn: Callable[[list[str]], ManagedProcess]) -> None:
        self._spawn = spawn
        self._proc: ManagedProcess | None = None
        self._started = 0.0
        self.error: str | None = None

    def start(self) -> bool:
        proc = self._spawn(argv())
        self._proc = proc
        assert proc.stdout is not None
        got = _lines(
            proc.stdout, lambda s: "attached_probes" in s, time.monotonic() + ATTACH_TIMEOUT_S
        )
        if not any("attached_probes" in line for line in got):
            self.error = f"bpftrace did not attach: {self._stderr(proc) or 'no output'}"
            proc.stop(timeout=2.0)
            self._proc = None
            return False
        self._started = time.monotonic()
        return True

    def stop(self) -> Traced | None:
        proc = self._proc
        if proc is None:
            return None
        span = time.monotonic() - self._started
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 10.0
        # bpftrace prints its maps and exits on SIGINT; one sent before its handler is
        # in place (just after it attached) is lost, so it is sent again each second.
        while time.monotonic() < deadline and not any('"@ns"' in line for line in lines):
            proc.send_signal(signal.SIGINT)
            lines += _lines(proc.stdout, lambda s: '"@ns"' in s, time.monotonic() + 1.0)
        proc.stop(timeout=2.0)
        self._proc = None
        maps = parse_maps(lines)
        if maps is None:
            self.error = "bpftrace printed no softirq sums"
            return None
        return Traced(
            span_s=span,
            by_cpu={c: {v: ns / 1e9 for v, ns in vecs.items()} for c, vecs in maps.items()},
        )

    @staticmethod
    def _stderr(proc: ManagedProcess) -> str:
        err = proc.stderr
        if err is None:
            return ""
        try:
            err.seek(0)
            text = str(err.read())
        except (OSError, ValueError):
            return ""
        # bpftrace warns about RLIMIT_MEMLOCK on kernels that no longer need it
        lines = [line for line in text.splitlines() if "RLIMIT_MEMLOCK" not in line]
        return " ".join(lines)[-300:]


def spawner(spawn_here: Callable[..., ManagedProcess]) -> Callable[[list[str]], ManagedProcess]:
    """A Tracer's spawn through the testbed (recorded in its ledger): stdout a pipe,
    stderr a file."""

    def spawn(args: list[str]) -> ManagedProcess:
        err = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - read in Tracer._stderr
        return spawn_here(args, stdout=subprocess.PIPE, stderr=err, label="bpftrace")

    return spawn
