"""secperf-engine against iperf3, sockperf and netperf, on the same paths, in one run.

For each path (loopback, and as root a client–dut–server testbed where the dut
forwards) the bench runs interleaved pairs (engine, peer, engine, peer, ...)
of each test, so that drift of the machine hits both tools alike, and compares
medians:

  stream tcp 16 KiB / 128 KiB writes  vs  iperf3 -l 16K / 128K  (throughput)
  rr tcp / udp, 14-byte messages      vs  sockperf ping-pong    (mean round trip)
  crr tcp 1/1 B, close=server-first    vs  netperf TCP_CRR -r 1,1   (connections/s)
                                       (both: the server closes right after its
                                       response, the client reads the end of stream
                                       and closes: like for like)
  crr tcp close=client-first           (engine alone: the client shuts down first,
                                       half a round trip more per connection)
  crr tcp close=reset                  (engine alone: the RST close, for comparison)

netperf is not packaged: build it outside the repository (see docs/performance.md)
and give its binary with --netperf PATH (netserver is taken from beside it); without
it (and none on PATH) crr runs engine alone, and says so.

CPU is taken the same way for both tools, from outside: utime+stime of
/proc/PID/stat of the client process (read once it has exited, before it is
reaped) and of the long-running server process (read before and after each
test). Service demand = that CPU over the work the test did in the same
window (the process's lifetime: warm-up included on both sides).

Exit status is 0 whether or not the engine meets its targets; the verdicts are
printed. Every process started here is stopped on the way out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any, Protocol

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without an installed secperf too

from secperf.errors import SecperfError  # noqa: E402

DEFAULT_ENGINE = ROOT / "engine" / "target" / "release" / "secperf-engine"
CLK_TCK = os.sysconf("SC_CLK_TCK")
# sockperf refuses messages under 14 bytes (its header); both tools use this size.
RR_SIZE = 14
WARMUP_S = 1.0
FORWARD_SERVER = "198.18.2.2"
# Fixed ports inside the testbed's own namespaces (nothing else listens there).
FORWARD_PORTS = {
    "engine": 5301,
    "iperf3": 5201,
    "sockperf_tcp": 11111,
    "sockperf_udp": 11112,
    "netperf": 12865,
}
# Targets the engine is held to.
STREAM_MIN_RATIO = 0.95
STREAM_MAX_CPU_RATIO = 1.0
RR_MAX_LATENCY_RATIO = 1.10
CRR_MIN_RATIO = 1.0


class BenchError(SecperfError):
    """The bench could not run a tool or make sense of its output."""


# -- CPU accounting ------------------------------------------------------------


def proc_stat_fields(pid: int) -> list[str]:
    """Fields of /proc/PID/stat from field 3 (state) on; comm may hold spaces."""
    data = Path(f"/proc/{pid}/stat").read_text()
    return data[data.rfind(")") + 2 :].split()


def proc_cpu_s(pid: int) -> float:
    """utime + stime of the whole process (live and exited threads), in seconds."""
    f = proc_stat_fields(pid)
    return (int(f[11]) + int(f[12])) / CLK_TCK  # fields 14 and 15


def proc_threads(pid: int) -> int:
    return int(proc_stat_fields(pid)[17])  # field 20


def machine_cpu_s() -> tuple[float, float]:
    """Whole-machine (busy, steal) CPU seconds since boot; busy is all but idle, iowait, steal."""
    with open("/proc/stat") as fh:
        cols = [int(x) for x in fh.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest is inside user)
    total = sum(cols[:8])
    return (total - cols[3] - cols[4] - cols[7]) / CLK_TCK, cols[7] / CLK_TCK


# -- processes -----------------------------------------------------------------


@dataclass
class Child:
    """A process this bench started, with the way to stop it."""

    popen: subprocess.Popen[str]
    label: str
    stop: Callable[[], object]

    @property
    def pid(self) -> int:
        return self.popen.pid


class Spawner(Protocol):
    """Where the bench starts processes: here (loopback) or in testbed namespaces."""

    name: str
    server_addr: str

    def spawn(self, role: str, argv: Sequence[str], *, label: str, pipe: bool) -> Child: ...

    def run(
        self, role: str, argv: Sequence[str], timeout: float
    ) -> subprocess.CompletedProcess[str]: ...

    def port(self, kind: str, udp: bool = False) -> int: ...


def _stop_group(popen: subprocess.Popen[str], timeout: float = 3.0) -> None:
    """SIGTERM the process group, SIGKILL after `timeout`, reap."""
    if popen.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(5.0)


class LocalSpawner:
    """Processes in this namespace, talking over 127.0.0.1."""

    name = "loopback"
    server_addr = "127.0.0.1"

    def __init__(self) -> None:
        self.children: list[Child] = []

    def spawn(self, role: str, argv: Sequence[str], *, label: str, pipe: bool) -> Child:
        out = subprocess.PIPE if pipe else subprocess.DEVNULL
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            text=True,
            start_new_session=True,  # its own group: stopping it reaches its children
        )
        child = Child(popen, label, lambda: _stop_group(popen))
        self.children.append(child)
        return child

    def run(
        self, role: str, argv: Sequence[str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )

    def port(self, kind: str, udp: bool = False) -> int:
        """A port free right now on 127.0.0.1 (other work may share loopback)."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM if udp else socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def stop_all(self) -> None:
        for child in reversed(self.children):
            child.stop()


class NetnsSpawner:
    """Processes in a secperf testbed: clients in 'client', servers in 'server'."""

    name = "forward"
    server_addr = FORWARD_SERVER

    def __init__(self, testbed: Any) -> None:
        self.tb = testbed
        self.children: list[Child] = []

    def spawn(self, role: str, argv: Sequence[str], *, label: str, pipe: bool) -> Child:
        out = subprocess.PIPE if pipe else subprocess.DEVNULL
        proc = self.tb.host(role).spawn(list(argv), stdout=out, stderr=out, label=label)
        child = Child(proc.popen, label, proc.stop)
        self.children.append(child)
        return child

    def run(
        self, role: str, argv: Sequence[str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        result: subprocess.CompletedProcess[str] = self.tb.host(role).run(
            list(argv), check=False, timeout=timeout
        )
        return result

    def port(self, kind: str, udp: bool = False) -> int:
        return FORWARD_PORTS[kind]

    def stop_all(self) -> None:
        for child in reversed(self.children):
            child.stop()


def _drain(stream: IO[str] | None, sink: list[str]) -> threading.Thread:
    def pump() -> None:
        if stream is not None:
            for line in stream:
                sink.append(line)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


@dataclass
class ClientRun:
    rc: int
    stdout: str
    stderr: str
    cpu_s: float
    wall_s: float


def run_client(spawner: Spawner, argv: Sequence[str], label: str, timeout: float) -> ClientRun:
    """Run a client to completion; its CPU is read after it exits and before it is reaped."""
    child = spawner.spawn("client", argv, label=label, pipe=True)
    t0 = time.monotonic()
    try:
        out: list[str] = []
        err: list[str] = []
        readers = [_drain(child.popen.stdout, out), _drain(child.popen.stderr, err)]
        # A pidfd becomes readable when the process exits, without reaping it.
        pidfd = os.pidfd_open(child.pid)
        try:
            ready, _, _ = select.select([pidfd], [], [], timeout)
        finally:
            os.close(pidfd)
        if not ready:
            raise BenchError(
                f"{label} did not finish within {timeout:.0f} s",
                where=" ".join(argv),
                fix="check that the server is reachable; it was stopped",
            )
        wall = time.monotonic() - t0
        cpu = proc_cpu_s(child.pid)  # a zombie still has its stat
        rc = child.popen.wait(5.0)
        for r in readers:
            r.join(5.0)
        return ClientRun(rc, "".join(out), "".join(err), cpu, wall)
    finally:
        child.stop()


# -- servers -------------------------------------------------------------------


@dataclass
class Server:
    child: Child
    addr: str
    port: int

    def cpu_s(self) -> float:
        return proc_cpu_s(self.child.pid)

    def threads(self) -> int:
        return proc_threads(self.child.pid)

    def settle(self, baseline_threads: int, deadline_s: float = 2.0) -> None:
        """Wait until the threads a test started have exited (their CPU is then counted)."""
        end = time.monotonic() + deadline_s
        while self.threads() > baseline_threads and time.monotonic() < end:
            time.sleep(0.005)


PROBE = """
import socket, sys, time
host, port, end = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.01)
sys.exit(1)
"""


def wait_tcp(spawner: Spawner, addr: str, port: int, label: str, within: float = 10.0) -> None:
    """Poll a TCP connect from the client side until the server accepts, with a deadline."""
    proc = spawner.run(
        "client", [sys.executable, "-c", PROBE, addr, str(port), str(within)], within + 10
    )
    if proc.returncode != 0:
        raise BenchError(
            f"{label} did not accept connections on {addr}:{port} within {within:.0f} s",
            fix=f"run it by hand to see why; {proc.stderr.strip()}",
        )


def wait_udp_bound(spawner: Spawner, port: int, label: str, within: float = 10.0) -> None:
    """Poll `ss` in the server's namespace until a UDP socket is bound to `port`."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        proc = spawner.run("server", ["ss", "-Hlun", f"sport = :{port}"], 5.0)
        if proc.stdout.strip():
            return
        time.sleep(0.01)
    raise BenchError(f"{label} did not bind UDP port {port} within {within:.0f} s")


def start_engine_server(spawner: Spawner, engine: Path) -> Server:
    port = spawner.port("engine")
    addr = spawner.server_addr
    child = spawner.spawn(
        "server",
        [str(engine), "serve", "--listen", f"{addr}:{port}"],
        label="engine-serve",
        pipe=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert child.popen.stdout is not None
        for line in child.popen.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    errors: list[str] = []
    _drain(child.popen.stderr, errors)
    end = time.monotonic() + 10.0
    while True:
        left = end - time.monotonic()
        try:
            line = lines.get(timeout=max(left, 0.0))
        except queue.Empty:
            line = None
        if line is None:
            child.stop()
            raise BenchError(
                "secperf-engine serve did not print its listening record",
                where=f"{addr}:{port}",
                fix=f"run `{engine} serve --listen {addr}:{port}` by hand; stderr: "
                + "".join(errors).strip(),
            )
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("type") == "listening":
            return Server(child, addr, port)
        if rec.get("type") == "error":
            child.stop()
            raise BenchError(f"secperf-engine serve: {rec.get('message')}", where=f"{addr}:{port}")


def start_iperf3_server(spawner: Spawner) -> Server:
    port = spawner.port("iperf3")
    addr = spawner.server_addr
    child = spawner.spawn(
        "server", ["iperf3", "-s", "-B", addr, "-p", str(port)], label="iperf3-server", pipe=False
    )
    wait_tcp(spawner, addr, port, "iperf3 -s")
    return Server(child, addr, port)


def start_sockperf_server(spawner: Spawner, udp: bool) -> Server:
    kind = "sockperf_udp" if udp else "sockperf_tcp"
    port = spawner.port(kind, udp=udp)
    addr = spawner.server_addr
    argv = ["sockperf", "server", "-i", addr, "-p", str(port)]
    if not udp:
        argv.append("--tcp")
    child = spawner.spawn("server", argv, label=f"sockperf-server-{kind}", pipe=False)
    if udp:
        wait_udp_bound(spawner, port, "sockperf server (udp)")
    else:
        wait_tcp(spawner, addr, port, "sockperf server (tcp)")
    return Server(child, addr, port)


def start_netserver(spawner: Spawner, netperf: Path) -> Server:
    """netserver beside the netperf binary, in the foreground (-D), one process (-f:
    no child per test, so that its CPU is the one process's)."""
    netserver = netperf.with_name("netserver")
    port = spawner.port("netperf")
    addr = spawner.server_addr
    argv = [str(netserver), "-D", "-f", "-L", addr, "-p", str(port)]
    child = spawner.spawn("server", argv, label="netserver", pipe=False)
    wait_tcp(spawner, addr, port, "netserver")
    return Server(child, addr, port)


# -- one measurement -----------------------------------------------------------


@dataclass
class Run:
    """One test by one tool: its headline figures and its CPU over its work."""

    tool: str
    ok: bool
    metrics: dict[str, float] = field(default_factory=dict)
    work: float = 0.0  # bytes (stream) or transactions (rr, crr) over the process's lifetime
    cpu_client_s: float = 0.0
    cpu_server_s: float = 0.0
    machine_busy_s: float = 0.0
    # Time the hypervisor gave our vCPUs to someone else: a sign of outside interference.
    steal_s: float = 0.0
    error: str | None = None

    def demand(self, per: float, *, machine: bool = False) -> float | None:
        """CPU µs (client + server, or the whole machine's busy time) per `per` units of work."""
        if not self.ok or self.work <= 0:
            return None
        cpu = self.machine_busy_s if machine else self.cpu_client_s + self.cpu_server_s
        return cpu * 1e6 / (self.work / per)


Parser = Callable[[ClientRun], tuple[dict[str, float], float]]


def measure(
    spawner: Spawner,
    tool: str,
    server: Server,
    argv: Sequence[str],
    parse: Parser,
    timeout: float,
) -> Run:
    threads0 = server.threads()
    srv0 = server.cpu_s()
    busy0, steal0 = machine_cpu_s()
    try:
        client = run_client(spawner, argv, tool, timeout)
        server.settle(threads0)
        srv1 = server.cpu_s()
        busy1, steal1 = machine_cpu_s()
        metrics, work = parse(client)
    except BenchError as exc:
        return Run(tool, False, error=str(exc))
    return Run(
        tool,
        True,
        metrics=metrics,
        work=work,
        cpu_client_s=client.cpu_s,
        cpu_server_s=srv1 - srv0,
        machine_busy_s=busy1 - busy0,
        steal_s=steal1 - steal0,
    )


def _last_record(client: ClientRun, tool: str) -> dict[str, Any]:
    lines = [ln for ln in client.stdout.splitlines() if ln.strip()]
    if not lines:
        raise BenchError(f"{tool} printed nothing (exit {client.rc}): {client.stderr.strip()}")
    try:
        rec: dict[str, Any] = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise BenchError(f"{tool}: last line is not JSON: {lines[-1][:200]}") from exc
    if rec.get("type") == "error" or client.rc != 0:
        raise BenchError(
            f"{tool} failed (exit {client.rc}): {rec.get('kind')} {rec.get('message', '')}"
        )
    return rec


def parse_engine_stream(client: ClientRun) -> tuple[dict[str, float], float]:
    rec = _last_record(client, "secperf-engine")
    totals = rec.get("totals", {}).get("client", {})
    sent = totals.get("bytes_sent") or totals.get("bytes") or rec["sender"]["bytes"]
    return {"gbps": rec["bits_per_second"] / 1e9}, float(sent)


def parse_engine_rr(client: ClientRun) -> tuple[dict[str, float], float]:
    rec = _last_record(client, "secperf-engine")
    lat = rec["latency_us"]
    done = rec.get("totals", {}).get("client", {}).get("transactions") or rec["transactions"]
    return {
        "rtt_mean_us": float(lat["mean"]),
        "rtt_p50_us": float(lat["p50"]),
        "rtt_p99_us": float(lat["p99"]),
        "tps": float(rec["transactions_per_second"]),
    }, float(done)


def parse_engine_crr(client: ClientRun) -> tuple[dict[str, float], float]:
    rec = _last_record(client, "secperf-engine")
    totals = rec.get("totals", {}).get("client", {})
    done = totals.get("connections") or totals.get("transactions") or rec["transactions"]
    return {
        "cps": float(rec["transactions_per_second"]),
        "connect_to_response_mean_us": float(rec["latency_us"]["mean"]),
    }, float(done)


def parse_iperf3(client: ClientRun) -> tuple[dict[str, float], float]:
    try:
        doc = json.loads(client.stdout)
    except json.JSONDecodeError as exc:
        raise BenchError(f"iperf3 did not print JSON (exit {client.rc}): {client.stderr}") from exc
    if "error" in doc or client.rc != 0:
        raise BenchError(f"iperf3 failed (exit {client.rc}): {doc.get('error')}")
    # Lifetime bytes, omitted (warm-up) seconds included, as for the engine.
    sent = sum(iv["sum"]["bytes"] for iv in doc["intervals"])
    return {"gbps": doc["end"]["sum_received"]["bits_per_second"] / 1e9}, float(sent)


_NUM = r"([0-9]+(?:\.[0-9]+)?)"


def parse_sockperf(client: ClientRun) -> tuple[dict[str, float], float]:
    text = client.stdout + client.stderr

    def grab(pattern: str) -> float:
        m = re.search(pattern, text)
        if m is None:
            raise BenchError(
                f"sockperf output lacks /{pattern}/ (exit {client.rc})",
                fix="run the sockperf command by hand: " + text.strip()[-300:],
            )
        return float(m.group(1))

    valid_s = grab(r"\[Valid Duration\] RunTime=" + _NUM)
    valid_rx = grab(r"\[Valid Duration\].*?ReceivedMessages=" + _NUM)
    total_rx = grab(r"\[Total Run\].*?ReceivedMessages=" + _NUM)
    return {
        # --full-rtt: sockperf reports the whole round trip, not half of it.
        "rtt_mean_us": grab(r"avg-rtt=" + _NUM),
        "rtt_p50_us": grab(r"percentile 50\.000 =\s*" + _NUM),
        "rtt_p99_us": grab(r"percentile 99\.000 =\s*" + _NUM),
        "tps": valid_rx / valid_s,
    }, total_rx


def parse_netperf(client: ClientRun) -> tuple[dict[str, float], float]:
    """netperf -P 0 -- -k THROUGHPUT,ELAPSED_TIME,MEAN_LATENCY: key=value lines."""
    keys = dict(
        ln.split("=", 1) for ln in (client.stdout + client.stderr).splitlines() if "=" in ln
    )
    try:
        tps, elapsed = float(keys["THROUGHPUT"]), float(keys["ELAPSED_TIME"])
    except (KeyError, ValueError) as exc:
        raise BenchError(
            f"netperf printed no THROUGHPUT/ELAPSED_TIME (exit {client.rc})",
            fix="run the netperf command by hand: " + (client.stdout + client.stderr)[-300:],
        ) from exc
    if client.rc != 0 or tps <= 0:
        raise BenchError(f"netperf failed (exit {client.rc}): {client.stderr.strip()[-300:]}")
    metrics = {"cps": tps}
    with suppress(KeyError, ValueError):
        metrics["connect_to_response_mean_us"] = float(keys["MEAN_LATENCY"])
    return metrics, tps * elapsed


PEER_PARSERS: dict[str, Parser] = {
    "iperf3": parse_iperf3,
    "sockperf": parse_sockperf,
    "netperf": parse_netperf,
}


# -- the tests ------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    higher_better: bool


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    engine_spec: dict[str, Any]
    peer: str | None  # "iperf3", "sockperf_tcp", "sockperf_udp", "netperf"
    peer_argv: Callable[[str, int, float], list[str]] | None
    metrics: tuple[Metric, ...]
    demand_per: float  # work units per service-demand unit
    demand_unit: str


THROUGHPUT = (Metric("gbps", "throughput Gbit/s", True),)
RR_METRICS = (
    Metric("rtt_mean_us", "mean round trip µs", False),
    Metric("tps", "transactions/s", True),
)


def _iperf3(size: str) -> Callable[[str, int, float], list[str]]:
    def argv(addr: str, port: int, duration: float) -> list[str]:
        # -O 1: one second of warm-up left out of the figures, as the engine's warmup.
        return [
            "iperf3",
            "-c",
            addr,
            "-p",
            str(port),
            "-l",
            size,
            "-t",
            f"{duration:g}",
            "-O",
            f"{WARMUP_S:g}",
            "-J",
        ]

    return argv


def _sockperf(udp: bool) -> Callable[[str, int, float], list[str]]:
    def argv(addr: str, port: int, duration: float) -> list[str]:
        # -t counts sockperf's own ~0.4 s warm-up; give it as long as the engine runs in all.
        run = [
            "sockperf",
            "ping-pong",
            "-i",
            addr,
            "-p",
            str(port),
            "-m",
            str(RR_SIZE),
            "-t",
            f"{round(duration + WARMUP_S)}",
            "--full-rtt",
        ]
        return run if udp else [*run, "--tcp"]

    return argv


def _netperf_crr(netperf: Path) -> Callable[[str, int, float], list[str]]:
    def argv(addr: str, port: int, duration: float) -> list[str]:
        # As long as the engine runs in all (its warm-up included); 1-byte request
        # and response, netperf's own server-first close.
        return [
            str(netperf),
            "-H",
            addr,
            "-p",
            str(port),
            "-t",
            "TCP_CRR",
            "-l",
            f"{max(1, round(duration + WARMUP_S))}",
            "-P",
            "0",
            "--",
            "-r",
            "1,1",
            "-k",
            "THROUGHPUT,ELAPSED_TIME,MEAN_LATENCY",
        ]

    return argv


def tests(rcvlowat: int | None = None, netperf: Path | None = None) -> list[Case]:
    """Every test; `rcvlowat` overrides the engine's default for its streams;
    `netperf` (a netperf binary, netserver beside it) pairs crr with TCP_CRR."""
    base = {"duration": 0.0, "warmup": WARMUP_S, "interval": 0}
    stream = {**base, "kind": "stream"} | ({} if rcvlowat is None else {"rcvlowat": rcvlowat})
    rr = {**base, "kind": "rr", "request": RR_SIZE, "response": RR_SIZE}
    return [
        Case(
            "stream_16k",
            "stream tcp 16 KiB",
            {**stream, "message": 16384},
            "iperf3",
            _iperf3("16K"),
            THROUGHPUT,
            1000.0,
            "CPU µs/KB",
        ),
        Case(
            "stream_128k",
            "stream tcp 128 KiB",
            {**stream, "message": 131072},
            "iperf3",
            _iperf3("128K"),
            THROUGHPUT,
            1000.0,
            "CPU µs/KB",
        ),
        Case(
            "rr_tcp",
            f"rr tcp {RR_SIZE}/{RR_SIZE} B",
            {**rr, "protocol": "tcp"},
            "sockperf_tcp",
            _sockperf(False),
            RR_METRICS,
            1.0,
            "CPU µs/trans",
        ),
        Case(
            "rr_udp",
            f"rr udp {RR_SIZE}/{RR_SIZE} B",
            {**rr, "protocol": "udp"},
            "sockperf_udp",
            _sockperf(True),
            RR_METRICS,
            1.0,
            "CPU µs/trans",
        ),
        Case(
            "crr_tcp",
            "crr tcp 1/1 B server-first",
            # The engine's default close, netperf TCP_CRR's order: the server first.
            {**base, "kind": "crr", "request": 1, "response": 1, "close": "server-first"},
            None if netperf is None else "netperf",
            None if netperf is None else _netperf_crr(netperf),
            (Metric("cps", "connections/s", True),),
            1.0,
            "CPU µs/conn",
        ),
        Case(
            "crr_tcp_busy_poll",
            "crr tcp 1/1 B server-first, busy poll 50 µs",
            # The same, its loop asking without sleeping for 50 µs before it sleeps
            # (`busy_poll_us`; netperf has no such setting): a wake-up saved per answer.
            {
                **base,
                "kind": "crr",
                "request": 1,
                "response": 1,
                "close": "server-first",
                "busy_poll_us": 50,
            },
            None if netperf is None else "netperf",
            None if netperf is None else _netperf_crr(netperf),
            (Metric("cps", "connections/s", True),),
            1.0,
            "CPU µs/conn",
        ),
        Case(
            "crr_tcp_client_first",
            "crr tcp 1/1 B client-first",
            # The client shuts down first: half a round trip more per connection.
            {**base, "kind": "crr", "request": 1, "response": 1, "close": "client-first"},
            None,
            None,
            (Metric("cps", "connections/s", True),),
            1.0,
            "CPU µs/conn",
        ),
        Case(
            "crr_tcp_reset",
            "crr tcp 1/1 B close=reset",
            # SO_LINGER 0: one RST, no FIN
            {**base, "kind": "crr", "request": 1, "response": 1, "close": "reset"},
            None,
            None,
            (Metric("cps", "connections/s", True),),
            1.0,
            "CPU µs/conn",
        ),
    ]


ENGINE_PARSERS: dict[str, Parser] = {
    "stream": parse_engine_stream,
    "rr": parse_engine_rr,
    "crr": parse_engine_crr,
}


@dataclass
class TestResult:
    test: Case
    engine: list[Run] = field(default_factory=list)
    peer: list[Run] = field(default_factory=list)


@dataclass
class Plan:
    """What to run on each path."""

    cases: list[Case]
    pairs: int
    duration: float
    netperf: Path | None = None


def run_path(
    spawner: Spawner, engine: Path, plan: Plan, log: Callable[[str], None]
) -> list[TestResult]:
    pairs, duration = plan.pairs, plan.duration
    timeout = duration + WARMUP_S + 30.0
    servers: dict[str, Server] = {"engine": start_engine_server(spawner, engine)}
    servers["iperf3"] = start_iperf3_server(spawner)
    servers["sockperf_tcp"] = start_sockperf_server(spawner, udp=False)
    servers["sockperf_udp"] = start_sockperf_server(spawner, udp=True)
    if plan.netperf is not None and any(t.peer == "netperf" for t in plan.cases):
        servers["netperf"] = start_netserver(spawner, plan.netperf)
    eng = servers["engine"]
    results: list[TestResult] = []
    for test in plan.cases:
        res = TestResult(test)
        results.append(res)
        spec = {**test.engine_spec, "duration": duration, "server": f"{eng.addr}:{eng.port}"}
        eargv = [str(engine), "run", "--spec", json.dumps(spec)]
        for i in range(pairs):
            run = measure(
                spawner, "secperf-engine", eng, eargv, ENGINE_PARSERS[spec["kind"]], timeout
            )
            res.engine.append(run)
            log(f"[{spawner.name}] {test.name} pair {i + 1}/{pairs} engine: {_brief(run)}")
            if test.peer is not None and test.peer_argv is not None:
                srv = servers[test.peer]
                tool = test.peer.split("_")[0]
                parse = PEER_PARSERS[tool]
                pargv = test.peer_argv(srv.addr, srv.port, duration)
                prun = measure(spawner, tool, srv, pargv, parse, timeout)
                res.peer.append(prun)
                log(f"[{spawner.name}] {test.name} pair {i + 1}/{pairs} {tool}: {_brief(prun)}")
    return results


def _brief(run: Run) -> str:
    if not run.ok:
        return f"FAILED {run.error}"
    figs = ", ".join(f"{k}={v:.4g}" for k, v in run.metrics.items())
    # Busy CPU not charged to the two processes: softirq elsewhere, or someone else's load.
    other = run.machine_busy_s - run.cpu_client_s - run.cpu_server_s
    return (
        f"{figs}; cpu client {run.cpu_client_s:.2f} s server {run.cpu_server_s:.2f} s, "
        f"machine busy {run.machine_busy_s:.2f} s (other {other:.2f} s, steal {run.steal_s:.2f} s)"
    )


# -- summary -------------------------------------------------------------------


def _median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _pair_ratios(res: TestResult, get: Callable[[Run], float | None]) -> list[float | None]:
    out: list[float | None] = []
    for e, p in zip(res.engine, res.peer, strict=False):
        a, b = get(e), get(p)
        out.append(a / b if a is not None and b and e.ok and p.ok else None)
    return out


def summarize(path: str, results: list[TestResult]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for res in results:
        t = res.test
        peer_tool = t.peer.split("_")[0] if t.peer else None

        def demand(r: Run, t: Case = t) -> float | None:
            return r.demand(t.demand_per)

        def machine(r: Run, t: Case = t) -> float | None:
            return r.demand(t.demand_per, machine=True)

        for m in t.metrics:

            def metric(r: Run, key: str = m.key) -> float | None:
                return r.metrics.get(key) if r.ok else None

            row: dict[str, Any] = {
                "path": path,
                "test": t.name,
                "title": t.title,
                "metric": m.key,
                "label": m.label,
                "higher_better": m.higher_better,
                "peer": peer_tool,
                "n_engine": sum(r.ok for r in res.engine),
                "n_peer": sum(r.ok for r in res.peer),
                "engine": _median([metric(r) for r in res.engine]),
                "peer_median": _median([metric(r) for r in res.peer]),
                "ratio": _median(_pair_ratios(res, metric)),
                "demand_unit": t.demand_unit,
                "demand_engine": _median([demand(r) for r in res.engine]),
                "demand_peer": _median([demand(r) for r in res.peer]),
                "demand_ratio": _median(_pair_ratios(res, demand)),
                "machine_demand_engine": _median([machine(r) for r in res.engine]),
                "machine_demand_peer": _median([machine(r) for r in res.peer]),
            }
            row["verdict"], row["target"] = _verdict(t, m, row)
            rows.append(row)
    return rows


def other_load(results: list[TestResult]) -> float | None:
    """Median over all runs of the busy machine CPU not charged to the client or server."""
    shares = [
        (r.machine_busy_s - r.cpu_client_s - r.cpu_server_s) / r.machine_busy_s
        for res in results
        for r in [*res.engine, *res.peer]
        if r.ok and r.machine_busy_s > 0
    ]
    return statistics.median(shares) if shares else None


def _verdict(t: Case, m: Metric, row: dict[str, Any]) -> tuple[str, str]:
    ratio, dratio = row["ratio"], row["demand_ratio"]
    if t.name.startswith("stream") and m.key == "gbps":
        target = (
            f"throughput ≥ {STREAM_MIN_RATIO:.2f}× iperf3 and CPU/byte ≤ "
            f"{STREAM_MAX_CPU_RATIO:.2f}× iperf3"
        )
        if ratio is None or dratio is None:
            return "NO DATA", target
        ok = ratio >= STREAM_MIN_RATIO and dratio <= STREAM_MAX_CPU_RATIO
        return ("PASS" if ok else "MISS"), target
    if t.name.startswith("rr") and m.key == "rtt_mean_us":
        target = f"mean round trip ≤ {RR_MAX_LATENCY_RATIO:.2f}× sockperf"
        if ratio is None:
            return "NO DATA", target
        return ("PASS" if ratio <= RR_MAX_LATENCY_RATIO else "MISS"), target
    if t.peer == "netperf" and m.key == "cps":
        target = f"connections/s ≥ {CRR_MIN_RATIO:.2f}× netperf TCP_CRR (same close order)"
        if ratio is None:
            return "NO DATA", target
        return ("PASS" if ratio >= CRR_MIN_RATIO else "MISS"), target
    return "", ""


def _fmt(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "–"
    return f"{v:.{digits}g}" if abs(v) < 10**digits else f"{v:.0f}"


def _ratio(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table (readable in a terminal, pasteable into docs/performance.md)."""
    head = ["path", "test", "metric", "n", "engine", "peer", "engine/peer", "CPU unit",
            "CPU engine", "CPU peer", "CPU e/p", "host engine", "host peer", "verdict"]  # fmt: skip
    body = []
    for r in rows:
        better = "↑" if r["higher_better"] else "↓"
        body.append(
            [
                r["path"],
                r["title"],
                f"{r['label']} {better}",
                f"{r['n_engine']}/{r['n_peer']}" if r["peer"] else str(r["n_engine"]),
                _fmt(r["engine"]),
                f"{_fmt(r['peer_median'])} {r['peer'] or ''}".strip(),
                _ratio(r["ratio"]),
                r["demand_unit"],
                _fmt(r["demand_engine"], 3),
                _fmt(r["demand_peer"], 3),
                _ratio(r["demand_ratio"]),
                _fmt(r["machine_demand_engine"], 3),
                _fmt(r["machine_demand_peer"], 3),
                r["verdict"],
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    lines = [
        "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in [head, ["-" * w for w in widths], *body]
    ]
    return "\n".join(lines)


LEGEND = (
    "Medians over the pairs; engine/peer is the median of per-pair ratios. ↑ higher is better,\n"
    "↓ lower is better (a latency ratio below 1 means the engine's round trip is shorter).\n"
    "rr latency: both tools report the full round trip (sockperf --full-rtt), "
    f"{RR_SIZE}-byte request and response\n(sockperf's minimum message size) for both.\n"
    "Service demand: client + server process CPU (utime+stime, /proc/PID/stat) over the\n"
    "process lifetime, per KB (1000 bytes) sent or per transaction completed in that lifetime.\n"
    "host: the whole machine's busy CPU (/proc/stat) over the same window, per the same unit\n"
    "(it includes forwarding softirq work and anything else running). n: successful runs."
)


# -- machine and main --------------------------------------------------------------


def machine(netperf: Path | None = None) -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break

    def version(argv: list[str]) -> str:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return "?"
        return (p.stdout or p.stderr).strip().splitlines()[0] if (p.stdout or p.stderr) else "?"

    return {
        "kernel": platform.release(),
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "iperf3": version(["iperf3", "--version"]),
        "sockperf": version(["sockperf", "--version"]),
        "netperf": version([str(netperf), "-V"]) if netperf else "not used",
    }


def write_result(out: Path, bench: str, started: str, args: Any, **fields: Any) -> None:
    """A bench's kept result: which bench, when, with what arguments on what machine,
    then its own fields (the shape docs/performance.md's figures are read from)."""
    doc = {
        "bench": bench,
        "started": started,
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": machine(),
        **fields,
    }
    out.write_text(json.dumps(doc, indent=1))


@contextmanager
def sigterm_exits() -> Iterator[None]:
    """SIGTERM raises SystemExit so that every finally block (process stops) runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def run_loopback(engine: Path, plan: Plan, log: Callable[[str], None]) -> list[TestResult]:
    spawner = LocalSpawner()
    try:
        return run_path(spawner, engine, plan, log)
    finally:
        spawner.stop_all()


def run_forward(engine: Path, plan: Plan, log: Callable[[str], None]) -> list[TestResult]:
    from secperf.testbed.testbed import Testbed, install_teardown_handlers
    from secperf.testbed.topology import Topology

    with Testbed.build(Topology.standard()) as tb, install_teardown_handlers(tb):
        spawner = NetnsSpawner(tb)
        try:
            return run_path(spawner, engine, plan, log)
        finally:
            spawner.stop_all()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    root = os.geteuid() == 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--pairs", type=int, default=5, help="interleaved pairs per test (default 5)")
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds per run")
    ap.add_argument(
        "--path",
        choices=["loopback", "forward", "both"],
        default="both" if root else "loopback",
        help="loopback, forward (testbed, needs root) or both (default: both as root)",
    )
    ap.add_argument("--out", type=Path, help="write every run and the summary as JSON here")
    ap.add_argument("--engine", type=Path, default=DEFAULT_ENGINE, help="secperf-engine binary")
    names = [t.name for t in tests()]
    ap.add_argument(
        "--tests",
        default=",".join(names),
        help="comma-separated subset of: " + ", ".join(names),
    )
    ap.add_argument(
        "--netperf",
        type=Path,
        default=Path(shutil.which("netperf") or "/tmp/netperf/src/netperf"),
        help="a netperf binary (netserver beside it) to pair crr with TCP_CRR; built "
        "outside the repository (docs/performance.md); default: netperf on PATH, else "
        "/tmp/netperf/src/netperf; absent: crr runs engine alone",
    )
    ap.add_argument(
        "--rcvlowat",
        type=int,
        help="the engine streams' rcvlowat (default: the engine's own; 1 = wake on any data)",
    )
    args = ap.parse_args(argv)
    known = set(names)
    args.tests = [t.strip() for t in args.tests.split(",") if t.strip()]
    unknown = [t for t in args.tests if t not in known]
    if unknown or not args.tests:
        ap.error(f"--tests: unknown {unknown or 'empty'}; choose from {', '.join(sorted(known))}")
    if args.rcvlowat is not None and args.rcvlowat < 1:
        ap.error("--rcvlowat must be ≥ 1 (1 = the kernel's default)")
    if args.pairs < 1 or not 0 < args.duration <= 600:
        ap.error("--pairs must be ≥ 1 and --duration in (0, 600]")
    if not (
        os.access(args.netperf, os.X_OK) and os.access(args.netperf.with_name("netserver"), os.X_OK)
    ):
        print(
            f"note: no netperf/netserver at {args.netperf}: crr runs engine alone "
            "(build netperf as docs/performance.md says and give --netperf PATH)",
            file=sys.stderr,
        )
        args.netperf = None
    if args.path != "loopback" and not root:
        ap.error("--path forward/both builds a namespace testbed: run as root")
    return args


def check_tools(engine: Path) -> None:
    if not os.access(engine, os.X_OK):
        raise BenchError(
            f"no secperf-engine binary at {engine}",
            fix="cargo build --release --manifest-path engine/Cargo.toml (or make setup)",
        )
    for tool in ("iperf3", "sockperf", "ss"):
        if subprocess.run(["which", tool], capture_output=True, check=False).returncode != 0:
            raise BenchError(
                f"{tool} is not installed", fix="apt-get install iperf3 sockperf iproute2"
            )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    stack = ExitStack()
    try:
        check_tools(args.engine)
        # A private copy: a rebuild of engine/ during the bench must not pair an old
        # server with a new client (or change the tool half way).
        tmp = tempfile.TemporaryDirectory(prefix="secperf-bench-")
        stack.callback(tmp.cleanup)
        engine = Path(shutil.copy2(args.engine, Path(tmp.name) / "secperf-engine"))
        started = datetime.now(UTC)
        paths = ["loopback", "forward"] if args.path == "both" else [args.path]
        netperf = None
        if args.netperf is not None:
            # Private copies too, netserver beside netperf.
            netperf = Path(shutil.copy2(args.netperf, Path(tmp.name) / "netperf"))
            shutil.copy2(args.netperf.with_name("netserver"), Path(tmp.name) / "netserver")
        cases = [t for t in tests(args.rcvlowat, netperf) if t.name in args.tests]
        plan = Plan(cases, args.pairs, args.duration, netperf)
        all_rows: list[dict[str, Any]] = []
        raw: dict[str, Any] = {}
        quiet: dict[str, float | None] = {}
        with sigterm_exits():
            for path in paths:
                runner = run_loopback if path == "loopback" else run_forward
                results = runner(engine, plan, log)
                all_rows += summarize(path, results)
                quiet[path] = other_load(results)
                raw[path] = {
                    r.test.name: {
                        "engine": [asdict(x) for x in r.engine],
                        "peer": [asdict(x) for x in r.peer],
                    }
                    for r in results
                }
    except SecperfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: every process the bench started was stopped", file=sys.stderr)
        return 130
    finally:
        stack.close()
    print()
    print(
        f"secperf-engine vs peers — {started:%Y-%m-%d %H:%M} UTC, "
        f"{args.pairs} pairs × {args.duration:g} s"
        + ("" if args.rcvlowat is None else f", engine streams with rcvlowat {args.rcvlowat}")
    )
    print(table(all_rows))
    print()
    print(LEGEND)
    for path, share in quiet.items():
        print(
            f"{path}: median share of busy machine CPU outside the two measured processes: "
            f"{_fmt(share and share * 100, 3)} % (softirq work such as TCP receive and forwarding, "
            "plus anyone else's load: compare it between runs)"
        )
    verdicts = [r for r in all_rows if r["verdict"]]
    print()
    for r in verdicts:
        print(
            f"{r['verdict']:7} {r['path']:8} {r['title']}: {r['target']} "
            f"(ratio {_ratio(r['ratio'])}, CPU ratio {_ratio(r['demand_ratio'])})"
        )
    if args.out:
        doc = {
            "date": started.isoformat(),
            "machine": machine(args.netperf),
            "config": {
                "pairs": args.pairs,
                "duration_s": args.duration,
                "paths": paths,
                "warmup_s": WARMUP_S,
                "rr_message_bytes": RR_SIZE,
                "tests": args.tests,
                "engine_rcvlowat": args.rcvlowat,
                "netperf": str(args.netperf) if args.netperf else None,
            },
            "summary": all_rows,
            "other_cpu_share": quiet,
            "runs": raw,
        }
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
