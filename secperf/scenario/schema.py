"""The scenario file's schema: what every key means, its type and its default.

A scenario is data only. These models validate it strictly (an unknown key is
an error, `"3"` is not an int) so that a typo stops the run before any traffic.
`docs/scenario-format.md` documents every key; keep the two in step.

A mechanism kind's model is in its own module (secperf.mechanisms.*), listed in
secperf.mechanisms.registry. Adding a workload kind: write a model with
`kind: Literal["..."]` and add it to `WL_REG` at the bottom of its section.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    BaseModel,
    Field,
    PlainValidator,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from secperf.mechanisms.base import MechanismSpec
from secperf.mechanisms.registry import MECHANISMS
from secperf.scenario.fields import (
    MAX_POINTS_PER_WORKLOAD,
    Inflight,
    LinkRate,
    MessageSize,
    Name,
    NonNegativeDuration,
    Parallel,
    Payload,
    PositiveDuration,
    Rate,
    ReceiveLowat,
    SocketBuffer,
    StrictModel,
    SweepPayload,
    SweepRate,
    TransactionSize,
    TransferBytes,
    VariantName,
    bounded,
    one_or_sweep,
    parse_count,
    rule_file_or_count,
    udp_fits,
)
from secperf.scenario.registry import KindRegistry
from secperf.scenario.testbed import (
    HostName,
    Testbed,
    TopologySection,
)
from secperf.scenario.units import (
    human_size,
    parse_duration,
    parse_size,
    plain_number,
    toml_repr,
)

# ---------------------------------------------------------------- testbed, repeat, timing


class Repeat(StrictModel):
    min: int = Field(default=3, ge=2)
    max: int = Field(default=10, le=1000)
    confidence: float = Field(default=0.95, ge=0.5, le=0.999)
    halfwidth_pct: float = Field(default=2.0, gt=0)
    # Seed of each round's shuffled order; absent: a fresh one per run (run.json keeps it).
    seed: int | None = Field(default=None, ge=0, lt=2**63)

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence_is_a_fraction(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool) and 1 < value <= 100:
            raise ValueError(
                f"confidence is a fraction, not a percentage: write {plain_number(value / 100)} "
                f"for {plain_number(value)} %"
            )
        return value

    @field_validator("max")
    @classmethod
    def _max_at_least_min(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("min")
        if isinstance(low, int) and value < low:
            raise ValueError(f"max ({value}) must be at least min ({low})")
        return value


class Timing(StrictModel):
    duration: PositiveDuration = 5.0
    warmup: NonNegativeDuration = 1.0


# ---------------------------------------------------------------- mechanisms

# Each kind's model is in its module (secperf.mechanisms.*); the registry validates
# an entry through the model its `kind` names.
Mechanism = Annotated[MechanismSpec, MECHANISMS]


class Variant(StrictModel):
    description: str = ""
    # Empty = a plain forwarding DUT: the cost of the hop itself (against
    # baseline = "direct"), or an A/A check of the noise (against "forward").
    mechanisms: list[Mechanism] = Field(default_factory=list)
    # What the DUT host is in this variant: its namespace, or a VM ([testbed.vm]) on
    # the same links with the same addresses. The mechanisms run wherever it is.
    backend: Literal["namespace", "vm"] = "namespace"

    @field_validator("mechanisms")
    @classmethod
    def _single_kinds_once(cls, mechs: list[MechanismSpec]) -> list[MechanismSpec]:
        """A kind that declares itself single (`MechanismKind.single`) appears once."""
        seen: dict[str, int] = {}
        for i, m in enumerate(mechs):
            single = MECHANISMS.of(m).single
            if single is not None and m.kind in seen:
                raise ValueError(
                    f"mechanisms[{seen[m.kind]}] and mechanisms[{i}] are both kind = "
                    f'"{m.kind}": {single}'
                )
            seen.setdefault(m.kind, i)
        return mechs

    def expand(self, name: str) -> list[tuple[str, list[Any], dict[str, object]]]:
        """One (name, mechanisms, swept values) per combination of the listed values.

        A variant without lists is itself: [(name, mechanisms, {})]. With
        `rules = [1, 10]` it is `name[rules=1]` and `name[rules=10]`.
        """
        axes: list[tuple[int, str, list[object]]] = [
            (i, key, list(getattr(mech, key)))
            for i, mech in enumerate(self.mechanisms)
            for key in mech.swept_keys()
        ]
        if not axes:
            return [(name, list(self.mechanisms), {})]
        out = []
        for combo in itertools.product(*(values for _, _, values in axes)):
            mechs = list(self.mechanisms)
            swept: dict[str, object] = {}
            for (i, key, _), value in zip(axes, combo, strict=True):
                mechs[i] = mechs[i].model_copy(update={key: value})
                swept[key] = value
            label = " ".join(f"{k}={v}" for k, v in swept.items())
            out.append((f"{name}[{label}]", mechs, swept))
        return out


# ---------------------------------------------------------------- workloads


# Kinds whose point one engine test measures: these merge over several generators.
GENERATOR_KINDS = ("stream", "rr", "crr")


class WorkloadBase(StrictModel):
    """Keys every workload has. `sweepable` names the keys that take a list."""

    sweepable: ClassVar[dict[str, str]] = {}  # key -> unit: size | rate | count

    kind: str  # each subclass narrows it to its Literal; declared here to come first
    name: Name = ""
    duration: PositiveDuration = 5.0
    warmup: NonNegativeDuration = 1.0
    sweep: Literal["product", "zip"] = "product"
    # Where the workload runs from and to: a host name or a zone of [topology]
    # (a zone means its first client / server host). Empty: the testbed's
    # "client" and "server" (or its first host of that role).
    clients: list[HostName] = Field(default_factory=list)
    servers: list[HostName] = Field(default_factory=list)
    # How many client hosts drive the workload at once: the first N client hosts of
    # `clients` (a zone; empty: the testbed's client hosts), started together, their
    # records merged (rates summed; docs/scenario-format.md "Several generators").
    generators: int = Field(default=1, ge=1, le=16)
    # A title such as "Table 1: TCP_STREAM": the report then prints this workload as
    # the source paper does, workload points as columns and variants as rows.
    table: str = ""
    # The variants this workload measures beside the baseline (names of [variants];
    # a swept variant by its own name, all its values); empty = every variant.
    variants: list[VariantName] = Field(default_factory=list)
    _derived_name: bool = PrivateAttr(default=False)

    @property
    def derived_name(self) -> bool:
        """True when the file gave no name and it was made from kind and protocol."""
        return self._derived_name

    def default_name(self) -> str:
        raise NotImplementedError

    def swept_values(self) -> dict[str, list[object]]:
        """Every sweepable key whose value is a list, in field order."""
        return {
            key: list(value)
            for key in self.sweepable
            if isinstance(value := getattr(self, key), list)
        }

    @field_validator("clients", "servers")
    @classmethod
    def _one_endpoint(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if len(value) > 1:
            raise ValueError(
                f"{info.field_name} names {len(value)} hosts; a workload runs between one "
                f"client and one server host for now: name one (a host or a zone), and "
                "write one workload per pair"
            )
        return value

    @model_validator(mode="after")
    def _generators_for_engine_kinds(self) -> WorkloadBase:
        if self.generators > 1 and self.kind not in GENERATOR_KINDS:
            raise ValueError(
                f"generators = {self.generators}: kind {self.kind!r} runs from one host; "
                f"several generators drive {', '.join(GENERATOR_KINDS)} only"
            )
        return self

    @model_validator(mode="after")
    def _fill_name_and_check_sweep(self) -> WorkloadBase:
        if not self.name:
            self.name = self.default_name()
            self._derived_name = True
        swept = self.swept_values()
        if self.sweep == "zip" and swept:
            lengths = {key: len(values) for key, values in swept.items()}
            if len(set(lengths.values())) > 1:
                detail = ", ".join(f"{key} has {n}" for key, n in lengths.items())
                raise ValueError(f"sweep = 'zip' needs lists of equal length: {detail}")
            points = next(iter(lengths.values()))
            combos = list(zip(*swept.values(), strict=True))
            if len(set(map(repr, combos))) != len(combos):
                raise ValueError("sweep = 'zip' lists give the same point twice")
        else:
            points = 1
            for values in swept.values():
                points *= len(values)
        if points > MAX_POINTS_PER_WORKLOAD:
            raise ValueError(
                f"this workload sweeps {points} points, more than {MAX_POINTS_PER_WORKLOAD}; "
                "split it or shorten the lists"
            )
        return self


# ---- floods (docs/engine-protocol.md, kind flood): rates in packets/s

FLOOD_RATE_MIN = 1000
FLOOD_RATE_MAX = 10_000_000
FloodKind = Literal["udp", "syn", "icmp"]
FloodTarget = Literal["allowed", "denied"]


def _flood_payload(value: object) -> int | None:
    return None if value is None else bounded(parse_size, 0, 1472, "a flood payload")(value)


def _flood_rate(value: object) -> int:
    rate = parse_count(value)
    if rate != 0 and not FLOOD_RATE_MIN <= rate <= FLOOD_RATE_MAX:
        raise ValueError(
            f"a flood rate is 0 (no flood) or {FLOOD_RATE_MIN}..{FLOOD_RATE_MAX} packets/s "
            f"(got {toml_repr(value)})"
        )
    return rate


FloodRate = Annotated[int | list[int], PlainValidator(one_or_sweep(_flood_rate))]
FloodPps = Annotated[
    int, PlainValidator(bounded(parse_count, FLOOD_RATE_MIN, FLOOD_RATE_MAX, "a flood rate"))
]
FloodPayload = Annotated[
    int | None,
    PlainValidator(_flood_payload),
]


class FloodBeside(StrictModel):
    """A flood from the attacker host while the workload is measured (document 002).

    `flood_target = "denied"` aims it at a port the DUT's ACL drops."""

    flood: FloodKind | None = None
    flood_rate: FloodRate = 0
    flood_target: FloodTarget = "allowed"
    flood_payload: FloodPayload = None

    @model_validator(mode="after")
    def _flood_needs_rate(self) -> FloodBeside:
        rates = self.flood_rate if isinstance(self.flood_rate, list) else [self.flood_rate]
        if self.flood is None and any(rates):
            raise ValueError('flood_rate needs flood = "udp", "syn" or "icmp"')
        if self.flood == "icmp" and self.flood_target == "denied":
            raise ValueError(
                'flood_target = "denied" needs a udp or syn flood (the ACL denies by port)'
            )
        return self


class StreamWorkload(FloodBeside, WorkloadBase):
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

    kind: Literal["stream"]
    protocol: Literal["tcp", "udp"] = "tcp"
    direction: Literal["send", "receive", "both"] = "send"
    message: MessageSize = 131072  # the engine's default; udp: 1024 (set below)
    socket_buffer: SocketBuffer = None
    parallel: Parallel = 1
    payload: SweepPayload = "random"
    rate: SweepRate = None
    rcvlowat: ReceiveLowat = None  # the engine's default (see docs/scenario-format.md)
    # A ttcp-style fixed transfer: move exactly this many bytes and time it (then
    # `duration` and `warmup` do not apply; `time_limit` bounds the transfer).
    bytes: TransferBytes = None
    time_limit: PositiveDuration = 300.0
    # Every link on the client-server path shaped to this rate for this workload's
    # tests ("unlimited" = no shaping); unset = the links as [testbed]/[topology] made them.
    link_rate: LinkRate = None

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


class RrWorkload(FloodBeside, WorkloadBase):
    """Request/response on one connection (netperf TCP_RR / UDP_RR)."""

    sweepable: ClassVar[dict[str, str]] = {
        "request": "size",
        "response": "size",
        "inflight": "count",
        "flood_rate": "count",
    }

    kind: Literal["rr"]
    protocol: Literal["tcp", "udp"] = "tcp"
    request: TransactionSize = 1
    response: TransactionSize = 1
    inflight: Inflight = 1
    payload: Payload = "random"

    @field_validator("request", "response")
    @classmethod
    def _udp_fits(cls, value: int | list[int], info: ValidationInfo) -> int | list[int]:
        return udp_fits(value, info, "datagram")

    def default_name(self) -> str:
        return f"{self.protocol}-rr"


# How crr-style workloads end each connection: "fin" an orderly close (FINs both
# ways, the client keeps the TIME_WAIT), "reset" SO_LINGER 0 (one RST, no FIN).
Close = Literal["fin", "reset"]


class CrrWorkload(FloodBeside, WorkloadBase):
    """A new TCP connection per transaction (netperf TCP_CRR): connections/s.

    `close = "fin"` (default) closes each connection in order (FIN both ways);
    `close = "reset"` with an RST (SO_LINGER 0), which a stateful DUT never sees
    as a teardown."""

    sweepable: ClassVar[dict[str, str]] = {
        "request": "size",
        "response": "size",
        "parallel": "count",
        "flood_rate": "count",
    }

    kind: Literal["crr"]
    protocol: Literal["tcp"] = "tcp"
    request: TransactionSize = 1
    response: TransactionSize = 1
    parallel: Parallel = 1
    payload: Payload = "random"
    close: Close = "fin"

    def default_name(self) -> str:
        return "tcp-crr"


def _file_sizes(value: object) -> list[int]:
    if not isinstance(value, list | tuple) or not value:
        raise ValueError('files is a list of sizes, e.g. ["1KiB", "80KiB"]')
    check = bounded(parse_size, 1, 1024**3, "a file size")
    sizes = [check(v) for v in value]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"files repeats a size: {toml_repr(list(value))}")
    return sizes


FileSizes = Annotated[list[int], PlainValidator(_file_sizes)]
HttpParallel = Annotated[
    int | list[int], PlainValidator(one_or_sweep(bounded(parse_count, 1, 1024, "parallel")))
]
PerSecond = Annotated[float, Field(gt=0, le=10_000_000)]
# Durations everywhere: 5, "5s" and "500ms" alike.
Timeout = Annotated[float, PlainValidator(bounded(parse_duration, 0.001, 120, "a timeout"))]
HoldTime = Annotated[float, PlainValidator(bounded(parse_duration, 0, 600, "a hold time"))]


class HttpWorkload(WorkloadBase):
    """HTTP/1.1 GETs against nginx in the server host (http_load): fetches/s, bytes/s.

    The files (one per size) are fetched round-robin. `parallel` fetches in flight
    as fast as they go, or with `rate` that many new fetches a second (parallel is
    then the most in flight)."""

    sweepable: ClassVar[dict[str, str]] = {"parallel": "count"}

    kind: Literal["http"]
    files: FileSizes = Field(default_factory=lambda: [10240])
    parallel: HttpParallel = 1
    rate: PerSecond | None = None
    keepalive: bool = False
    timeout: Timeout = 5.0

    def default_name(self) -> str:
        return "http"


VirtualClients = Annotated[
    int | list[int], PlainValidator(one_or_sweep(bounded(parse_count, 1, 512, "virtual clients")))
]
Share = Annotated[float, Field(ge=0, le=1)]
Weight = Annotated[float, Field(ge=0)]


class MixWorkload(WorkloadBase):
    """Document 001's NSTL load: virtual clients over the client hosts, each doing
    `requests` HTTP or FTP fetches from the server hosts (a server by the hit table,
    a protocol by that server's HTTP share, a file from the size sets), no think
    time: transactions per minute, failures by kind, Mbit/s. `duration` and
    `warmup` do not apply: a point lasts until every request is answered."""

    sweepable: ClassVar[dict[str, str]] = {"virtual_clients": "count"}

    kind: Literal["mix"]
    virtual_clients: VirtualClients = 1
    requests: int = Field(default=100, ge=1, le=100_000)
    # One weight per server host (graph order) for every client, or a list per client
    # zone (the paper's Table 2); empty: even odds over the servers of other zones.
    hits: list[Weight] | dict[str, list[Weight]] = Field(default_factory=list)
    http_share: list[Share] = Field(default_factory=list)
    # The paper's file sets (KiB): HTML 1-80, GIF 0.5-208, FTP (ZIP) 32-256.
    html_files: FileSizes = Field(
        default_factory=lambda: [k * 1024 for k in (1, 2, 4, 8, 10, 20, 40, 80)]
    )
    gif_files: FileSizes = Field(
        default_factory=lambda: [512] + [k * 1024 for k in (1, 2, 4, 10, 26, 52, 104, 208)]
    )
    ftp_files: FileSizes = Field(default_factory=lambda: [k * 1024 for k in (32, 64, 128, 256)])
    timeout: Timeout = 10.0  # idle timeout of every step of a fetch (connect, each read)
    think: float = Field(default=0.0, ge=0, le=3600)  # seconds between a client's requests
    ftp_mode: Literal["passive", "active"] = "passive"  # who opens FTP's data connection

    def default_name(self) -> str:
        return "mix"


class ConnectionsWorkload(WorkloadBase):
    """RFC 3511 §5.2: concurrent TCP connections held and validated; §5.4 teardown rate.

    `duration` bounds the opening phase."""

    kind: Literal["connections"]
    connections: int = Field(default=10_000, ge=1, le=1_000_000)
    rate: PerSecond | None = None  # opens/s; None = as fast as possible
    hold: HoldTime = 1.0
    close_rate: PerSecond | None = None
    timeout: Timeout = 5.0
    close: Close = "fin"  # how the server answers each FIN: its own FIN, or an RST

    def default_name(self) -> str:
        return "connections"


class RateSearchBase(WorkloadBase):
    """A search for the highest rate with at most `max_failure_pct` failures (RFC 3511)."""

    low: PerSecond = 500.0
    high: PerSecond = 20_000.0
    resolution_pct: float = Field(default=10.0, gt=0, le=50)
    max_failure_pct: float = Field(default=0.1, ge=0, le=100)
    max_steps: int = Field(default=8, ge=1, le=30)
    timeout: Timeout = 1.0
    close: Close = "fin"

    @model_validator(mode="after")
    def _low_below_high(self) -> RateSearchBase:
        if self.low >= self.high:
            raise ValueError(f"low ({self.low:g}) must be below high ({self.high:g})")
        return self


class ConnRateWorkload(RateSearchBase):
    """RFC 3511 §5.3: the highest connection setup rate (crr at a paced rate)."""

    kind: Literal["conn_rate"]
    parallel: int = Field(default=16, ge=1, le=128)
    request: int = Field(default=1, ge=1, le=65536)
    response: int = Field(default=1, ge=1, le=65536)

    def default_name(self) -> str:
        return "conn-rate"


class TeardownRateWorkload(RateSearchBase):
    """RFC 3511 §5.4: the highest teardown rate (FINs the server sees a second)."""

    kind: Literal["teardown_rate"]
    connections: int = Field(default=2000, ge=2, le=1_000_000)

    def default_name(self) -> str:
        return "teardown-rate"


FrameSize = Annotated[
    int | list[int], PlainValidator(one_or_sweep(bounded(parse_size, 64, 1518, "a frame size")))
]


class LatencyWorkload(WorkloadBase):
    """Timestamped UDP probes at a fixed rate: one-way delay per direction (document 004).

    `load` is a fraction of `testbed.link_rate` counted on the wire (frame + 20 B
    preamble and inter-frame gap); `rate_pps` gives probes/s per direction instead.
    `hosts = "all"` sends from every emulated host on the client side to its peer on
    the server side; an int uses that many. `rejected_stream` runs a second stream at
    the same rate from the ACL's excluded address concurrently (the ACL must have
    `exclude_one = true`); its received count is reported and must be 0.
    `sender = "packet"` sends the whole stream (`load` or `rate_pps` frames/s each
    way) as frames on a packet socket, spread over the emulated hosts, with one frame
    in `probe_every` (default 100) a timestamped probe: the delay under the load
    itself, and the achieved load in the record (IPv4, full duplex only).
    """

    sweepable: ClassVar[dict[str, str]] = {"frame": "size"}

    kind: Literal["latency"]
    frame: FrameSize = 64
    load: float | None = Field(default=None, gt=0, le=1)
    rate_pps: float | None = Field(default=None, gt=0, le=10_000_000)
    duplex: Literal["full", "half"] = "full"
    hosts: Literal["all"] | Annotated[int, Field(ge=1, le=200)] = "all"
    rejected_stream: bool = False
    sender: Literal["socket", "packet"] = "socket"
    probe_every: int | None = Field(default=None, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _one_rate(self) -> LatencyWorkload:
        if self.load is not None and self.rate_pps is not None:
            raise ValueError("give either load (a fraction of the link rate) or rate_pps, not both")
        if self.probe_every is not None and self.sender != "packet":
            raise ValueError(
                'probe_every applies to sender = "packet" only: set sender or remove it'
            )
        if self.sender == "packet" and self.duplex == "half":
            raise ValueError('sender = "packet" runs full duplex: set duplex = "full" or remove it')
        return self

    def default_name(self) -> str:
        return f"latency-{self.duplex}"


Rfc2544Test = Literal["throughput", "latency", "loss", "back_to_back"]
RFC2544_TESTS: tuple[Rfc2544Test, ...] = ("throughput", "latency", "loss", "back_to_back")
SettleDuration = Annotated[float, PlainValidator(bounded(parse_duration, 0, 60, "a settle time"))]
BurstDuration = Annotated[float, PlainValidator(bounded(parse_duration, 0.001, 60, "a burst"))]
LatencyDuration = Annotated[
    float, PlainValidator(bounded(parse_duration, 0.05, 600, "a latency duration"))
]


class Rfc2544Workload(WorkloadBase):
    """RFC 2544's throughput, latency, frame loss rate and back-to-back tests on the
    packet sender, per frame size (Ethernet bytes with FCS; `frame` is swept).

    `duration` is each trial's length (the RFC's is 60 s; `warmup` does not apply);
    `settle` the wait after each trial before the receiver's count is read (RFC: 2 s);
    rates are fractions of `line_rate` (default: the client's link rate), counted as
    frames on an Ethernet wire (frame + 20 B preamble and gap)."""

    # "count": labels read frame=1024 (bytes as the RFC writes them), not 1KiB
    sweepable: ClassVar[dict[str, str]] = {"frame": "count"}

    kind: Literal["rfc2544"]
    frame: FrameSize = Field(default_factory=lambda: [64, 128, 256, 512, 1024, 1280, 1518])
    tests: list[Rfc2544Test] = Field(default_factory=lambda: list(RFC2544_TESTS), min_length=1)
    line_rate: Rate = None
    settle: SettleDuration = 0.5
    resolution_pct: float = Field(default=2.0, gt=0, le=50)
    max_trials: int = Field(default=12, ge=2, le=40)
    low_pct: float = Field(default=1.0, gt=0, lt=100)
    loss_tolerance_pct: float = Field(default=0.0, ge=0, lt=100)
    loss_every_step: bool = False
    burst_min: int = Field(default=100, ge=1, le=10_000_000)
    burst_max: BurstDuration = 1.0
    latency_duration: LatencyDuration = 2.0
    latency_duplex: Literal["full", "half"] = "half"
    port: int = Field(default=5201, ge=1, le=65535)
    # CPUs the DUT's receive processing runs on (RPS on its interfaces), e.g. "1".
    dut_cpus: str | None = Field(default=None, pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*$")

    @field_validator("tests")
    @classmethod
    def _tests_once(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"tests names a test twice: {toml_repr(value)}")
        return value

    def default_name(self) -> str:
        return "rfc2544"


ProbeTimeout = Annotated[float, PlainValidator(bounded(parse_duration, 0.05, 10, "a timeout"))]


class FailclosedWorkload(WorkloadBase):
    """Does the DUT fail closed? Real probes across the DUT path: the inside reaches
    the outside, the outside cannot open a connection to the inside, and nothing
    passes with forwarding off or with the mechanism's daemons killed.
    `duration` and `warmup` do not apply (each probe waits `timeout`)."""

    kind: Literal["failclosed"]
    # The engine's last data port: an ACL that permits the measured traffic permits it too.
    port: int = Field(default=5399, ge=1, le=65535)
    timeout: ProbeTimeout = 0.5

    @field_validator("port")
    @classmethod
    def _not_control(cls, value: int) -> int:
        if value == 5201:
            raise ValueError("port 5201 is the engine server's control port; pick another")
        return value

    def default_name(self) -> str:
        return "failclosed"


class FloodWorkload(WorkloadBase):
    """A flood alone, from the attacker towards the server: how exactly it is paced."""

    sweepable: ClassVar[dict[str, str]] = {"rate": "count", "payload_size": "size"}

    kind: Literal["flood"]
    flood: FloodKind = "udp"
    rate: Annotated[
        int | list[int],
        PlainValidator(
            one_or_sweep(bounded(parse_count, FLOOD_RATE_MIN, FLOOD_RATE_MAX, "a flood rate"))
        ),
    ] = 10_000
    count: int | None = Field(default=None, ge=1)
    payload_size: Annotated[
        int | list[int] | None,
        PlainValidator(one_or_sweep(_flood_payload)),
    ] = None
    flood_target: FloodTarget = "allowed"
    sources: str | None = None  # an IPv4 CIDR in 198.18.0.0/15; default the attacker's address

    @field_validator("sources")
    @classmethod
    def _sources_in_testbed(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            net = ipaddress.IPv4Network(value, strict=False)
        except ValueError as exc:
            raise ValueError(
                f"sources must be an IPv4 CIDR such as 198.18.4.0/24 ({exc})"
            ) from None
        if not net.subnet_of(ipaddress.IPv4Network("198.18.0.0/15")):
            raise ValueError(f"sources {value} is outside the testbed range 198.18.0.0/15")
        return str(net)

    def default_name(self) -> str:
        return f"{self.flood}-flood"


class MinFloodRateWorkload(WorkloadBase):
    """Search for the lowest flood rate that denies a TCP stream (document 002, Fig. 3b).

    Each measurement bisects the flood rate within [lo, hi] packets/s for the lowest
    rate at which the stream falls to at most `threshold_pct` % of its unflooded rate
    (measured first, in the same search)."""

    kind: Literal["min_flood_rate"]
    flood: FloodKind = "udp"
    flood_target: FloodTarget = "allowed"
    flood_payload: FloodPayload = None
    lo: FloodPps = 1000
    hi: FloodPps = 200_000
    threshold_pct: float = Field(default=1.0, gt=0, lt=100)
    max_probes: int = Field(default=8, ge=2, le=30)
    resolution_pct: float = Field(default=10.0, gt=0, le=100)
    message: MessageSize = 131072

    @model_validator(mode="after")
    def _lo_below_hi(self) -> MinFloodRateWorkload:
        if self.lo >= self.hi:
            raise ValueError(f"lo ({self.lo}) must be below hi ({self.hi})")
        if self.flood == "icmp" and self.flood_target == "denied":
            raise ValueError('flood_target = "denied" needs a udp or syn flood')
        return self

    def default_name(self) -> str:
        return f"min-{self.flood}-flood-{self.flood_target}"


DosFloodRate = Annotated[
    int | list[int],
    PlainValidator(
        one_or_sweep(bounded(parse_count, FLOOD_RATE_MIN, FLOOD_RATE_MAX, "a flood rate"))
    ),
]


class DosWorkload(WorkloadBase):
    """RFC 3511 §5.5: connections/s (crr paced at `rate`, failures counted) while a
    flood from the attacker runs; `reference` first measures the same without it.

    `flood_target = "measured"` aims the flood at the crr's own server port, from
    spoofed sources (`spoof`) no ACL lists; "allowed"/"denied" at ports 9/19."""

    sweepable: ClassVar[dict[str, str]] = {"flood_rate": "count"}

    kind: Literal["dos"]
    rate: PerSecond = 2000.0
    parallel: int = Field(default=16, ge=1, le=128)
    timeout: Timeout = 1.0
    request: int = Field(default=1, ge=1, le=65536)
    response: int = Field(default=1, ge=1, le=65536)
    close: Close = "fin"
    flood: FloodKind = "syn"
    flood_rate: DosFloodRate = 20_000
    flood_target: Literal["measured", "allowed", "denied"] = "measured"
    spoof: bool = True
    reference: bool = True

    @model_validator(mode="after")
    def _icmp_has_no_port(self) -> DosWorkload:
        if self.flood == "icmp" and self.flood_target != "allowed":
            raise ValueError('an icmp flood has no port: set flood_target = "allowed"')
        return self

    def default_name(self) -> str:
        return f"dos-{self.flood}"


def _denied_ports(value: object) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"\d{1,5}(-\d{1,5})?", value):
        raise ValueError(
            f'denied_ports is a port or a range such as "10-1023" (got {toml_repr(value)})'
        )
    lo, _, hi = value.partition("-")
    first, last = int(lo), int(hi or lo)
    if not 1 <= first <= last <= 65535:
        raise ValueError(f"denied_ports {toml_repr(value)} is not a range of ports 1..65535")
    # 9 is the attacker's permitted flood port; 5201 and 5300-5399 the measured flow's.
    for taken, what in (
        (range(9, 10), "the permitted flood port 9"),
        (range(5201, 5202), "the engine's control port 5201"),
        (range(5300, 5400), "the engine's data ports 5300-5399"),
    ):
        if first <= taken[-1] and taken[0] <= last:
            raise ValueError(
                f"denied_ports {toml_repr(value)} includes {what}, which an ACL permits"
            )
    return value


class IllegalWorkload(WorkloadBase):
    """RFC 3511 §5.8: the allowed flow (TCP stream, paced by `rate`, or rr) while denied
    flows run from the attacker (UDP from it, SYNs from unlisted sources, each at
    `denied_rate` packets/s to `denied_ports`); counts the denied packets that reached
    the server (`illegal_reached`, which through an ACL must be 0)."""

    kind: Literal["illegal"]
    measure: Literal["stream", "rr"] = "stream"
    rate: Rate = None
    message: Annotated[int, PlainValidator(bounded(parse_size, 1, 64 * 1024**2, "a size"))] = 131072
    denied_rate: FloodPps = 5000
    denied_ports: Annotated[str, PlainValidator(_denied_ports)] = "10-1023"

    @model_validator(mode="after")
    def _rate_for_stream(self) -> IllegalWorkload:
        if self.measure == "rr" and self.rate is not None:
            raise ValueError('rate paces the stream; remove it with measure = "rr"')
        return self

    def default_name(self) -> str:
        return f"illegal-{self.measure}"


def _attack_rules(value: object, info: ValidationInfo) -> str:
    if isinstance(value, int):
        raise ValueError("an attack mix takes its attacks from a rule file, not a count")
    return str(rule_file_or_count(value, info))


AttackRules = Annotated[str, PlainValidator(_attack_rules)]

AttackRate = Annotated[
    int | list[int],
    PlainValidator(one_or_sweep(bounded(parse_count, 10, 200_000, "an attack-mix rate"))),
]


class AttackMixWorkload(WorkloadBase):
    """Detection under load (issue 13): UDP datagrams at `rate` messages/s (the load
    level; a list sweeps it), `attack_share` of them carrying an attack string built
    from the rule file's content rules. The record gives detected / blocked / missed /
    leaked attacks from the sender's, the server's and the IPS/IDS's own counts, and
    the clean traffic's delivery beside them (secperf.workloads.attack_mix)."""

    sweepable: ClassVar[dict[str, str]] = {"rate": "count"}

    kind: Literal["attack_mix"]
    protocol: Literal["udp"] = "udp"
    rate: AttackRate = 1000
    attack_share: float = Field(default=0.01, gt=0.0, le=1.0)
    size: int = Field(default=512, ge=64, le=1400)
    port: int = Field(default=5390, ge=1024, le=65535)
    # A string (the resolved path), so that the point's params stay plain JSON.
    rules: AttackRules = "rules/secperf-attacks.rules"

    def default_name(self) -> str:
        return "attack-mix"


@dataclass(frozen=True)
class _Plain:
    name: str
    model: type[BaseModel]


WL_REG = KindRegistry(
    "workload",
    [
        _Plain(get_args(m.model_fields["kind"].annotation)[0], m)
        for m in (
            StreamWorkload,
            RrWorkload,
            CrrWorkload,
            FloodWorkload,
            MinFloodRateWorkload,
            LatencyWorkload,
            HttpWorkload,
            MixWorkload,
            ConnectionsWorkload,
            ConnRateWorkload,
            TeardownRateWorkload,
            FailclosedWorkload,
            DosWorkload,
            IllegalWorkload,
            Rfc2544Workload,
            AttackMixWorkload,
        )
    ],
)
Workload = Annotated[WorkloadBase, WL_REG]


# ---------------------------------------------------------------- the scenario


def _floods(w: WorkloadBase) -> bool:
    """Does this workload send a flood (or denied flows) from the attacker?"""
    if isinstance(w, FloodWorkload | MinFloodRateWorkload | DosWorkload | IllegalWorkload):
        return True
    if isinstance(w, FloodBeside) and w.flood is not None:
        rates = w.flood_rate if isinstance(w.flood_rate, list) else [w.flood_rate]
        return any(rates)
    return False


class Scenario(StrictModel):
    name: Name
    description: str = ""
    testbed: Testbed = Field(default_factory=Testbed)
    topology: TopologySection | None = None
    repeat: Repeat = Field(default_factory=Repeat)
    timing: Timing = Field(default_factory=Timing)
    variants: dict[VariantName, Variant]
    workloads: list[Workload]
    # Where the scenario came from; set by the loader, never read from the file.
    source: Path | None = Field(default=None, exclude=True, strict=False)

    @model_validator(mode="before")
    @classmethod
    def _apply_timing_defaults(cls, data: Any) -> Any:
        """Workloads without duration/warmup take them from [timing]."""
        if not isinstance(data, dict):
            return data
        try:
            timing = Timing.model_validate(data.get("timing", {}))
        except ValueError:
            return data  # reported where [timing] is validated
        workloads = data.get("workloads")
        if isinstance(workloads, list):
            data = {
                **data,
                "workloads": [
                    {"duration": timing.duration, "warmup": timing.warmup, **w}
                    if isinstance(w, dict)
                    else w
                    for w in workloads
                ],
            }
        return data

    @field_validator("variants")
    @classmethod
    def _at_least_one_variant(cls, value: dict[str, Variant]) -> dict[str, Variant]:
        if not value:
            raise ValueError("a scenario needs at least one variant: add a [variants.NAME] table")
        return value

    @model_validator(mode="after")
    def _workload_variants_exist(self) -> Scenario:
        for i, w in enumerate(self.workloads):
            unknown = [v for v in w.variants if v not in self.variants]
            if unknown:
                raise ValueError(
                    f"workloads[{i}] ({w.name}).variants names {', '.join(unknown)}, which "
                    f"[variants] does not have: use some of {', '.join(self.variants)}"
                )
        return self

    @model_validator(mode="after")
    def _floods_need_ipv4(self) -> Scenario:
        if self.testbed.family != "ipv6":
            return self
        for i, w in enumerate(self.workloads):
            if _floods(w):
                raise ValueError(
                    f"workloads[{i}] ({w.name}) floods from the attacker, and floods are IPv4 "
                    'only: set family = "ipv4" in [testbed], or move this workload to a '
                    "scenario of its own"
                )
        return self

    @model_validator(mode="after")
    def _rfc2544_needs_ipv4_and_a_line_rate(self) -> Scenario:
        for i, w in enumerate(self.workloads):
            if not isinstance(w, Rfc2544Workload):
                continue
            if self.testbed.family == "ipv6":
                raise ValueError(
                    f"workloads[{i}] ({w.name}) runs on the packet sender, which sends IPv4 "
                    'frames only: set family = "ipv4" in [testbed]'
                )
            if w.line_rate is None and not self.testbed.link_rate and self.topology is None:
                raise ValueError(
                    f"workloads[{i}] ({w.name}) offers fractions of the line rate, and no link "
                    'has a rate: set testbed.link_rate (e.g. "100mbit") or the workload\'s '
                    "line_rate"
                )
        return self

    @model_validator(mode="after")
    def _latency_load_needs_link_rate(self) -> Scenario:
        for i, w in enumerate(self.workloads):
            if isinstance(w, LatencyWorkload) and w.load is not None and not self.testbed.link_rate:
                raise ValueError(
                    f"workloads[{i}].load is a fraction of testbed.link_rate, which is not set: "
                    'set testbed.link_rate (e.g. "1gbit") or give rate_pps instead'
                )
        return self

    @field_validator("workloads")
    @classmethod
    def _workloads_named_uniquely(cls, value: list[WorkloadBase]) -> list[WorkloadBase]:
        if not value:
            raise ValueError("a scenario needs at least one workload: add a [[workloads]] table")
        explicit: dict[str, int] = {}
        for i, workload in enumerate(value):
            if workload.derived_name:
                continue
            if workload.name in explicit:
                raise ValueError(
                    f"workloads[{explicit[workload.name]}] and workloads[{i}] are both named "
                    f"{toml_repr(workload.name)}; give each workload its own name"
                )
            explicit[workload.name] = i
        # Derived names that collide get -2, -3, … in file order.
        taken = set(explicit)
        for workload in value:
            if not workload.derived_name:
                continue
            base, n = workload.name, 1
            while workload.name in taken:
                n += 1
                workload.name = f"{base}-{n}"
            taken.add(workload.name)
        return value

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (sizes in bytes, rates in bits/s, durations in s) that
        `from_json_dict` reads back; the runner embeds it in run.json."""
        return self.model_dump(mode="json")

    @classmethod
    def from_json_dict(cls, data: dict[str, Any], *, check_files: bool = False) -> Scenario:
        """Rebuild a scenario embedded in a run directory (rule files may be gone)."""
        return cls.model_validate(data, context={"check_files": check_files})
