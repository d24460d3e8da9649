"""How a `rfc2544` point is measured: RFC 2544's throughput, latency, frame loss rate
and back-to-back tests for one frame size, on the packet sender (`logic` has the
RFC's searches and arithmetic).

Every trial is one engine `flood` run of kind udp, `sender = "packet"` (whole
Ethernet frames on an AF_PACKET socket in the client host, past its IP stack and
qdisc), from the client to the server across the DUT, with frames of F − 4 bytes
(an F-byte frame without its FCS) to UDP port `port`. The receiver is the server
host: an nft counter in its prerouting hook at raw priority counts and drops the
test frames there (so the server's stack never answers them), read before the
trial and after it once it has settled (at least `settle` seconds after the
sender's last frame, and until two reads 50 ms apart agree). Frames lost = frames
the sender's kernel took − frames counted. The server's interfaces' rx packets
are read over the same window too: what they saw beyond the counted frames (ARP,
anything else) is the background, recorded beside each trial.

One measurement runs the tests `tests` names, in the RFC's order: throughput;
latency at the throughput found (the latency kind, at that rate, with its frame
size; skipped when no lossless rate was found); frame loss at 100 %, 90 %, ... of
the line rate; back-to-back bursts at line rate. The result record holds each
test's answer; every trial is in it (the searches' `steps`, the loss steps), and
the latency test's own records are kept nested (`{"type": "side", ...}`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any

import secperf.workloads.rfc2544.logic as rfc2544
from secperf.engine import Record, run_test
from secperf.errors import EngineError, SecperfError
from secperf.testbed import placement
from secperf.testbed.cgroups import parse_cpus
from secperf.testbed.hosts import Host
from secperf.workloads.base import MeasureContext, Spec, WorkloadPoint, scalar
from secperf.workloads.parts.flood import keep_side
from secperf.workloads.parts.latency import LatencyExecutor, LatencyWorkload
from secperf.workloads.parts.search import Bracket
from secperf.workloads.parts.search_method import Answer
from secperf.workloads.rfc2544.spec import Rfc2544Workload

POLL_S = 0.05
SETTLE_MAX_S = 5.0  # the counter must be still within this long after the settle time


class Rfc2544Error(SecperfError):
    """An RFC 2544 workload that cannot run on this testbed."""


def line_rate_bps(ctx: MeasureContext, spec: Rfc2544Workload) -> int:
    """The line rate: the workload's `line_rate`, else the rate of the client's link."""
    if spec.line_rate:
        return spec.line_rate
    for link in ctx.topology.links_of(ctx.client):
        if link.rate_bps:
            return int(link.rate_bps)
    raise Rfc2544Error(
        "RFC 2544 rates are fractions of the line rate, and the client's link has no rate",
        where="testbed.link_rate",
        fix='set testbed.link_rate (e.g. "100mbit"), or the workload\'s line_rate',
    )


@dataclass
class Receiver:
    """The counting receiver in the server host (see the module's docstring)."""

    ctx: MeasureContext
    port: int

    @property
    def table(self) -> str:
        return f"secperf_{self.ctx.testbed.prefix}_rfc2544"

    def _host(self) -> Any:
        return self.ctx.testbed.host(self.ctx.server)

    def install(self) -> None:
        rules = "\n".join(
            [
                f"table inet {self.table} {{}}",
                f"delete table inet {self.table}",
                f"table inet {self.table} {{",
                "  counter frames {}",
                "  chain prerouting {",
                "    type filter hook prerouting priority raw; policy accept;",
                f'    udp dport {self.port} counter name "frames" drop',
                "  }",
                "}",
            ]
        )
        self._host().run(["nft", "-f", "-"], input=rules + "\n")

    def remove(self) -> None:
        self._host().run(["nft", "delete", "table", "inet", self.table], check=False)

    def counted(self) -> int:
        out = self._host().run(["nft", "-j", "list", "counter", "inet", self.table, "frames"])
        for item in json.loads(out.stdout).get("nftables", []):
            counter = item.get("counter")
            if isinstance(counter, dict):
                return int(counter.get("packets", 0))
        raise EngineError(
            f"the receiver's counter is gone from the {self.ctx.server} host",
            fix="something removed secperf's nft table there during the test: report it",
        )

    def rx_packets(self) -> int:
        """Packets received on every interface of the server host but loopback."""
        out = self._host().run(["ip", "-s", "-j", "link", "show"]).stdout
        return sum(
            int(dev["stats64"]["rx"]["packets"])
            for dev in json.loads(out)
            if dev.get("ifname") != "lo" and "stats64" in dev
        )

    def settled(self, since: float, settle_s: float) -> int:
        """The counter once `settle_s` has passed since `since` and two reads agree."""
        end = since + settle_s
        while time.monotonic() < end:
            time.sleep(min(POLL_S, max(end - time.monotonic(), 0.0)))  # the RFC's settle time
        deadline = time.monotonic() + SETTLE_MAX_S
        last = self.counted()
        while time.monotonic() < deadline:
            time.sleep(POLL_S)  # poll interval, not a wait for an event
            now = self.counted()
            if now == last:
                return now
            last = now
        raise EngineError(
            f"the receiver's count still grew {SETTLE_MAX_S:.0f} s after the trial ended",
            fix="another sender aims at the test port, or the path holds frames for "
            "seconds (a deep queue): check the topology's queues",
        )


# The interface holding the address the host's sshd reports for this session (the third
# word of $SSH_CONNECTION); none outside an SSH session (a namespace, the run's VM).
MANAGEMENT = r"""
set -- $SSH_CONNECTION
[ -n "$3" ] || exit 0
ip -o addr show | awk -v a="$3" '{split($4, p, "/"); if (p[1] == a) print $2}'
"""


def management_interfaces(host: Host) -> set[str]:
    """The interfaces the host's management session arrives on (see MANAGEMENT)."""
    got = host.run(["sh", "-c", MANAGEMENT], check=False)
    return {line.split("@")[0] for line in got.stdout.split() if line}


def cpu_mask(cpus: str) -> str:
    """A CPU list ("1", "0-1", "0,2") as the hex mask rps_cpus takes."""
    return placement.cpu_mask(parse_cpus(cpus))


@dataclass
class Steering:
    """Receive packet steering on the DUT's interfaces: every frame the DUT takes in is
    processed (forwarded, filtered) on `cpus`, not on the CPU of whoever sent it to the
    veth. Without it the DUT's work runs in the sender's context and slows the sender
    instead of dropping frames; with it a DUT that cannot keep up overflows its input
    queue (netdev_max_backlog) and loses frames, as a real DUT does."""

    ctx: MeasureContext
    cpus: str
    before: dict[str, str] | None = None

    def _files(self) -> list[str]:
        host = self.ctx.testbed.host("dut")
        devices = [
            dev["ifname"]
            for dev in json.loads(host.run(["ip", "-j", "link", "show"]).stdout)
            if dev.get("ifname") != "lo"
        ]
        management = management_interfaces(host)
        touched = sorted(set(devices) & management)
        if touched:
            raise EngineError(
                f"dut_cpus would steer {', '.join(touched)} on {host.name}, the interface of "
                "the session secperf manages it through: secperf never steers it",
                where="rfc2544 dut_cpus",
                fix="drop dut_cpus for a DUT reached over its test network, or manage it "
                "through an interface it does not forward on",
            )
        return [f"/sys/class/net/{dev}/queues/rx-0/rps_cpus" for dev in devices]

    def apply(self) -> dict[str, str]:
        host = self.ctx.testbed.host("dut")
        mask = cpu_mask(self.cpus)
        self.before = {}
        for path in self._files():
            self.before[path] = host.run(["cat", path]).stdout.strip()
            # put back by teardown (and a lab host's watchdog) if this process dies
            host.track_setting(path, self.before[path])
            host.run(placement.write_argv(mask, path))
        return {"dut_cpus": self.cpus, "rps_mask": mask}

    def restore(self) -> None:
        host = self.ctx.testbed.host("dut")
        for path, value in (self.before or {}).items():
            host.run(placement.write_argv(value, path), check=False)


@dataclass
class Trials:
    """Offers frames of one size from the client and counts them at the receiver."""

    ctx: MeasureContext
    frame: int
    trial_s: float
    settle_s: float
    receiver: Receiver
    target: str
    line_fps: float

    def _spec(self, rate: int, duration: float, count: int | None = None) -> Spec:
        spec: Spec = {
            "kind": "flood",
            "flood": "udp",
            "target": self.target,
            "rate_pps": rate,
            "duration": duration,
            "payload_size": rfc2544.udp_payload(self.frame),
            "ports": str(self.receiver.port),
            "sender": "packet",
        }
        if count is not None:
            spec["count"] = count
        return spec

    def _offer(self, spec: Spec, asked_fps: float) -> rfc2544.Offer:
        before, rx_before = self.receiver.counted(), self.receiver.rx_packets()
        keep = keep_side(self.ctx, "trial")  # the sender's own records, nested
        run = run_test(self.ctx.testbed.host(self.ctx.client), spec, on_record=keep)
        ended = time.monotonic()
        result = run.result
        after = self.receiver.settled(ended, self.settle_s)
        rx_after = self.receiver.rx_packets()
        sent = int(result.get("packets") or 0)
        received = after - before
        if received > sent:
            raise EngineError(
                f"the receiver counted {received} frames of a trial that sent {sent}",
                fix=f"something else sends to UDP port {self.receiver.port} in the testbed: "
                "set the workload's port to one nothing else uses",
            )
        if result.get("sender") != "packet":
            raise EngineError(
                f"the trial ran on the {result.get('sender')} sender, not the packet sender",
                fix="report this bug: the spec asks for sender = packet",
            )
        return rfc2544.Offer(
            asked_fps=asked_fps,
            sent=sent,
            received=received,
            seconds=float(result.get("duration_s") or 0.0),
            detail={
                "rate_error_pct": result.get("rate_error_pct"),
                "forfeited": result.get("forfeited"),
                "send_errors": result.get("send_errors"),
                # the server's interfaces beyond the counted frames (ARP and the like)
                "background": max(rx_after - rx_before - received, 0),
            },
        )

    def at_rate(self, fps: float, seconds: float | None = None) -> rfc2544.Offer:
        """`fps` frames/s for `seconds` (None: the workload's trial duration)."""
        rate = max(round(fps), 1)
        return self._offer(self._spec(rate, seconds or self.trial_s), fps)

    def burst(self, frames: int) -> rfc2544.Offer:
        """`frames` frames at line rate (the sender stops at the count)."""
        rate = round(self.line_fps)
        spec = self._spec(rate, frames / self.line_fps + 1.0, count=frames)
        return self._offer(spec, self.line_fps)


def _latency(
    ctx: MeasureContext,
    point: WorkloadPoint[Rfc2544Workload],
    frame: int,
    rate: float,
) -> dict[str, Any]:
    """The latency kind at `rate` frames/s of `frame` bytes; its records kept nested."""
    # Built here, not read from a file: the rate is whatever the search found.
    probes = LatencyWorkload.model_construct(
        kind="latency",
        name=point.spec.name,
        frame=frame,
        rate_pps=rate,
        duplex=point.spec.latency_duplex,
        duration=point.spec.latency_duration,
        warmup=0.5,
        hosts=1,
    )
    side = replace(ctx, keep=keep_side(ctx, "latency"))
    try:
        at = WorkloadPoint(point.workload_index, point.index, probes, point.label, point.swept)
        result = LatencyExecutor().measure(side, at)
    except EngineError as exc:
        # the table shows no latency for this frame: the run's errors say why
        ctx.keep({"type": "error", "kind": "latency", "message": f"{frame} B: {exc.message}"})
        return {"asked_fps": rate, "error": exc.message}
    c2s = result.get("c2s") or {}
    return {
        "asked_fps": rate,
        "duplex": probes.duplex,
        "duration_s": probes.duration,
        "achieved_fps": c2s.get("achieved_pps"),
        "sent": c2s.get("sent"),
        "received": c2s.get("received"),
        "delay_us": c2s.get("delay_us"),
        "unstamped": c2s.get("unstamped"),
        "reverse_achieved_fps": (result.get("s2c") or {}).get("achieved_pps"),
    }


def _search_out(found: Bracket | Answer) -> dict[str, Any]:
    return {"search": found.as_dict(), "outcome": found.outcome}


@dataclass(frozen=True)
class Rfc2544Executor:
    def measure(self, ctx: MeasureContext, point: WorkloadPoint[Rfc2544Workload]) -> Record:
        p = point.spec
        if ctx.family != 4:
            raise Rfc2544Error(
                "RFC 2544 trials run on the packet sender, which sends IPv4 frames only",
                where="testbed.family",
                fix='set family = "ipv4" in [testbed]',
            )
        frame = scalar(p.frame)
        tests = list(p.tests)
        link_bps = line_rate_bps(ctx, p)
        line_fps = rfc2544.line_rate_fps(link_bps, frame)
        via = "direct" if ctx.direct else "dut"
        target = ctx.topology.server_address(4, via, ctx.server)
        receiver = Receiver(ctx, p.port)
        trials = Trials(
            ctx,
            frame,
            trial_s=p.duration,
            settle_s=p.settle,
            receiver=receiver,
            target=target,
            line_fps=line_fps,
        )
        resolution = p.resolution_pct
        max_trials = p.max_trials
        record: Record = {
            "type": "result",
            "kind": p.kind,
            "frame": frame,
            "sent_bytes": rfc2544.sent_bytes(frame),
            "line_rate_bps": link_bps,
            "line_rate_fps": line_fps,
            "trial_s": trials.trial_s,
            "settle_s": trials.settle_s,
            "port": receiver.port,
            "target": target,
            "sender": "packet",
            "tests": tests,
        }
        steering = Steering(ctx, p.dut_cpus) if p.dut_cpus else None
        if steering is not None:
            record["steering"] = steering.apply()
        receiver.install()
        try:
            if "throughput" in tests or "latency" in tests:
                low = max(p.low_pct / 100.0 * line_fps, 100.0)
                tolerance = p.loss_tolerance_pct
                found = rfc2544.throughput_search(
                    trials.at_rate,
                    p,
                    line_fps=line_fps,
                    low_fps=min(low, line_fps / 2),
                    duration=trials.trial_s,
                    resolution_pct=resolution,
                    max_trials=max_trials,
                    loss_tolerance_pct=tolerance,
                    pdr_loss_pct=p.pdr_loss_pct,
                )
                rate = (
                    found.value
                    if found.value is not None
                    else (found.bound if found.outcome == "at_least" else None)
                )
                record["throughput"] = {
                    **_search_out(found),
                    "fps": found.value,
                    "loss_tolerance_pct": tolerance,
                    "pct_of_line": None if rate is None else 100.0 * rate / line_fps,
                    "bits_per_second": None
                    if found.value is None
                    else rfc2544.frame_bits_per_second(found.value, frame),
                    "method": found.method,
                }
                if "latency" in tests:
                    receiver.remove()  # the latency probes go to the engine server
                    if rate is None:
                        record["latency"] = {
                            "skipped": "no rate without loss was found, so there is no "
                            "throughput rate to measure latency at"
                        }
                    else:
                        record["latency"] = _latency(ctx, point, frame, rate)
                    receiver.install()
            if "loss" in tests:
                every = p.loss_every_step
                record["loss"] = rfc2544.loss_rates(
                    trials.at_rate, line_fps=line_fps, every_step=every
                ).as_dict()
            if "back_to_back" in tests:
                longest = int(line_fps * p.burst_max)
                shortest = max(p.burst_min, 1)
                b2b = rfc2544.back_to_back(
                    trials.burst,
                    low_frames=min(shortest, max(longest // 2, 1)),
                    high_frames=max(longest, 2),
                    resolution_pct=resolution,
                    max_trials=max_trials,
                )
                record["back_to_back"] = {**_search_out(b2b), "frames": b2b.value}
        finally:
            receiver.remove()
            if steering is not None:
                steering.restore()
        ctx.keep(record)
        return record
