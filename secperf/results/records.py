"""The records a run directory holds, as models: every record the engine prints
(engine/secperf-engine/src/wire/record.rs and the kinds that build their own JSON:
http, connections, mix, flows), the tagged line records.jsonl wraps each in, and a
summary.json row.

Each model forbids fields it does not declare: tests/unit/test_record_models.py runs
the engine and parses every record it prints, so a field the engine gains without
its model here fails that test. docs/data-format.md's field tables are generated
from these models (secperf/docgen/data_format.py): a field's description is its
documentation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    """A record: every field declared, none other accepted."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------ parts of records


class SocketBufs(Model):
    """What the kernel granted a data socket (the doubled SO_SNDBUF/SO_RCVBUF)."""

    sndbuf: int
    rcvbuf: int


class CpuTimes(Model):
    """One process's CPU over the measured window (getrusage, or the server's threads)."""

    user_s: float
    system_s: float


class SideCpu(Model):
    client: CpuTimes
    server: CpuTimes | None = Field(None, description="absent for kinds without a server")


class Clock(Model):
    realtime_ns: int
    monotonic_ns: int


class Host(Model):
    hostname: str
    kernel: str
    cpus: int


class MachineCpu(Model):
    """The whole machine's CPU over the test's window, from /proc/stat (ticks)."""

    busy_s: float = Field(description="total − idle − iowait − steal, CPU-seconds over CPUs")
    total_s: float
    softirq_s: float = Field(
        description="softirq time wherever it ran (forwarding, netfilter, veth); without "
        "CONFIG_IRQ_TIME_ACCOUNTING also inside the figure of the process it interrupted"
    )
    irq_s: float
    cpus: int
    window_s: float = Field(
        description="the window's wall-clock length: on a VM whose vCPUs are descheduled, "
        "total_s / cpus falls short of it"
    )


class IntervalLatency(Model):
    mean: float
    p50: float
    p99: float


class LatencySummary(Model):
    """A delay histogram's summary, microseconds (HDR histogram)."""

    count: int
    min: float
    mean: float
    stddev: float
    p50: float
    p90: float
    p99: float
    p999: float
    max: float


class Flow(Model):
    bytes: int
    messages: int


class Loss(Model):
    lost: int
    ratio: float | None = Field(
        description="lost over sent (or tried); null when nothing was: a 0 would claim "
        "that nothing was lost of traffic that never existed"
    )


class SideTotals(Model):
    """One side's counts over the whole test, warm-up included (to check the sides agree)."""

    bytes: int = Field(description="bytes_sent + bytes_received")
    messages: int = Field(description="messages_sent + messages_received")
    transactions: int
    connections: int = Field(description="server: accepted; client: connected (crr)")
    bytes_sent: int
    bytes_received: int
    messages_sent: int
    messages_received: int
    lost: int = Field(description="UDP rr timeouts; crr failed connects")


class Totals(Model):
    client: SideTotals
    server: SideTotals


class Transfer(Model):
    """A ttcp-style fixed transfer (stream with `bytes`)."""

    bytes: int
    seconds: float = Field(description="before the connection opened to the last byte's arrival")
    kib_per_second: float = Field(description="bytes / 1024 / seconds (ttcp's KB/sec)")


class LinearHistogram(Model):
    """A linear view of a delay histogram (kind latency)."""

    unit: str
    bucket_us: float
    first_us: float
    counts: list[int]
    overflow: int = Field(description="delays beyond the last bucket (above about p99.9)")


class LoadResult(Model):
    """Latency under load: the whole stream of frames of one direction, probes included."""

    sender: str
    asked_pps: float = Field(description="frames/s asked, load and probes together")
    probe_every: int = Field(description="one frame in this many is a timestamped probe")
    frame_size: int
    sent: int
    received: int
    lost: int
    loss_ratio: float | None
    achieved_pps: float = Field(description="frames sent / the sender's measured window")
    received_pps: float = Field(description="frames received / the same window")
    rate_error_pct: float = Field(description="achieved against asked, %")
    forfeited: int
    send_errors: int
    tx_stamps_missing: int
    probes_sent: int
    batch: int
    note: str
    counted_by: str = Field(
        description='"kernel (socket filter)" or "user space (…why)": where the receiver '
        "counted the load frames"
    )
    ceiling_pps: float | None = Field(
        description="the sender's own ceiling, unpaced to a blackhole before the load; "
        "null when not measured (ceiling_note says why)"
    )
    ceiling_note: str


class DirectionResult(Model):
    """One direction of a latency test, or both (`combined`)."""

    sent: int
    received: int
    lost: int
    loss_ratio: float | None = Field(description="lost / sent; null when nothing was sent")
    reordered: int
    unmatched_stamps: int = Field(description="stamps that found no probe, or were never sent")
    unstamped: int = Field(description="probes without a kernel TX or RX stamp: not in the delays")
    send_failed: int = Field(description="probes the sending kernel refused (ENOBUFS and alike)")
    rate_pps: float
    achieved_pps: float
    delay_us: LatencySummary
    histogram: LinearHistogram
    load: LoadResult | None = None


# ------------------------------------------------------------ stream, rr, crr, latency

# What a record carries besides its fields: where secperf adds to what the engine wrote.
SECPERF_ADDS = "added by secperf, not by the engine"


class Listening(Model):
    """`serve`'s first line: it accepts connections."""

    type: Literal["listening"]
    t: float
    listen: str = Field(description="the bound address (`--listen 127.0.0.1:0` tells the port)")
    version: str
    pid: int


class Start(Model):
    """A test's first record (kinds stream, rr, crr, latency)."""

    type: Literal["start"]
    t: float
    format: int
    engine: str
    version: str
    spec: dict[str, Any] = Field(description="the resolved spec, every default filled in")
    clock: Clock
    local: str | None = Field(description="the first data socket's address (null for crr)")
    data: str
    socket: SocketBufs
    server_socket: SocketBufs
    host: Host


class Interval(Model):
    """One interval of a test (kinds stream, rr, crr, latency)."""

    type: Literal["interval"]
    t: float
    t_start: float
    t_end: float
    warmup: bool
    bytes: int = Field(description="at the receiver (rr/crr: the client's sent + received)")
    bits_per_second: float
    messages: int
    transactions: int
    rate: float
    latency_us: IntervalLatency | None = Field(description="rr and crr; null for stream")


class Result(Model):
    """A test's result (kinds stream, rr, crr, latency): the measured window only,
    warm-up excluded, except `totals`."""

    type: Literal["result"]
    t: float
    kind: str
    protocol: str
    duration_s: float
    warmup_s: float
    bytes: int = Field(description="the receiver's (the sender's are in `sender`)")
    bits_per_second: float
    messages: int
    sender: Flow
    receiver: Flow
    loss: Loss | None = Field(description="UDP only")
    retransmits: int | None = Field(description="tcpi_total_retrans of the sending sockets")
    transactions: int
    transactions_per_second: float
    latency_us: LatencySummary
    cpu: SideCpu
    machine_cpu: MachineCpu
    host_cpu: dict[str, float] = Field(description="each cpu_groups host's CPU seconds")
    window_bytes: int | None = Field(
        description="stream: bytes received between the two CPU readings (service demand's unit)"
    )
    totals: Totals
    close: str | None = Field(description="crr: how each connection ended (the spec's `close`)")
    socket: SocketBufs
    server_socket: SocketBufs
    c2s: DirectionResult | None = Field(None, description="kind latency")
    s2c: DirectionResult | None = Field(None, description="kind latency")
    combined: DirectionResult | None = Field(None, description="kind latency")
    transfer: Transfer | None = Field(None, description="stream with `bytes`")
    flood: dict[str, Any] | None = Field(
        None, description=f"a flooded test: the flood beside it ({SECPERF_ADDS})"
    )


# ------------------------------------------------------------ flood


class FloodStart(Model):
    type: Literal["start"]
    t: float
    format: int
    engine: str
    version: str
    spec: dict[str, Any]
    clock: Clock
    local: str = Field(description="the source address (or range) packets carry")
    data: str
    packet_size: int
    batch: int
    sender: str = Field(description='"packet" (AF_PACKET frames) or "raw" (IP_HDRINCL socket)')
    sender_note: str = Field(description="why that sender, and on which link")
    host: Host


class FloodInterval(Model):
    type: Literal["interval"]
    t: float
    t_start: float
    t_end: float
    warmup: bool
    packets: int
    bytes: int
    rate: float = Field(description="packets/s in this interval")
    bits_per_second: float


class FloodResult(Model):
    type: Literal["result"]
    t: float
    kind: Literal["flood"]
    flood: str
    target: str
    packets: int
    bytes: int = Field(description="IP bytes (headers included) of the packets sent")
    packet_size: int
    asked_pps: int
    rate_pps: float
    rate_error_pct: float
    bits_per_second: float
    duration_s: float
    stopped_by: str = Field(description='"duration", "count" or "signal" (SIGINT)')
    per_second: list[int] = Field(description="packets sent in each whole second")
    forfeited: int = Field(description="packets the schedule gave up: the sender fell behind")
    send_errors: int = Field(description="packets the kernel refused")
    batch: int
    sender: str
    sender_note: str
    cpu: CpuTimes
    machine_cpu: MachineCpu
    host_cpu: dict[str, float]
    delivered: dict[str, Any] | None = Field(
        None, description=f"what reached the target ({SECPERF_ADDS})"
    )
    coverage: dict[str, Any] | None = Field(
        None, description=f"the flood's share of the measured window ({SECPERF_ADDS})"
    )


# ------------------------------------------------------------ kinds with their own JSON


class KindStart(Model):
    """The `start` record of a kind with its own result shape (http, connections, mix,
    flows): the other kinds' fields where they mean something."""

    type: Literal["start"]
    t: float
    format: int
    engine: str
    version: str
    spec: dict[str, Any] = Field(description="resolved (mix: as given)")
    clock: Clock
    local: None
    data: str | list[str] | None = Field(description="flows: each flow's `PROTO ADDR:PORT`")
    host: Host


class HttpInterval(Model):
    type: Literal["interval"]
    kind: Literal["http"]
    t: float
    t_start: float
    t_end: float
    warmup: bool
    bytes: int
    bits_per_second: float
    fetches: int
    transactions: int
    failed: int
    rate: float
    open: float = Field(description="connections open, on average over the interval")
    open_end: int = Field(description="connections open at its end")


class HttpResult(Model):
    type: Literal["result"]
    kind: Literal["http"]
    t: float
    protocol: str
    tls: bool
    duration_s: float
    warmup_s: float
    bytes: int
    header_bytes: int
    bits_per_second: float
    bytes_per_second: float
    fetches: int
    fetches_per_second: float
    transactions: int
    transactions_per_second: float
    started: int
    connections: int
    handshakes: int
    resumed: int
    failed: int
    failure_ratio: float | None
    late: int
    errors: dict[str, int]
    latency_us: dict[str, Any]
    totals: dict[str, Any]
    cpu: dict[str, CpuTimes]
    machine_cpu: MachineCpu
    host_cpu: dict[str, float]
    nofile: int
    validation: dict[str, Any] | None = Field(
        None, description=f"the workload's criteria and their verdict ({SECPERF_ADDS})"
    )


class ConnectionsResult(Model):
    type: Literal["result"]
    kind: Literal["connections"]
    t: float
    protocol: str
    close: str
    target: int
    attempted: int
    established: int
    failed: int
    abandoned: int
    failure_ratio: float | None
    first_failure_at: int | None
    limit_found: bool
    capacity: int
    stopped_by: str
    open_rate: float
    open_s: float
    open_errors: dict[str, int]
    validated: int
    validate_s: float
    validate_errors: dict[str, int]
    teardown: dict[str, Any]
    teardown_rate: float | None
    memory: dict[str, Any]
    server: dict[str, Any]
    nofile: int
    processes: int
    sources: int


class MixResult(Model):
    type: Literal["result"]
    kind: Literal["mix"]
    t: float
    virtual_clients: int
    requests: int
    attempted: int
    transactions: int
    elapsed_s: float = Field(description="first request to last answer, wall clock")
    tpm: float
    bytes: int
    bits_per_second: float
    failure_ratio: float | None
    failures: dict[str, int]
    protocols: dict[str, Any]
    ftp_mode: str
    cpu: dict[str, CpuTimes]
    machine_cpu: MachineCpu
    host_cpu: dict[str, float]
    nofile: int
    fetches: list[list[Any]] = Field(
        description="every fetch as [protocol, failure or null, bytes, start, end] (wall clock)"
    )


class FlowsInterval(Model):
    type: Literal["interval"]
    kind: Literal["flows"]
    t: float
    t_start: float
    t_end: float
    warmup: bool
    attempts: int
    transactions: int = Field(description="successes")
    failed: int
    rate: float = Field(description="successes/s")
    bytes: int
    bits_per_second: float


class FlowsResult(Model):
    """The client side of kind flows."""

    type: Literal["result"]
    kind: Literal["flows"]
    role: Literal["client"] | None = None
    t: float
    duration_s: float
    warmup_s: float
    parallel: int
    rate: float | None
    timeout: float
    attempts: int
    attempts_per_second: float
    ok: int
    transactions: int
    transactions_per_second: float
    failed: int
    failures: dict[str, int]
    late: int
    bytes: int
    bits_per_second: float
    connect_us: dict[str, Any]
    latency_us: dict[str, Any]
    flows: list[dict[str, Any]]
    totals: dict[str, Any]
    cpu: dict[str, CpuTimes]
    machine_cpu: MachineCpu
    host_cpu: dict[str, float]


class FlowsServerResult(Model):
    """The server side of kind flows."""

    type: Literal["result"]
    kind: Literal["flows"]
    role: Literal["server"]
    t: float
    allow: list[str]
    parallel: int
    answered: int
    taken: int
    bad_requests: int
    refused_sources: int
    busy_max: int
    bytes: int
    stopped_by: str
    listens: list[dict[str, Any]]


# ------------------------------------------------------------ errors


class ErrorRecord(Model):
    """A failed test's last line."""

    type: Literal["error"]
    t: float
    kind: Literal["spec", "target", "connect", "server", "io", "measurement", "internal"]
    field: str | None = Field(description="the spec field at fault, as the spec wrote it")
    message: str = Field(description="what went wrong and what to do")


EngineRecord = (
    Listening
    | Start
    | Interval
    | Result
    | FloodStart
    | FloodInterval
    | FloodResult
    | KindStart
    | HttpInterval
    | HttpResult
    | ConnectionsResult
    | MixResult
    | FlowsInterval
    | FlowsResult
    | FlowsServerResult
    | ErrorRecord
)

# Every engine record model, in the order docs/data-format.md lists them.
ENGINE_MODELS: tuple[type[Model], ...] = (
    Listening,
    Start,
    Interval,
    Result,
    FloodStart,
    FloodInterval,
    FloodResult,
    KindStart,
    HttpInterval,
    HttpResult,
    ConnectionsResult,
    MixResult,
    FlowsInterval,
    FlowsResult,
    FlowsServerResult,
    ErrorRecord,
)

_OWN_JSON = ("http", "connections", "mix", "flows")
_RESULTS: dict[str, type[Model]] = {
    "flood": FloodResult,
    "http": HttpResult,
    "connections": ConnectionsResult,
    "mix": MixResult,
}


def engine_model(record: Mapping[str, Any]) -> type[Model]:
    """The model of one engine record, told by its `type` and kind."""
    rtype = record.get("type")
    if rtype == "listening":
        return Listening
    if rtype == "error":
        return ErrorRecord
    if rtype == "start":
        spec = record.get("spec")
        kind = spec.get("kind") if isinstance(spec, Mapping) else None
        return FloodStart if kind == "flood" else KindStart if kind in _OWN_JSON else Start
    if rtype == "interval":
        by_kind: dict[str, type[Model]] = {"http": HttpInterval, "flows": FlowsInterval}
        return by_kind.get(
            str(record.get("kind")), FloodInterval if "packets" in record else Interval
        )
    if rtype == "result":
        kind = str(record.get("kind"))
        if kind == "flows":
            return FlowsServerResult if record.get("role") == "server" else FlowsResult
        return _RESULTS.get(kind, Result)
    raise ValueError(f"not an engine record type: {rtype!r}")


def parse_engine_record(record: Mapping[str, Any]) -> EngineRecord:
    """One engine record as its model (pydantic's ValidationError if it does not fit)."""
    return engine_model(record).model_validate(record)  # type: ignore[return-value]


# ------------------------------------------------------------ records.jsonl


class RecordLine(BaseModel):
    """One line of records.jsonl: a record (the engine's, or one secperf made: `side`,
    `trial`, `machine`, `links`, `softirq`, `profile`, …) and what it was measured as.
    Further tags a secperf wrote are kept (the record's readers ignore them)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    variant: str = Field("baseline", description="`baseline`, or a name in scenario.variants")
    workload: str = Field("", description="the workload's name (scenario.workloads[].name)")
    point_id: str = Field(
        "", description="`<workload>#<index>`: one point of the workload's sweep, in order"
    )
    point: dict[str, Any] = Field(
        default_factory=dict,
        description="the point's parameters, resolved to numbers (bytes, seconds, bit/s)",
    )
    label: str = Field(
        "",
        description="a short label of the point (`message=16KiB`), the row name in tables; "
        '`""` when nothing is swept (the report shows the workload name)',
    )
    rep: int | None = Field(
        None,
        description="the round, from 0; the baseline and every variant of a point share "
        "round numbers, which is what pairs them; a round measured again repeats its "
        "number and its last attempt counts",
    )
    phase: str | None = Field(
        None,
        description="absent for the measured rounds; `calibration` (an open-loop point's "
        "closed-loop tests), `traced` (rep -1), `attribution` (rep -1), `noise` (the "
        "noise calibration): records in no figure but their own tables",
    )
    seq: int | None = Field(None, description="the line's sequence number within the run")
    record: dict[str, Any] = Field(description="the record, as its writer wrote it")


# ------------------------------------------------------------ summary.json rows


class SummaryRow(Model):
    """One row of summary.json's `rows`: one workload point, variant and metric."""

    workload: str
    point_id: str
    label: str
    point: dict[str, Any]
    kind: str = Field(description="the engine kind (or secperf's) the point ran")
    variant: str
    metric: str
    metric_label: str
    unit: str
    higher_is_better: bool
    primary: bool = Field(description="a metric the stopping rule and the verdict read")
    n: int = Field(description="rounds with a value")
    mean: float | None
    stddev: float | None
    ci_low: float | None
    ci_high: float | None
    halfwidth_pct: float | None = Field(description="the interval's half width, % of the mean")
    ci_target_met: bool
    outliers: list[int] = Field(description="rounds (their numbers) flagged as outliers")
    stop_reason: str | None
    stop_reps: int | None
    stop_rounds_s: float | None = Field(None, description="the point's rounds' measuring time")
    errors: int = Field(description="error records of the point and variant")
    censored_n: int = Field(description="rounds whose search found no value: in no mean")
    search: dict[str, Any] | None = Field(description="a search kind's brackets, else null")
    validation: dict[str, Any] | None = Field(None, description="the workload's criteria")
    baseline_mean: float | None
    degradation_pct: float | None = Field(description="paired, against the baseline's rounds")
    degradation_ci_low: float | None
    degradation_ci_high: float | None
    degradation_n: int | None = Field(description="rounds measured under both")
    degradation_scale: Literal["ratio", "difference"] | None = Field(
        None,
        description="`ratio`: the log of the paired ratio, back-transformed; `difference`: "
        "arithmetic; null in format 1 runs that did not say",
    )
    significant: bool | None
    degradation_halfwidth_pp: float | None = Field(
        None, description="the degradation's half width, percentage points"
    )
    degradation_target_met: bool | None = None
    degradation_bound: dict[str, Any] | None = Field(
        None, description="a found value against a censored one: a bound, not a figure"
    )
    degradation_shortfall: dict[str, Any] | None = Field(
        None, description="the target it missed, and by how much"
    )
    bottleneck: dict[str, Any] | None = Field(None, description="what limited the point")
    comparison: str | None = Field(
        None, description="why the variant cannot be compared with the baseline, if so"
    )


class PrintedRow(SummaryRow):
    """A row as `secperf report --json` and `--csv` print it: a judged row (a variant's
    headline metric) carries its verdict; the baseline's and the other metrics' carry
    neither."""

    verdict: Literal["cost", "better", "none", "unresolved", "unmeasured"] | None = None
    verdict_text: str | None = Field(None, description="the answer's words for the verdict")
