"""What a result record measures: the metric table.

Each engine `kind` maps to rows of (metric, extractor). A new kind (latency,
flood, http, connections) adds rows to `_TABLE`; nothing else branches on kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Record = Mapping[str, Any]
Extractor = Callable[[Record], float | None]


@dataclass(frozen=True)
class Metric:
    """One number a report shows for a workload point."""

    name: str
    label: str
    unit: str
    higher_is_better: bool
    primary: bool

    @property
    def service_demand(self) -> bool:
        """CPU spent per unit of work: holds on a shared machine where rates do not."""
        return self.name.startswith("sd_")


def _num(value: Any) -> float | None:
    """A finite float, or None for absent, null, boolean or non-finite values."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _path(record: Record, *keys: str) -> float | None:
    node: Any = record
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return _num(node)


# The key extract() adds to a record: CPU seconds of the testbed's work (see testbed_cpu_s).
TESTBED_CPU = "_testbed_cpu_s"


def testbed_cpu_s(record: Record, irq_time_accounting: bool | None = False) -> float | None:
    """CPU seconds the testbed's work took over the measured window.

    With each host's cgroup (host_cpu): their sum, plus the machine's softirq and
    irq time on kernels that keep interrupt time out of the interrupted process
    (CONFIG_IRQ_TIME_ACCOUNTING); without it the tick already charged that work to
    the host that was running. Records from before host_cpu: the machine's busy time.
    """
    hosts = record.get("host_cpu")
    if isinstance(hosts, Mapping) and hosts:
        values = [_num(v) for v in hosts.values()]
        if any(v is None for v in values):
            return None
        total = sum(v for v in values if v is not None)
        if irq_time_accounting:
            total += (_path(record, "machine_cpu", "softirq_s") or 0.0) + (
                _path(record, "machine_cpu", "irq_s") or 0.0
            )
        return total
    return _path(record, "machine_cpu", "busy_s")


def _busy_us_per(record: Record, units: float | None) -> float | None:
    """The testbed's CPU µs per unit of work (service demand)."""
    busy = _path(record, TESTBED_CPU)
    if busy is None:
        busy = testbed_cpu_s(record)
    if busy is None or units is None or units <= 0:
        return None
    return busy * 1e6 / units


def _throughput(r: Record) -> float | None:
    bps = _path(r, "bits_per_second")
    return None if bps is None else bps / 1e6


def _loss_pct(r: Record) -> float | None:
    ratio = _path(r, "loss", "ratio")  # null for TCP: no row
    return None if ratio is None else ratio * 100.0


def _stream_kb(r: Record) -> float | None:
    """kB (1000 bytes) received inside the CPU window (older records: all bytes)."""
    nbytes = _path(r, "window_bytes")
    if nbytes is None:
        nbytes = _path(r, "bytes")
    return None if nbytes is None else nbytes / 1000.0


def _sd_per_kb(r: Record) -> float | None:
    return _busy_us_per(r, _stream_kb(r))


def _latency(field: str) -> Extractor:
    def get(r: Record) -> float | None:
        if _path(r, "latency_us", "count") == 0:
            return None  # no samples: a zero would read as "no latency"
        return _path(r, "latency_us", field)

    return get


def _sd_per_tx(r: Record) -> float | None:
    return _busy_us_per(r, _path(r, "transactions"))


THROUGHPUT = Metric("throughput", "Throughput", "Mbit/s", True, True)
LOSS = Metric("loss_pct", "Loss", "%", False, False)
# A fixed transfer's rate as ttcp prints it ("KB/sec", 1 KB = 1024 B) and its time.
TRANSFER_KIB = Metric("transfer_kib_s", "Fixed transfer", "kB/s (ttcp: 1 kB = 1024 B)", True, False)
TRANSFER_S = Metric("transfer_s", "Transfer time", "s", False, False)
# A tunnel's daemons (document 003, Figs. 2-3 give memory beside CPU), each end's RSS.
TUNNEL_RSS_CLIENT = Metric(
    "tunnel_rss_client_mib", "Tunnel daemon memory, client end", "MiB (RSS)", False, False
)
TUNNEL_RSS_SERVER = Metric(
    "tunnel_rss_server_mib", "Tunnel daemon memory, server end", "MiB (RSS)", False, False
)
# kB = 1000 bytes, as netperf's KB and every rate here (Mbit/s = 10^6 bit/s)
SD_KB = Metric("sd_cpu_us_per_kb", "Service demand", "CPU µs/kB (1 kB = 1000 B)", False, False)
TPS = Metric("tps", "Transaction rate", "trans/s", True, True)
CPS = Metric("cps", "Connection rate", "conn/s", True, True)
LAT_MEAN = Metric("latency_mean_us", "Latency mean", "µs", False, False)
LAT_P99 = Metric("latency_p99_us", "Latency p99", "µs", False, False)
SD_TX = Metric("sd_cpu_us_per_tx", "Service demand", "CPU µs/trans", False, False)
SD_CONN = Metric("sd_cpu_us_per_conn", "Service demand", "CPU µs/conn", False, False)
FAILCLOSED = Metric("passed", "Fail-closed checks passed", "1/0", True, True)

FETCH_RATE = Metric("fetch_rate", "Fetch rate", "fetches/s", True, True)
HTTP_THROUGHPUT = Metric("http_throughput", "Transfer rate", "Mbit/s", True, False)
FIRST_BYTE = Metric("first_byte_mean_us", "First byte mean", "µs", False, False)
FETCH_P99 = Metric("fetch_p99_us", "Fetch p99", "µs", False, False)
CONNECT_MEAN = Metric("connect_mean_us", "Connect mean", "µs", False, False)
FAILURES = Metric("failure_pct", "Failures", "%", False, False)
SD_FETCH = Metric("sd_cpu_us_per_fetch", "Service demand", "CPU µs/fetch", False, False)
TPM = Metric("tpm", "Transactions per minute", "TPM", True, True)
MIX_MBPS = Metric("mix_throughput", "Transfer rate", "Mbit/s", True, False)
MIX_FAILURES = Metric("mix_failure_pct", "Failures", "%", False, False)
MIX_FAIL_KIND = {
    kind: Metric(f"mix_failure_{kind}_pct", f"Failures: {kind}", "%", False, False)
    for kind in ("connect", "timeout", "short", "refused")
}
MIX_P95 = {
    proto: Metric(f"{proto}_fetch_p95_ms", f"{proto.upper()} fetch p95", "ms", False, False)
    for proto in ("http", "ftp")
}
SD_TRANSACTION = Metric("sd_cpu_us_per_transaction", "Service demand", "CPU µs/trans", False, False)
CAPACITY = Metric("capacity", "Concurrent connections", "conn", True, True)
OPEN_RATE = Metric("open_rate", "Open rate", "conn/s", True, False)
TEARDOWN = Metric("teardown_rate", "Teardown rate", "conn/s", True, False)
MAX_CPS = Metric("max_conn_rate", "Max setup rate (≤0.1 % failed)", "conn/s", True, True)
MAX_TEARDOWN = Metric("max_teardown_rate", "Max teardown rate", "conn/s", True, True)


# RFC 2544 (kind rfc2544, secperf.workloads.rfc2544): one record per frame size holds
# every test; its two searches are nested (NESTED_SEARCHES).
RFC_THROUGHPUT = Metric(
    "rfc2544_throughput_fps", "Throughput (no frame lost)", "frames/s", True, True
)
RFC_LINE_RATE = Metric("rfc2544_line_rate_fps", "Line rate", "frames/s", True, False)
RFC_LAT_MEAN = Metric("rfc2544_latency_mean_us", "Latency at throughput, mean", "µs", False, False)
RFC_LAT_P99 = Metric("rfc2544_latency_p99_us", "Latency at throughput, p99", "µs", False, False)
RFC_LAT_RATE = Metric(
    "rfc2544_latency_fps", "Latency test's achieved rate", "frames/s", True, False
)
RFC_LAT_LOSS = Metric("rfc2544_latency_loss_pct", "Latency test's probe loss", "%", False, False)
RFC_LOSS = {
    pct: Metric(f"rfc2544_loss_{pct}_pct", f"Frame loss at {pct} % of line rate", "%", False, False)
    for pct in (100, 90, 80, 70, 60, 50, 40, 30, 20, 10)
}
RFC_LOSS_OFFERED = {
    pct: Metric(
        f"rfc2544_offered_{pct}_pct", f"Offered at the {pct} % step", "% of line rate", True, False
    )
    for pct in RFC_LOSS
}
RFC_B2B = Metric("rfc2544_back_to_back_frames", "Back-to-back burst", "frames", True, False)


def _rfc_latency(field: str) -> Extractor:
    def get(r: Record) -> float | None:
        if not _path(r, "latency", "delay_us", "count"):
            return None
        return _path(r, "latency", "delay_us", field)

    return get


def _rfc_latency_loss(r: Record) -> float | None:
    sent, received = _path(r, "latency", "sent"), _path(r, "latency", "received")
    return None if not sent or received is None else (sent - received) / sent * 100.0


def _rfc_loss(pct: int, offered: bool = False) -> Extractor:
    def get(r: Record) -> float | None:
        loss = r.get("loss")
        steps = loss.get("steps") if isinstance(loss, Mapping) else None
        for step in steps if isinstance(steps, list) else []:
            if isinstance(step, Mapping) and step.get("load_pct") == pct:
                if not offered:
                    return _num(step.get("loss_pct"))
                fps, line = _num(step.get("achieved_fps")), _path(r, "line_rate_fps")
                return None if fps is None or not line else fps / line * 100.0
        return None

    return get


def _sub_latency(which: str, field: str) -> Extractor:
    def get(r: Record) -> float | None:
        if not _path(r, "latency_us", which, "count"):
            return None
        return _path(r, "latency_us", which, field)

    return get


def _ratio_pct(r: Record) -> float | None:
    ratio = _path(r, "failure_ratio")
    return None if ratio is None else ratio * 100.0


DELAY_MEAN = Metric("delay_mean_us", "One-way delay mean", "µs", False, True)
DELAY_STD = Metric("delay_stddev_us", "One-way delay stddev", "µs", False, False)
DELAY_P99 = Metric("delay_p99_us", "One-way delay p99", "µs", False, False)
ACHIEVED_PPS = Metric("achieved_pps", "Probe rate achieved", "pkt/s", True, False)
# Latency under load (sender = "packet"): the whole stream, both ways together.
# The ask beside what was sent: a machine that cannot offer the ask shows it.
LOAD_ASKED = Metric("load_asked_pps", "Load asked (both ways)", "frames/s", True, False)
LOAD_SENT = Metric("load_sent_pps", "Load sent (both ways)", "frames/s", True, False)
LOAD_RECEIVED = Metric("load_received_pps", "Load received (both ways)", "frames/s", True, False)

# A flood's primary figure is what reached the target (an nft counter in the server),
# not what the sender sent: a paced sender sends the asked rate whatever the DUT does.
FLOOD_RX = Metric("flood_received_pps", "Flood rate reaching the target", "packets/s", True, True)
FLOOD_PPS = Metric("flood_pps", "Flood rate sent", "packets/s", True, False)
FLOOD_DROP = Metric("flood_dut_drop_pct", "Flood dropped by the DUT", "%", False, False)
FLOOD_ERR = Metric("flood_rate_error_pct", "Flood rate error", "%", False, False)
# A flood beside a stream/rr/crr: the same two figures, beside the measured ones.
BESIDE_RX = Metric(
    "flood_beside_received_pps", "Flood beside: reaching the target", "packets/s", True, False
)
BESIDE_DROP = Metric("flood_beside_drop_pct", "Flood beside: dropped by the DUT", "%", False, False)
FLOOD_SD = Metric("sd_cpu_us_per_packet", "Service demand", "CPU µs/packet", False, False)
# A SYN flood: what the target answered its sources with (document 002's explanation).
TARGET_RST = Metric("target_rst_pps", "Target's RSTs back to the flood", "packets/s", False, False)
TARGET_SYNACK = Metric(
    "target_synack_pps", "Target's SYN-ACKs back to the flood", "packets/s", False, False
)
# Lower is worse: a DUT that a slower flood denies is more fragile.
MIN_FLOOD = Metric("min_flood_rate", "Minimum flood rate that denies", "packets/s", True, True)


# RFC 3511 §5.5 (kind dos) and §5.8 (kind illegal)
DOS_CPS = Metric("dos_cps", "Connection rate under flood", "conn/s", True, True)
DOS_REF_CPS = Metric("dos_cps_unflooded", "Connection rate without flood", "conn/s", True, False)
DOS_HALF_OPEN = Metric("server_half_open", "Half-open at the server", "conn", False, False)
DOS_FLOOD_PPS = Metric("dos_flood_pps", "Flood rate sent", "packets/s", True, False)
# What of the SYN flood reached the server; fewer is better (the DUT shields it).
DOS_FLOOD_RX = Metric(
    "dos_flood_received_pps", "Flood rate reaching the server", "packets/s", False, False
)
DOS_FLOOD_DROP = Metric("dos_flood_drop_pct", "Flood stopped at the DUT", "%", True, False)
ILLEGAL_REACHED = Metric(
    "illegal_reached", "Denied packets that reached the server", "packets", False, True
)
ILLEGAL_SENT = Metric("illegal_sent", "Denied packets sent", "packets", True, False)
ALLOWED_THROUGHPUT = Metric("allowed_throughput", "Allowed flow", "Mbit/s", True, False)
ALLOWED_TPS = Metric("allowed_tps", "Allowed flow", "trans/s", True, False)


# Detection under load (kind attack_mix): the clean traffic's delivery is the cost.
CLEAN_DELIVERED = Metric("clean_delivered_pct", "Clean traffic delivered", "%", True, True)
ATTACK_DETECTED = Metric("attacks_detected_pct", "Attacks detected", "%", True, False)
ATTACK_BLOCKED = Metric("attacks_blocked_pct", "Drop-rule attacks blocked", "%", True, False)
ATTACK_MISSED = Metric("attacks_missed_pct", "Attacks missed", "%", False, False)
ATTACK_LEAKED = Metric(
    "attacks_leaked", "Drop-rule attacks reaching the server", "msgs", False, False
)
ATTACK_SENT = Metric("attacks_sent", "Attacks sent", "msgs", True, False)
MIX_RATE = Metric("attack_mix_rate", "Load sent", "msgs/s", True, False)
SD_MSG = Metric("sd_cpu_us_per_message", "Service demand", "CPU µs/msg", False, False)


def _answers_pps(which: str) -> Extractor:
    def get(r: Record) -> float | None:
        n, window = (
            _path(r, "delivered", "target_answers", which),
            _path(r, "delivered", "window_s"),
        )
        return None if n is None or not window else n / window

    return get


def _dos_failure_pct(r: Record) -> float | None:
    ratio = _path(r, "failure_ratio")
    return None if ratio is None else ratio * 100.0


def _allowed_tps(r: Record) -> float | None:
    return _path(r, "transactions_per_second") if r.get("measure") == "rr" else None


def _allowed_mbps(r: Record) -> float | None:
    return _throughput(r) if r.get("measure") == "stream" else None


def _abs_error(r: Record) -> float | None:
    err = _path(r, "rate_error_pct")
    return None if err is None else abs(err)


# kind -> ordered (metric, extractor) rows; the order is the report's order.
def _mix_failure(kind: str) -> Extractor:
    def get(r: Record) -> float | None:
        n, attempted = _path(r, "failures", kind), _path(r, "attempted")
        return None if n is None or not attempted else n / attempted * 100.0

    return get


def _mix_p95(proto: str) -> Extractor:
    def get(r: Record) -> float | None:
        return _path(r, "protocols", proto, "fetch_ms", "p95")  # None when none succeeded

    return get


def _tunnel_rss(end: int) -> Extractor:
    """A tunnel mechanism record's daemon memory at one end (0: the end on the client's
    side, 1: the server's), in MiB."""

    def get(r: Record) -> float | None:
        hosts, mem = r.get("hosts"), r.get("memory_bytes")
        if not isinstance(hosts, list) or len(hosts) != 2 or not isinstance(mem, Mapping):
            return None
        value = _num(mem.get(hosts[end]))
        return None if value is None else value / 2**20

    return get


_TABLE: dict[str, tuple[tuple[Metric, Extractor], ...]] = {
    # a `mechanism` record of a tunnel (the runner writes one after each test): its
    # daemons' resident memory, reported beside the throughput and CPU of the test
    "vpn": (
        (TUNNEL_RSS_CLIENT, _tunnel_rss(0)),
        (TUNNEL_RSS_SERVER, _tunnel_rss(1)),
    ),
    "stream": (
        (THROUGHPUT, _throughput),
        (SD_KB, _sd_per_kb),
        (LOSS, _loss_pct),
        # a fixed transfer (`bytes`) only: the paper's ttcp figures
        (TRANSFER_KIB, lambda r: _path(r, "transfer", "kib_per_second")),
        (TRANSFER_S, lambda r: _path(r, "transfer", "seconds")),
    ),
    "rr": (
        (TPS, lambda r: _path(r, "transactions_per_second")),
        (SD_TX, _sd_per_tx),
        (LAT_MEAN, _latency("mean")),
        (LAT_P99, _latency("p99")),
    ),
    "crr": (
        # each crr transaction is one connection: connect, request, response, close
        (CPS, lambda r: _path(r, "transactions_per_second")),
        (SD_CONN, _sd_per_tx),
        (LAT_MEAN, _latency("mean")),
        (LAT_P99, _latency("p99")),
    ),
    "http": (
        (FETCH_RATE, lambda r: _path(r, "fetches_per_second")),
        (HTTP_THROUGHPUT, _throughput),
        (SD_FETCH, lambda r: _busy_us_per(r, _path(r, "fetches"))),
        (CONNECT_MEAN, _sub_latency("connect", "mean")),
        (FIRST_BYTE, _sub_latency("first_byte", "mean")),
        (FETCH_P99, _sub_latency("total", "p99")),
        (FAILURES, _ratio_pct),
    ),
    "mix": (
        (TPM, lambda r: _path(r, "tpm")),
        (MIX_FAILURES, _ratio_pct),
        (MIX_MBPS, _throughput),
        *((MIX_FAIL_KIND[k], _mix_failure(k)) for k in MIX_FAIL_KIND),
        *((MIX_P95[p], _mix_p95(p)) for p in MIX_P95),
        (SD_TRANSACTION, lambda r: _busy_us_per(r, _path(r, "transactions"))),
    ),
    "connections": (
        (CAPACITY, lambda r: _path(r, "capacity")),
        (OPEN_RATE, lambda r: _path(r, "open_rate")),
        (TEARDOWN, lambda r: _path(r, "teardown_rate")),
        (FAILURES, _ratio_pct),
    ),
    # searches: the found value only; a censored search has no number (see SEARCHES)
    "conn_rate": ((MAX_CPS, lambda r: _search_value(r)),),
    "teardown_rate": ((MAX_TEARDOWN, lambda r: _search_value(r)),),
    "latency": (
        # one-way delay of both directions together (the record's `combined`)
        (DELAY_MEAN, _latency("mean")),
        (DELAY_STD, _latency("stddev")),
        (DELAY_P99, _latency("p99")),
        (LOSS, _loss_pct),
        (ACHIEVED_PPS, lambda r: _path(r, "combined", "achieved_pps")),
        (LOAD_ASKED, lambda r: _path(r, "combined", "load", "asked_pps")),
        (LOAD_SENT, lambda r: _path(r, "combined", "load", "achieved_pps")),
        (LOAD_RECEIVED, lambda r: _path(r, "combined", "load", "received_pps")),
    ),
    # 1 when every check of the record passed (secperf.workloads.failclosed)
    "failclosed": ((FAILCLOSED, lambda r: 1.0 if r.get("passed") is True else 0.0),),
    "flood": (
        (FLOOD_RX, lambda r: _path(r, "delivered", "received_pps")),
        (FLOOD_PPS, lambda r: _path(r, "rate_pps")),
        (FLOOD_DROP, lambda r: _path(r, "delivered", "dut_drop_pct")),
        (FLOOD_ERR, _abs_error),
        (FLOOD_SD, lambda r: _busy_us_per(r, _path(r, "packets"))),
        (TARGET_RST, _answers_pps("rst")),
        (TARGET_SYNACK, _answers_pps("synack")),
    ),
    # the lowest flood rate (achieved) probed that denied the stream
    "min_flood_rate": ((MIN_FLOOD, lambda r: _search_value(r)),),
    "dos": (
        (DOS_CPS, lambda r: _path(r, "rate")),
        (FAILURES, _dos_failure_pct),
        (DOS_REF_CPS, lambda r: _path(r, "unflooded", "rate")),
        (DOS_HALF_OPEN, lambda r: _path(r, "server_half_open")),
        (DOS_FLOOD_PPS, lambda r: _path(r, "flood", "rate_pps")),
        (DOS_FLOOD_RX, lambda r: _path(r, "flood", "delivered", "received_pps")),
        (DOS_FLOOD_DROP, lambda r: _path(r, "flood", "delivered", "dut_drop_pct")),
        (SD_CONN, lambda r: _busy_us_per(r, _path(r, "completed"))),
    ),
    "attack_mix": (
        (CLEAN_DELIVERED, lambda r: _path(r, "clean_delivered_pct")),
        (ATTACK_DETECTED, lambda r: _path(r, "detected_pct")),
        (ATTACK_BLOCKED, lambda r: _path(r, "blocked_pct")),
        (ATTACK_MISSED, lambda r: _path(r, "missed_pct")),
        (ATTACK_LEAKED, lambda r: _path(r, "leaked")),
        (ATTACK_SENT, lambda r: _path(r, "attacks_sent")),
        (MIX_RATE, lambda r: _path(r, "achieved_rate")),
        (
            SD_MSG,
            lambda r: _busy_us_per(
                r, (_path(r, "clean_sent") or 0) + (_path(r, "attacks_sent") or 0) or None
            ),
        ),
    ),
    # illegal_reached must be 0 through a filter; its check says so in the report
    "illegal": (
        (ILLEGAL_REACHED, lambda r: _path(r, "illegal_reached")),
        (ALLOWED_THROUGHPUT, _allowed_mbps),
        (ALLOWED_TPS, _allowed_tps),
        (ILLEGAL_SENT, lambda r: _path(r, "illegal_sent")),
    ),
    "rfc2544": (
        (RFC_THROUGHPUT, lambda r: _nested_search_value(r, "throughput")),
        (RFC_LINE_RATE, lambda r: _path(r, "line_rate_fps")),
        (RFC_LAT_MEAN, _rfc_latency("mean")),
        (RFC_LAT_P99, _rfc_latency("p99")),
        (RFC_LAT_RATE, lambda r: _path(r, "latency", "achieved_fps")),
        (RFC_LAT_LOSS, _rfc_latency_loss),
        *((RFC_LOSS[p], _rfc_loss(p)) for p in RFC_LOSS),
        *((RFC_LOSS_OFFERED[p], _rfc_loss(p, offered=True)) for p in RFC_LOSS),
        (RFC_B2B, lambda r: _nested_search_value(r, "back_to_back")),
    ),
}

# A stream/rr/crr measured beside a flood (its record's `flood`, kept only when the
# flood covered the measured window): what of the flood reached the target.
_FLOOD_BESIDE: tuple[tuple[Metric, Extractor], ...] = (
    (BESIDE_RX, lambda r: _path(r, "flood", "received_pps")),
    (BESIDE_DROP, lambda r: _path(r, "flood", "dut_drop_pct")),
)
for _kind in ("stream", "rr", "crr"):
    _TABLE[_kind] = (*_TABLE[_kind], *_FLOOD_BESIDE)

METRICS: dict[str, Metric] = {m.name: m for rows in _TABLE.values() for m, _ in rows}


# -- searches (secperf/search.py) -----------------------------------------------

# kind -> the metric its search finds. Every search record carries the same
# `search` bracket; nothing below branches on the kind beyond this table.
SEARCHES: dict[str, Metric] = {
    "conn_rate": MAX_CPS,
    "teardown_rate": MAX_TEARDOWN,
    "min_flood_rate": MIN_FLOOD,
}
# kind -> (metric, key of the sub-record holding its `search`), for records that hold
# several searches (RFC 2544's throughput and back-to-back).
NESTED_SEARCHES: dict[str, tuple[tuple[Metric, str], ...]] = {
    "rfc2544": ((RFC_THROUGHPUT, "throughput"), (RFC_B2B, "back_to_back")),
}
SEARCH_METRICS = frozenset(m.name for m in SEARCHES.values()) | frozenset(
    m.name for pairs in NESTED_SEARCHES.values() for m, _ in pairs
)

# How a report words a censored search: the value lies below / at or above
# `{bound}`. A metric not listed here uses DEFAULT_CENSORED_WORDS.
DEFAULT_CENSORED_WORDS = {"below": "< {bound}", "at_least": "≥ {bound}"}
CENSORED_WORDS: dict[str, dict[str, str]] = {
    MIN_FLOOD.name: {"below": "denied already at {bound}", "at_least": "not denied up to {bound}"},
    RFC_THROUGHPUT.name: {"below": "not found down to {bound}", "at_least": "at least {bound}"},
    RFC_B2B.name: {"below": "loss already at {bound}", "at_least": "at least {bound}"},
}


@dataclass(frozen=True)
class SearchReading:
    """One search's answer as the summary uses it."""

    outcome: str  # "found" | "below" | "at_least"
    measure: str  # "asked" | "achieved": which rate places the bracket
    value: float | None = None  # found: the threshold
    interval: tuple[float, float] | None = None  # found: [lo, hi] around it
    bound: float | None = None  # censored: below it / at least it
    asked: float | None = None  # censored: the asked rate of the bound's trial


def _end(node: Any, key: str) -> float | None:
    return _num(node.get(key)) if isinstance(node, Mapping) else None


def search_reading(record: Record) -> SearchReading | None:
    """The record's search bracket (None: not a search record, or a malformed one).

    Records written before the `search` object (a `bracket` [passed, failed]
    beside `rate` or `min_flood_rate_pps`) are read too, so an old run's report
    no longer averages a censored search in as 0 or as its range's top."""
    node = record.get("search")
    if not isinstance(node, Mapping):
        return _legacy_reading(record)
    outcome = str(node.get("outcome"))
    measure = str(node.get("measure") or "asked")
    if outcome == "found":
        value, iv = _num(node.get("value")), node.get("interval")
        if value is None or not isinstance(iv, list) or len(iv) != 2:
            return None
        lo, hi = _num(iv[0]), _num(iv[1])
        if lo is None or hi is None:
            return None
        return SearchReading("found", measure, value=value, interval=(lo, hi))
    if outcome in ("below", "at_least"):
        bound = _num(node.get("bound"))
        if bound is None:
            return None
        at = node.get("failed_at" if outcome == "below" else "passed_at")
        return SearchReading(outcome, measure, bound=bound, asked=_end(at, "asked"))
    return None


def _legacy_reading(record: Record) -> SearchReading | None:
    kind = record.get("kind")
    bracket = record.get("bracket")
    if kind not in SEARCHES or not isinstance(bracket, list) or len(bracket) != 2:
        return None
    ok, bad = _num(bracket[0]), _num(bracket[1])
    measure = "asked"
    if kind == "min_flood_rate":
        # its probes kept the flood's achieved rate beside the asked one
        measure = "achieved"
        sent = {
            _num(p.get("rate_pps")): _num(p.get("flood_pps"))
            for p in record.get("probes") or []
            if isinstance(p, Mapping)
        }
        ok_a = None if ok is None else (sent.get(ok) or ok)
        bad_a = None if bad is None else (sent.get(bad) or bad)
    else:
        ok_a, bad_a = ok, bad
    if ok is not None and bad is not None and ok_a is not None and bad_a is not None:
        value = bad_a if kind == "min_flood_rate" else ok_a
        iv = (min(ok_a, bad_a), max(ok_a, bad_a))
        return SearchReading("found", measure, value=value, interval=iv)
    if ok is None and bad is not None:
        return SearchReading("below", measure, bound=bad_a, asked=bad)
    if bad is None and ok is not None:
        return SearchReading("at_least", measure, bound=ok_a, asked=ok)
    return None


def _search_value(r: Record) -> float | None:
    reading = search_reading(r)
    return reading.value if reading is not None else None


def _nested_search_value(r: Record, key: str) -> float | None:
    node = r.get(key)
    reading = search_reading(node) if isinstance(node, Mapping) else None
    return reading.value if reading is not None else None


def searches(result_record: Mapping[str, Any]) -> dict[str, SearchReading]:
    """Metric name -> the search's reading, for a search record (else {})."""
    nested = NESTED_SEARCHES.get(str(result_record.get("kind", "")))
    if nested is not None:
        out: dict[str, SearchReading] = {}
        for metric, key in nested:
            node = result_record.get(key)
            found = search_reading(node) if isinstance(node, Mapping) else None
            if found is not None:
                out[metric.name] = found
        return out
    m = SEARCHES.get(str(result_record.get("kind", "")))
    reading = search_reading(result_record) if m is not None else None
    return {} if m is None or reading is None else {m.name: reading}


def metrics_for_kind(kind: str) -> list[Metric]:
    """The metrics a record of this kind can yield, in report order ([] if unknown)."""
    return [metric for metric, _ in _TABLE.get(kind, ())]


def metric(name: str) -> Metric:
    """Look a metric up by name (KeyError if unknown)."""
    return METRICS[name]


def extract(
    result_record: Mapping[str, Any], *, irq_time_accounting: bool | None = False
) -> dict[str, float]:
    """The metric values of one engine `result` record; absent metrics are left out.

    `irq_time_accounting`: the run's kernel keeps interrupt time out of process CPU
    (run.json host.irq_time_accounting); service demand then adds the softirq time.
    """
    record = {**result_record, TESTBED_CPU: testbed_cpu_s(result_record, irq_time_accounting)}
    values: dict[str, float] = {}
    for m, get in _TABLE.get(str(result_record.get("kind", "")), ()):
        value = get(record)
        if value is not None:
            values[m.name] = value
    return values


# -- CPU per host ----------------------------------------------------------------

# kind -> (unit of work, its count in a result record): what service demand divides by.
WORK_UNITS: dict[str, tuple[str, Extractor]] = {
    "stream": ("kB", _stream_kb),
    "rr": ("trans", lambda r: _path(r, "transactions")),
    "crr": ("conn", lambda r: _path(r, "transactions")),
    "http": ("fetch", lambda r: _path(r, "fetches")),
    "flood": ("packet", lambda r: _path(r, "packets")),
    "dos": ("conn", lambda r: _path(r, "completed")),
    "mix": ("trans", lambda r: _path(r, "transactions")),
}


@dataclass(frozen=True)
class CpuBreakdown:
    """One result record's CPU, part by part, over its measured window (seconds)."""

    unit: str
    units: float
    window_s: float  # the window's length (wall clock)
    hosts: dict[str, float]  # each testbed host's cgroup
    softirq: float  # softirq + irq, machine-wide, wherever it ran
    testbed: float  # the testbed's work: the hosts (+ softirq where it is not in them)
    machine: float  # the machine's busy time

    @property
    def accounted_pct(self) -> float | None:
        """The testbed's work against the machine's busy time (the reconciliation)."""
        return self.testbed / self.machine * 100.0 if self.machine > 0 else None

    def parts(self) -> dict[str, float]:
        """Seconds by part: `host:<name>`, then softirq, testbed and machine."""
        out = {f"host:{h}": v for h, v in self.hosts.items()}
        out.update(softirq=self.softirq, testbed=self.testbed, machine=self.machine)
        return out


def cpu_breakdown(
    record: Mapping[str, Any], *, irq_time_accounting: bool | None = False
) -> CpuBreakdown | None:
    """Each host's CPU, the softirq time, the testbed's sum and the machine's, for a
    record with host_cpu (None for records without it, or without work to divide by)."""
    hosts = record.get("host_cpu")
    unit_of = WORK_UNITS.get(str(record.get("kind", "")))
    if not isinstance(hosts, Mapping) or not hosts or unit_of is None:
        return None
    unit, count = unit_of
    units = count(record)
    busy = _path(record, "machine_cpu", "busy_s")
    total = _path(record, "machine_cpu", "total_s")
    cpus = _path(record, "machine_cpu", "cpus")
    testbed = testbed_cpu_s(record, irq_time_accounting)
    if not units or busy is None or not total or not cpus or testbed is None:
        return None
    softirq = (_path(record, "machine_cpu", "softirq_s") or 0.0) + (
        _path(record, "machine_cpu", "irq_s") or 0.0
    )
    # the engine's own clock; older records: ticks over CPUs (short under steal)
    window = _path(record, "machine_cpu", "window_s") or total / cpus
    return CpuBreakdown(
        unit=unit,
        units=units,
        window_s=window,
        hosts={str(h): float(_num(v) or 0.0) for h, v in hosts.items()},
        softirq=softirq,
        testbed=testbed,
        machine=busy,
    )
