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

from pydantic import BaseModel, ConfigDict, Field, field_validator


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

# Which model reads an engine record: by its type, then by the engine kind that wrote it
# (a kind not listed writes the common shape). The kinds that build their own JSON
# (http, connections, mix, flows) share one `start` shape; a flows server's result is
# told apart by its role.
_STARTS: dict[str, type[Model]] = {
    "flood": FloodStart,
    **dict.fromkeys(("http", "connections", "mix", "flows"), KindStart),
}
_INTERVALS: dict[str, type[Model]] = {"http": HttpInterval, "flows": FlowsInterval}
_RESULTS: dict[str, type[Model]] = {
    "flood": FloodResult,
    "http": HttpResult,
    "connections": ConnectionsResult,
    "mix": MixResult,
    "flows": FlowsResult,
}
_SERVER_RESULTS: dict[str, type[Model]] = {"flows": FlowsServerResult}


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
        return _STARTS.get(str(kind), Start)
    if rtype == "interval":
        # a flood's intervals carry no kind: its packet counts tell them apart
        default = FloodInterval if "packets" in record else Interval
        return _INTERVALS.get(str(record.get("kind")), default)
    if rtype == "result":
        kind = str(record.get("kind"))
        if record.get("role") == "server" and kind in _SERVER_RESULTS:
            return _SERVER_RESULTS[kind]
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

    @field_validator("variant", "workload", "point_id", "label", mode="before")
    @classmethod
    def _named(cls, value: Any, info: Any) -> Any:
        """An empty or null tag is the default (a line of a hand-made or older run)."""
        if value is None or value == "":
            return "baseline" if info.field_name == "variant" else ""
        return value

    @field_validator("point", mode="before")
    @classmethod
    def _point(cls, value: Any) -> Any:
        return value if isinstance(value, Mapping) else {}

    @field_validator("rep", mode="before")
    @classmethod
    def _rep(cls, value: Any) -> Any:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def rtype(self) -> str | None:
        """The record's `type`."""
        value = self.record.get("type")
        return value if isinstance(value, str) else None


def as_line(line: Mapping[str, Any] | RecordLine) -> RecordLine:
    """One records.jsonl line as its model (a line given as a dict, by a test or a
    caller that holds the lines, is read the same way)."""
    return line if isinstance(line, RecordLine) else RecordLine.model_validate(line)


# ------------------------------------------------------------ summary.json rows


_LINE_TAG = "as the records.jsonl lines of the group say it"
_METRIC = (
    "the metric's declaration (secperf/results/metrics.py): its name, label, unit and direction"
)
_N = (
    "over the group's repetitions; with one repetition only `mean` is set, the interval fields are"
    " null and `ci_target_met` is false"
)
_STOP_REASON = (
    "from `run.json` `stops` for this point (`rounds_s`: the seconds its rounds took), null if "
    "absent"
)
_DEGRADATION_PCT = (
    "paired degradation, in % of the baseline, positive = worse; null for the baseline; with fewer"
    " than 3 pairs only the point estimate"
)
_DEGRADATION_HALFWIDTH_PP = (
    "the degradation interval's half width in percentage points, the larger of its two sides "
    "around the estimate, and whether it is within `degradation_target_pp` (false with fewer than "
    "3 pairs; null for the baseline)"
)


class SummaryRow(Model):
    """One row of summary.json's `rows`: one workload point, variant and metric."""

    workload: str = Field(description=_LINE_TAG)
    point_id: str = Field(description=_LINE_TAG)
    label: str = Field(description=_LINE_TAG)
    point: dict[str, Any] = Field(description=_LINE_TAG)
    kind: str = Field(description="the engine kind (or secperf's) the point ran")
    variant: str = Field(description=_LINE_TAG)
    metric: str = Field(description=_METRIC)
    metric_label: str = Field(description=_METRIC)
    unit: str = Field(description=_METRIC)
    higher_is_better: bool = Field(description=_METRIC)
    primary: bool = Field(description="a metric the stopping rule and the verdict read")
    n: int = Field(description=_N)
    mean: float | None = Field(description=_N)
    stddev: float | None = Field(description=_N)
    ci_low: float | None = Field(description=_N)
    ci_high: float | None = Field(description=_N)
    halfwidth_pct: float | None = Field(description="the interval's half width in % of the mean")
    ci_target_met: bool = Field(description="`halfwidth_pct` ≤ `scenario.repeat.halfwidth_pct`")
    outliers: list[int] = Field(
        description="**rep numbers** of values outside Tukey's fences (1.5 × IQR)"
    )
    stop_reason: str | None = Field(description=_STOP_REASON)
    stop_reps: int | None = Field(description=_STOP_REASON)
    stop_rounds_s: float | None = Field(None, description=_STOP_REASON)
    errors: int = Field(description="how many error records the group has")
    censored_n: int = Field(
        description=(
            "repetitions whose search found no value (`below` or `at_least`); `n`, `mean` and the "
            "interval cover only the repetitions that found one, so a row may have `n` 0 and "
            "`mean` null"
        )
    )
    search: dict[str, Any] | None = Field(
        description=(
            'null for a metric that is not a search\'s; else `{"measure", "found_n", "bracket_low",'
            ' "bracket_high", "resolution_pct", "below_n", "below_bound", "below_asked", '
            '"at_least_n", "at_least_bound", "at_least_asked"}`: `bracket_low`/`bracket_high` the '
            "means of the found searches' interval ends (with one repetition: its bracket), "
            "`resolution_pct` the widest of their resolutions; `below_bound` the highest bound of "
            "the `below` repetitions and `at_least_bound` the lowest of the `at_least` ones (what "
            "holds for all of them), each with the asked rate of that trial (`*_asked`, which "
            "differs from the bound when the bracket is placed by the achieved rate). The tables "
            "print `< 500`, `≥ 20,000` or `not denied up to 149,000 achieved (200,000 asked)` when"
            " every repetition was censored, `1,250 [1,100–1,400]` (mean [ci_low–ci_high]) when "
            "they were found, and the mean followed by `(k of n: < 500)` when some were censored; "
            "the charts draw a censored bound as a hatched bar marked ≥ or <, or an open triangle "
            "pointing where the value lies"
        )
    )
    validation: dict[str, Any] | None = Field(
        None,
        description=(
            'null when no repetition had validation criteria; else `{"checked_n", "failed_n", '
            '"failed", "noted_n", "noted"}`: repetitions checked, those that missed a criterion, '
            'and each criterion missed (the detail of its first failure, e.g. `"failed '
            'transactions 0.05 % > 0.001 %"`); `noted_n` and `noted` the same for the SHOULD '
            "criteria missed by repetitions that count (their numbers stand; the tables append "
            "`(SHOULD missed 1 of 3: …)`). A repetition that missed one is FAILED: it is in no "
            "`n`, mean, interval or degradation, so a row may have `n` 0 and `mean` null; the "
            "tables print `FAILED ×2: …` (or the mean followed by `(and FAILED 1 of 2: …)`) and "
            "the answer says `not measured: FAILED …`"
        ),
    )
    baseline_mean: float | None = Field(
        description="mean of the baseline's values for this point and metric (all its reps)"
    )
    degradation_pct: float | None = Field(description=_DEGRADATION_PCT)
    degradation_ci_low: float | None = Field(description=_DEGRADATION_PCT)
    degradation_ci_high: float | None = Field(description=_DEGRADATION_PCT)
    degradation_n: int | None = Field(description="how many reps were paired")
    degradation_scale: Literal["ratio", "difference"] | None = Field(
        None,
        description=(
            '`"ratio"` (a rate or a service demand: the log of the paired ratio, back-transformed;'
            ' the estimate the geometric mean of the ratios) or `"difference"` (the arithmetic '
            "paired difference)"
        ),
    )
    significant: bool | None = Field(
        description="the degradation interval excludes 0 (null for the baseline)"
    )
    degradation_halfwidth_pp: float | None = Field(None, description=_DEGRADATION_HALFWIDTH_PP)
    degradation_target_met: bool | None = Field(None, description=_DEGRADATION_HALFWIDTH_PP)
    degradation_bound: dict[str, Any] | None = Field(
        None,
        description=(
            "for a variant's search row that no round paired with the baseline because one side "
            'found no value: null, or what is known, `{"ratio_low", "ratio_high", "low", "high"}`:'
            " the range of the ratio variant / baseline (`ratio_high` null: unbounded) and of the "
            "degradation in % (null where the ratio's end is 0 or unbounded, so that end says "
            "nothing)"
        ),
    )
    degradation_shortfall: dict[str, Any] | None = Field(
        None,
        description=(
            "for a variant's row of a primary metric (a stopping target) whose degradation "
            'interval is wider than `degradation_target_pp`: `{"target_pp", "halfwidth_pp", '
            '"rounds", "reason", "more_rounds", "more_s", "text"}`: the target, the half width '
            '(larger side), the paired rounds, why the point stopped in words ("budget spent", '
            '"round cap reached"), about how many more rounds and seconds would reach it (half '
            "width ∝ 1/√n; `more_s` null when the rounds' time is unknown), and the answer's line "
            '("target ±2 not met: ±5.3 after 12 rounds (budget spent); about 9 min more would '
            'reach it"); null otherwise'
        ),
    )
    bottleneck: dict[str, Any] | None = Field(
        None,
        description=(
            "what limited this point under this configuration, the same on every metric row of the"
            ' group: `{"kind", "short", "text", "host"}`, `kind` one of `search_bound`, `offered`,'
            " `link`, `one_cpu`, `dut`, `dut_cpus`, `generator`, `server`, `host`, `machine_cpus`,"
            " `round_trips`, `not_measured`; `short` what the tables print, `text` the full "
            "sentence with the shares behind it"
        ),
    )
    comparison: str | None = Field(
        None,
        description=(
            "for a variant: null, or what this comparison cannot show and what to change, when the"
            " variant and the baseline are limited by the same thing and it is not the mechanism "
            "(a shaped link, the generator, the server, a search's range, the offered rate)"
        ),
    )


class PrintedRow(SummaryRow):
    """A row as `secperf report --json` and `--csv` print it: a judged row (a variant's
    headline metric) carries its verdict; the baseline's and the other metrics' carry
    neither."""

    verdict: Literal["cost", "better", "none", "unresolved", "unmeasured"] | None = None
    verdict_text: str | None = Field(None, description="the answer's words for the verdict")
