"""Kind `stream`: bulk transfer (netperf TCP_STREAM / UDP_STREAM, iperf3), or with
`bytes` a fixed transfer timed to its last byte (ttcp, document 003)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import ValidationInfo, field_validator, model_validator

from secperf.errors import ScenarioError
from secperf.metric import (
    LOSS,
    Metric,
    MetricRow,
    Record,
    field,
    loss_pct,
    path,
    service_demand,
    throughput,
)
from secperf.schema.fields import (
    LinkRate,
    MessageSize,
    Parallel,
    PositiveDuration,
    ReceiveLowat,
    SocketBuffer,
    SweepPayload,
    SweepRate,
    TransferBytes,
    udp_fits,
)
from secperf.schema.units import human_size
from secperf.workloads.base import (
    CheckContext,
    EngineExecutor,
    WorkloadKind,
    WorkloadSpec,
    scalar,
)
from secperf.workloads.parts import flood_beside
from secperf.workloads.parts.flood_beside import Beside, FloodBeside
from secperf.workloads.parts.specs import TcpStream

TIME_LIMIT_S = 300.0  # the default time_limit of a fixed transfer


# The most memory secperf-engine's server holds for one test (rt/guard.rs
# MAX_TEST_MEMORY); a spec past it is refused.
ENGINE_TEST_MEMORY = 1 << 30


class StreamWorkload(FloodBeside, WorkloadSpec):
    """Bulk transfer (netperf TCP_STREAM / UDP_STREAM), or with `bytes` a fixed
    transfer timed to its last byte (ttcp, document 003)."""

    sweepable: ClassVar[dict[str, str]] = {
        "message": "size",
        "socket_buffer": "size",
        "parallel": "count",
        "rate": "rate",
        "flood_rate": "count",
        "payload": "name",
        "bytes": "size",
        "link_rate": "link_rate",
    }
    # one list with the stream that other kinds send beside theirs (parts/specs.py); the
    # engine says rate_bps: its `rate` is a count per second (http, crr, connections)
    engine_fields: ClassVar[tuple[str, ...]] = TcpStream.engine_fields
    engine_names: ClassVar[dict[str, str]] = TcpStream.engine_names

    kind: Literal["stream"]
    protocol: Literal["tcp", "udp"] = "tcp"
    """The transport of the stream."""
    direction: Literal["send", "receive", "both"] = "send"
    """`"send"` (client → server), `"receive"`, `"both"`."""
    message: MessageSize = 131072  # the engine's default; udp: 1024 (set below)
    """Bytes of each write; UDP: of each datagram (then at most 65507 B), and the default is 1 KiB.
    """
    socket_buffer: SocketBuffer = None
    """1 B … 2 GiB − 1 (and below `net.core.{r,w}mem_max`)."""
    parallel: Parallel = 1
    """1 … 128 streams."""
    payload: SweepPayload = "random"
    """`"random"` (incompressible), `"zeros"`, `"text"` (English-like, compressible)."""
    rate: SweepRate = None
    """Pace the senders to this total."""
    rcvlowat: ReceiveLowat = None  # the engine's default (see docs/scenario-format.md)
    """1 B … 64 MiB; tcp only; bytes queued before a blocked receiver wakes (SO_RCVLOWAT; see
    docs/engine-protocol.md); `1` wakes on every packet.
    """
    # A ttcp-style fixed transfer: move exactly this many bytes and time it (then
    # `duration` and `warmup` do not apply; `time_limit` bounds the transfer).
    bytes: TransferBytes = None
    """1 B … 1 TiB; tcp, one direction (`send` or `receive`), `parallel = 1`; a **fixed transfer**,
    as ttcp (document 003): exactly this many bytes on one connection, timed from before it
    opens to the last byte's arrival at the receiver; `duration` and `warmup` do not apply (the
    whole transfer is measured). Adds the metrics `transfer_kib_s` (kB/s as ttcp prints it, 1 kB
    = 1024 B) and `transfer_s` (the time) beside the throughput.
    """
    time_limit: PositiveDuration = TIME_LIMIT_S
    """The longest a fixed transfer may take; past it the test is an error, never a partial figure.
    """
    # Every link on the client-server path shaped to this rate for this workload's
    # tests ("unlimited" = no shaping); unset = the links as [testbed]/[topology] made them.
    link_rate: LinkRate = None
    """Every link on the client–server path reshaped to this rate (tbf as `[testbed] link_rate`, a
    500 ms queue below 1 Mbit/s or the link's own `queue`; `"unlimited"` removes the shaping)
    for this point's tests, baseline and variants alike, and restored after: document 003's
    table of the tunnels' overhead at 100 Mbit/s, 10 Mbit/s and 33.6 kbit/s is one workload.
    """

    def path_rate(self) -> int | None:
        return scalar(self.link_rate)

    @model_validator(mode="after")
    def _fixed_transfer_fits(self) -> StreamWorkload:
        if self.bytes is None:
            return self
        if self.protocol != "tcp":
            raise ValueError(
                "bytes (a fixed transfer) is TCP only (UDP loses what it loses): "
                'use protocol = "tcp"'
            )
        if self.direction == "both":
            raise ValueError(
                "bytes (a fixed transfer) goes one way, as ttcp's: "
                'use direction "send" or "receive"'
            )
        if self.parallel != 1:
            raise ValueError("bytes (a fixed transfer) is one connection, as ttcp's: parallel = 1")
        return self

    @model_validator(mode="before")
    @classmethod
    def _udp_message_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and "message" not in data and data.get("protocol") == "udp":
            return {**data, "message": 1024}
        return data

    @field_validator("message")
    @classmethod
    def _udp_fits(cls, value: int | list[int], info: ValidationInfo) -> int | list[int]:
        return udp_fits(value, info, "message")

    @model_validator(mode="after")
    def _udp_message_fits_socket_buffer(self) -> StreamWorkload:
        """A UDP datagram larger than the socket buffer is refused by the kernel (once
        fragmented, every fragment is charged to the buffer): the sender moves nothing."""
        if self.protocol != "udp":
            return self
        messages = self.message if isinstance(self.message, list) else [self.message]
        buffers = (
            self.socket_buffer if isinstance(self.socket_buffer, list) else [self.socket_buffer]
        )
        if self.sweep == "zip" and len(messages) == len(buffers) > 1:
            pairs = list(zip(messages, buffers, strict=True))
        else:
            pairs = list(itertools.product(messages, buffers))
        for message, buffer in pairs:
            if buffer is not None and message > buffer:
                raise ValueError(
                    f"a UDP message of {human_size(message)} does not fit a socket_buffer of "
                    f"{human_size(buffer)}: the kernel refuses every such send and the stream "
                    f"would move nothing; give socket_buffer at least {human_size(2 * message)} "
                    "(twice the message) or a smaller message"
                )
        return self

    @model_validator(mode="after")
    def _server_memory_fits(self) -> StreamWorkload:
        """The engine's server holds a read buffer of max(message, 128 KiB, rcvlowat)
        for each TCP stream it receives and refuses a test past ENGINE_TEST_MEMORY
        (docs/engine-protocol.md, "What a server accepts"): refused here, before any
        traffic."""
        if self.protocol != "tcp" or self.direction == "receive":
            return self
        messages = self.message if isinstance(self.message, list) else [self.message]
        parallels = self.parallel if isinstance(self.parallel, list) else [self.parallel]
        if self.sweep == "zip" and len(messages) == len(parallels) > 1:
            pairs = list(zip(messages, parallels, strict=True))
        else:
            pairs = list(itertools.product(messages, parallels))
        for message, parallel in pairs:
            read = max(message, 128 * 1024, self.rcvlowat or 0)
            held = parallel * read + (message if self.direction == "both" else 0)
            if held > ENGINE_TEST_MEMORY:
                raise ValueError(
                    f"{parallel} streams of {human_size(message)} messages make the engine's "
                    f"server hold {human_size(held)} of buffers, above the "
                    f"{human_size(ENGINE_TEST_MEMORY)} it allows a test: lower message or "
                    "parallel"
                )
        return self

    @field_validator("rcvlowat")
    @classmethod
    def _tcp_only(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("protocol") == "udp":
            raise ValueError(
                'rcvlowat applies to TCP streams only: remove it or use protocol = "tcp"'
            )
        return value

    def default_name(self) -> str:
        return f"{self.protocol}-stream"


def fixed_transfer(spec: StreamWorkload) -> Mapping[str, Any]:
    """A fixed transfer is timed from its start to its last byte, within its limit:
    the engine's `duration` is the limit and there is no warm-up."""
    if spec.bytes is None:
        return {}
    return {"duration": spec.time_limit, "warmup": 0.0}


def planned_seconds(spec: StreamWorkload, link_bps: int | None) -> float:
    """A fixed transfer takes its bytes at the point's link rate (else `link_bps`, else
    1 Gbit/s), at most its time limit; a timed stream its warm-up and duration."""
    nbytes = scalar(spec.bytes)
    if nbytes is None:
        return spec.duration + spec.warmup
    rate = scalar(spec.link_rate) or link_bps or 1_000_000_000
    return min(spec.time_limit, nbytes * 8 / rate)


def _sysctl(name: str) -> int | None:
    try:
        return int(Path("/proc/sys", *name.split(".")).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def check_socket_buffers(spec: StreamWorkload, ctx: CheckContext) -> None:
    """A socket_buffer above net.core.rmem_max/wmem_max: the kernel would clamp it, so
    the engine refuses the test; say so now, not after the testbed is built."""
    limits = {k: _sysctl(f"net.core.{k}") for k in ("wmem_max", "rmem_max")}
    sizes = spec.socket_buffer if isinstance(spec.socket_buffer, list) else [spec.socket_buffer]
    for size in sizes:
        if size is None:
            continue
        for name, limit in limits.items():
            if limit is not None and size > limit:
                raise ScenarioError(
                    f"workloads[{ctx.index}].socket_buffer = {human_size(size)} is above "
                    f"net.core.{name} = {human_size(limit)} on this machine (the kernel "
                    "would clamp it, so the engine refuses the test)",
                    where=str(ctx.source or "scenario"),
                    fix=f"give at most {human_size(limit)}, or raise the limit: "
                    f"sysctl -w net.core.{name}={size}",
                )


def kb_moved(r: Record) -> float | None:
    """kB (1000 bytes) received inside the CPU window (older records: all bytes)."""
    nbytes = path(r, "window_bytes")
    if nbytes is None:
        nbytes = path(r, "bytes")
    return None if nbytes is None else nbytes / 1000.0


THROUGHPUT = Metric("throughput", "Throughput", "Mbit/s", True, True)
# kB = 1000 bytes, as netperf's KB and every rate here (Mbit/s = 10^6 bit/s)
SD_KB = Metric("sd_cpu_us_per_kb", "Service demand", "CPU µs/kB (1 kB = 1000 B)", False, False)
# A fixed transfer's rate as ttcp prints it ("KB/sec", 1 KB = 1024 B) and its time.
TRANSFER_KIB = Metric("transfer_kib_s", "Fixed transfer", "kB/s (ttcp: 1 kB = 1024 B)", True, False)
TRANSFER_S = Metric("transfer_s", "Transfer time", "s", False, False)

METRICS: tuple[MetricRow, ...] = (
    (THROUGHPUT, throughput),
    (SD_KB, service_demand(kb_moved)),
    (LOSS, loss_pct),
    # a fixed transfer (`bytes`) only: the paper's ttcp figures
    (TRANSFER_KIB, field("transfer", "kib_per_second")),
    (TRANSFER_S, field("transfer", "seconds")),
    *flood_beside.METRICS,
)


def timed_transfer(spec: StreamWorkload) -> bool:
    """Timed by `duration` (not a fixed transfer), with no flood beside it."""
    return spec.bytes is None and flood_beside.timed_alone(spec)


KIND = WorkloadKind(
    name="stream",
    model=StreamWorkload,
    executor=Beside(EngineExecutor(extra=fixed_transfer)),
    metrics=METRICS,
    work_unit=("kB", kb_moved),
    moved=("bytes",),
    hosts=flood_beside.hosts,
    floods=flood_beside.floods,
    generators=True,
    test_seconds=planned_seconds,
    preflight=check_socket_buffers,
    calibrates=timed_transfer,
)
