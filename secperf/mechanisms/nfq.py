"""secperf-nfq, the daemon of the mechanisms that look at packets in user space.

One binary, built with the engine, in three roles: on NFQUEUE giving every new
connection a verdict and logging it (`--queue --log`), on NFQUEUE matching every
packet against a rule file (`--queue --rules`, inline), and on a packet socket
matching a mirror's copies (`--packet-socket --rules`, detection only). Here: where
the binary is, how it is started (ready once it prints its `listening` line) and
stopped (SIGTERM: it writes its counters and exits), how its counters are read while
it runs (SIGUSR2), and the rule files it reads (secperf.ips_rules's subset of the
Snort/Suricata syntax, copied or generated into the run directory).

The iptables side is written here too, once for every kind that queues: the NFQUEUE
target (one queue, or `--queue-balance` over several, one daemon thread each; with
`--queue-bypass` when the mechanism fails open), and the rules before it that let the
engine's control connection pass without the queue. That connection (TCP, the engine
server's control port) carries no measured traffic, only the test's setup, snapshots
and results; when it waited in the same queue as the load, a daemon that could not
keep up starved it and the whole test failed ("no reply to `snapshot` within 5 s")
instead of reporting the loss. Every other packet, the measured traffic included, is
queued.
"""

from __future__ import annotations

import json
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secperf import ips_rules
from secperf.errors import MechanismError
from secperf.mechanisms.base import (
    CheckContext,
    MechanismContext,
    MechanismSpec,
    TrafficPlan,
)
from secperf.mechanisms.capabilities import Counts
from secperf.testbed.hosts import Host, ManagedProcess
from secperf.tools import nfq_path

LABEL = "secperf-nfq"
STOP_TIMEOUT_S = 10.0
SNAPSHOT_TIMEOUT_S = 5.0


def built(spec: MechanismSpec, ctx: CheckContext) -> None:
    """A kind's `run_check`: the daemon is built with the engine, there before any
    testbed is."""
    nfq_path()


def read_line(proc: ManagedProcess, deadline: float) -> str | None:
    """One stdout line of the daemon, or None at EOF or when the deadline passes."""
    out = proc.stdout
    assert out is not None
    sel = selectors.DefaultSelector()
    sel.register(out, selectors.EVENT_READ)
    try:
        while (left := deadline - time.monotonic()) > 0:
            if sel.select(timeout=left):
                line = out.readline()
                return line if line else None
        return None
    finally:
        sel.close()


def start(
    host: Host, argv: list[str], err: Path, *, timeout: float, what: str, fix: str
) -> ManagedProcess:
    """secperf-nfq with `argv` in `host`, once it says it is listening; else stopped
    again and an error `what: <what it said>` that points at its stderr (`err`)."""
    with err.open("a") as e:
        proc = host.spawn([nfq_path(), *argv], stdout=subprocess.PIPE, stderr=e, label=LABEL)
    line = read_line(proc, time.monotonic() + timeout)
    if line is None or '"listening"' not in line:
        proc.stop(timeout=2.0)
        said = (line or "").strip() or err.read_text().strip()[-500:]
        raise MechanismError(f"{what}: {said or 'no output'}", where=str(err), fix=fix)
    return proc


def kill(procs: list[ManagedProcess]) -> list[str]:
    """SIGKILL each running daemon (a crash, not a shutdown) and reap it; their labels."""
    killed = []
    for proc in procs:
        if proc.poll() is None:
            proc.popen.send_signal(signal.SIGKILL)
            proc.stop(timeout=5.0)  # reaps it and drops it from the ledger
            killed.append(f"{proc.label} (pid {proc.pid})")
    return killed


# ------------------------------------------------------------------- the queue rule


def queue_target(queue: int, queues: int, bypass: bool) -> str:
    """The NFQUEUE target's arguments: queue `queue`, or `queues` of them from `queue`
    on (`--queue-balance`: the kernel spreads flows over them by a hash of their
    addresses, so a flow stays on one queue), and `--queue-bypass` (no daemon bound:
    accept, fail open) when asked."""
    if queues > 1:
        target = f"NFQUEUE --queue-balance {queue}:{queue + queues - 1}"
    else:
        target = f"NFQUEUE --queue-num {queue}"
    return target + (" --queue-bypass" if bypass else "")


def control_bypass(chain: str, plan: TrafficPlan) -> list[str]:
    """iptables-restore lines for `chain` that accept the engine's control connection
    (TCP to or from the engine server's control port) before the NFQUEUE rule, so it
    never waits behind the load in the queue (the module's docstring says why)."""
    port = plan.control_port
    return [
        f"-A {chain} -p tcp --dport {port} -j ACCEPT",
        f"-A {chain} -p tcp --sport {port} -j ACCEPT",
    ]


def daemon_queue_args(queue: int, queues: int, fail_open: bool) -> list[str]:
    """secperf-nfq's arguments for the queues the rule sends to: the first, how many
    (a thread each) and, failing open, that a full queue accepts rather than drops."""
    argv = ["--queue", str(queue)]
    if queues > 1:
        argv += ["--queues", str(queues)]
    return argv + (["--fail-open"] if fail_open else [])


# ------------------------------------------------------------------- the matcher


@dataclass
class Matcher:
    """A running matcher, the file it writes its counters to, and the JSON-lines file
    its counters are kept in once it stops."""

    proc: ManagedProcess
    stats: Path
    out: Path


def host_name(host: Host) -> str:
    """The host's name in the testbed graph ("dut", "ids"), not its namespace's."""
    return host.role


def stats_paths(ctx: MechanismContext, host: Host) -> tuple[Path, Path, Path]:
    """(the daemon's counters, the kept counters, its stderr) for `host`."""
    stem = f"{ctx.name}.{host_name(host)}"
    return (
        ctx.files_dir / f"{stem}.nfq-stats.json",
        ctx.files_dir / f"{stem}.ips-stats.jsonl",
        ctx.files_dir / f"{stem}.nfq.stderr",
    )


def start_matcher(
    host: Host, ctx: MechanismContext, argv: list[str], what: str, timeout: float
) -> Matcher:
    """A matcher with `argv` (its rules, its queue or socket) in `host`, ready."""
    stats, out, err = stats_paths(ctx, host)
    stats.unlink(missing_ok=True)
    proc = start(
        host,
        [*argv, "--stats", str(stats)],
        err,
        timeout=timeout,
        what=f"secperf-nfq ({what}) did not start",
        fix="run `secperf check` on the scenario; is the engine built (scripts/setup.sh)?",
    )
    return Matcher(proc, stats, out)


def stop_matcher(m: Matcher, extra: dict[str, Any]) -> None:
    """SIGTERM (the daemon writes its counters and exits), then append them to m.out."""
    m.proc.stop(timeout=STOP_TIMEOUT_S)
    if m.stats.is_file():
        record = json.loads(m.stats.read_text())
        record.update(extra)
        with m.out.open("a") as f:
            f.write(json.dumps(record) + "\n")


def snapshot(m: Matcher, host: str) -> Counts | None:
    """The running matcher's counters now (SIGUSR2 makes it write them); None if it
    does not run."""
    if m.proc.poll() is not None:
        return None
    m.stats.unlink(missing_ok=True)
    m.proc.popen.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + SNAPSHOT_TIMEOUT_S
    while time.monotonic() < deadline:
        if m.stats.is_file():
            text = m.stats.read_text()
            if text.endswith("\n"):
                rec = json.loads(text)
                ips = rec.get("ips", {})
                return {
                    "by_sid": {str(k): int(v) for k, v in ips.get("by_sid", {}).items()},
                    "drops": int(ips.get("drops", 0)),
                    "packets": int(rec.get("packets", 0)),
                    "queue_dropped": rec.get("kernel", {}).get("queue_dropped"),
                    # the queue's netlink socket overflowed: lost before the matcher
                    "user_dropped": rec.get("kernel", {}).get("user_dropped"),
                    "enobufs": rec.get("enobufs"),
                    "sensor_drops": rec.get("sensor_drops"),
                    # with reassembly on: its counters (docs/data-format.md)
                    "reassembly": ips.get("reassembly"),
                }
        time.sleep(0.02)
    raise MechanismError(
        f"secperf-nfq on {host} did not write its counters on SIGUSR2",
        where=str(m.stats),
    )


# ------------------------------------------------------------------- rule files


def rules_text(rules: Path | int) -> str:
    """The rule file's text: the file itself, or N generated rules."""
    if isinstance(rules, int):
        return ips_rules.generate_rules(rules)
    return Path(rules).read_text()


def load_rules(rules: Path | int) -> list[ips_rules.Rule]:
    if isinstance(rules, int):
        return ips_rules.parse_text(rules_text(rules), f"<{rules} generated rules>")
    return ips_rules.parse_rules(Path(rules))


def write_rule_files(rules: Path | int, ctx: MechanismContext) -> tuple[Path, Path]:
    """The rule file as used (a copy, or the generated one) and its normalized JSON."""
    ctx.files_dir.mkdir(parents=True, exist_ok=True)
    parsed = load_rules(rules)
    src = ctx.files_dir / f"{ctx.name}.rules"
    src.write_text(rules_text(rules))
    js = ctx.files_dir / f"{ctx.name}.rules.json"
    js.write_text(ips_rules.normalized(parsed))
    return src, js
