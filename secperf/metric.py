"""What a metric is and how a result record yields it: the pieces every kind shares.

A workload kind declares its metrics as rows of (Metric, extractor) on its
declaration (secperf.workloads.base.WorkloadKind); the rows' order is the
report's order. This module is the bottom layer those declarations build on: the
Metric type, the record readers (`num`, `path`), the extractors and metrics more
than one kind uses, service demand, and the search bracket's reading. It imports
no kind; `secperf.results.metrics` looks a record's kind up in the registry.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Record = Mapping[str, Any]
Extractor = Callable[[Record], float | None]

# A rate's unit: something per second ("Mbit/s", "conn/s", "kB/s (…)") or per minute.
_RATE_UNIT = re.compile(r"/s\b|^TPM$")

# How a report words a censored search: the value lies below / at or above `{bound}`.
DEFAULT_CENSORED_WORDS = {"below": "< {bound}", "at_least": "≥ {bound}"}


@dataclass(frozen=True)
class Metric:
    """One number a report shows for a workload point.

    `censored`: for a search's metric, how the report words a search that found no
    value, (below, at least), each with `{bound}`; None: DEFAULT_CENSORED_WORDS.

    `scale`: the scale of its paired degradation (secperf.stats.degradation): "ratio"
    (the log of the paired ratio) or "difference" (the arithmetic paired difference);
    None: "ratio" for a rate (a unit per second or per minute) and a service demand,
    "difference" for the rest (a loss %, a delay, a count that may be 0)."""

    name: str
    label: str
    unit: str
    higher_is_better: bool
    primary: bool
    censored: tuple[str, str] | None = None
    scale: Literal["ratio", "difference"] | None = None

    @property
    def ratio_scale(self) -> bool:
        """Is its degradation on the ratio scale (a rate's loss can never pass 100 %)?"""
        if self.scale is not None:
            return self.scale == "ratio"
        return self.service_demand or bool(_RATE_UNIT.search(self.unit))

    @property
    def service_demand(self) -> bool:
        """CPU spent per unit of work: holds on a shared machine where rates do not."""
        return self.name.startswith("sd_")

    @property
    def censored_words(self) -> dict[str, str]:
        if self.censored is None:
            return dict(DEFAULT_CENSORED_WORDS)
        below, at_least = self.censored
        return {"below": below, "at_least": at_least}


MetricRow = tuple[Metric, Extractor]
# (unit of work, its count in a result record): what service demand divides by.
WorkUnit = tuple[str, Extractor]


def num(value: Any) -> float | None:
    """A finite float, or None for absent, null, boolean or non-finite values."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def path(record: Record, *keys: str) -> float | None:
    """The number at `keys` inside the record (None when any step is missing)."""
    node: Any = record
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return num(node)


def field(*keys: str) -> Extractor:
    """An extractor of the number at `keys`."""

    def get(r: Record) -> float | None:
        return path(r, *keys)

    return get


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
        values = [num(v) for v in hosts.values()]
        if any(v is None for v in values):
            return None
        total = sum(v for v in values if v is not None)
        if irq_time_accounting:
            total += (path(record, "machine_cpu", "softirq_s") or 0.0) + (
                path(record, "machine_cpu", "irq_s") or 0.0
            )
        return total
    return path(record, "machine_cpu", "busy_s")


def busy_us_per(record: Record, units: float | None) -> float | None:
    """The testbed's CPU µs per unit of work (service demand)."""
    busy = path(record, TESTBED_CPU)
    if busy is None:
        busy = testbed_cpu_s(record)
    if busy is None or units is None or units <= 0:
        return None
    return busy * 1e6 / units


def service_demand(units: Extractor) -> Extractor:
    """CPU µs per unit of work, the units counted by `units`."""

    def get(r: Record) -> float | None:
        return busy_us_per(r, units(r))

    return get


def throughput(r: Record) -> float | None:
    """bits_per_second in Mbit/s."""
    bps = path(r, "bits_per_second")
    return None if bps is None else bps / 1e6


def loss_pct(r: Record) -> float | None:
    ratio = path(r, "loss", "ratio")  # null for TCP: no row
    return None if ratio is None else ratio * 100.0


def ratio_pct(r: Record) -> float | None:
    """failure_ratio in %."""
    ratio = path(r, "failure_ratio")
    return None if ratio is None else ratio * 100.0


def latency(name: str) -> Extractor:
    """A figure of the record's latency_us summary (None without samples)."""

    def get(r: Record) -> float | None:
        if path(r, "latency_us", "count") == 0:
            return None  # no samples: a zero would read as "no latency"
        return path(r, "latency_us", name)

    return get


def sub_latency(which: str, name: str) -> Extractor:
    """A figure of one of the record's latency_us summaries (connect, first_byte, ...)."""

    def get(r: Record) -> float | None:
        if not path(r, "latency_us", which, "count"):
            return None
        return path(r, "latency_us", which, name)

    return get


# -- metrics more than one kind reports ------------------------------------------

LOSS = Metric("loss_pct", "Loss", "%", False, False)
FAILURES = Metric("failure_pct", "Failures", "%", False, False)
LAT_MEAN = Metric("latency_mean_us", "Latency mean", "µs", False, False)
LAT_P99 = Metric("latency_p99_us", "Latency p99", "µs", False, False)
SD_CONN = Metric("sd_cpu_us_per_conn", "Service demand", "CPU µs/conn", False, False)


# -- searches (secperf/workloads/parts/search.py) -------------------------------------------------


@dataclass(frozen=True)
class SearchReading:
    """One search's answer as the summary uses it."""

    outcome: str  # "found" | "below" | "at_least"
    measure: str  # "asked" | "achieved": which rate places the bracket
    value: float | None = None  # found: the threshold
    interval: tuple[float, float] | None = None  # found: [lo, hi] around it
    bound: float | None = None  # censored: below it / at least it
    asked: float | None = None  # censored: the asked rate of the bound's trial
    # at_least: why the search went no higher when the tool could not run a trial
    ceiling: str | None = None


def _end(node: Any, key: str) -> float | None:
    return num(node.get(key)) if isinstance(node, Mapping) else None


def search_reading(record: Record) -> SearchReading | None:
    """The record's `search` bracket (None: none, or a malformed one)."""
    node = record.get("search")
    if not isinstance(node, Mapping):
        return None
    outcome = str(node.get("outcome"))
    measure = str(node.get("measure") or "asked")
    if outcome == "found":
        value, iv = num(node.get("value")), node.get("interval")
        if value is None or not isinstance(iv, list) or len(iv) != 2:
            return None
        lo, hi = num(iv[0]), num(iv[1])
        if lo is None or hi is None:
            return None
        return SearchReading("found", measure, value=value, interval=(lo, hi))
    if outcome in ("below", "at_least"):
        bound = num(node.get("bound"))
        if bound is None:
            return None
        at = node.get("failed_at" if outcome == "below" else "passed_at")
        top = node.get("ceiling")
        ceiling = str(top.get("error") or "") if isinstance(top, Mapping) else None
        return SearchReading(
            outcome, measure, bound=bound, asked=_end(at, "asked"), ceiling=ceiling or None
        )
    return None


def legacy_bracket(
    record: Record,
    *,
    reports: str = "passed",
    achieved: Mapping[float | None, float | None] | None = None,
) -> SearchReading | None:
    """A record written before the `search` object: a `bracket` [passed, failed] of
    asked rates. `reports` names the end that is the value; `achieved` maps an asked
    rate to the rate achieved, which then places the bracket."""
    bracket = record.get("bracket")
    if not isinstance(bracket, list) or len(bracket) != 2:
        return None
    ok, bad = num(bracket[0]), num(bracket[1])
    measure = "asked" if achieved is None else "achieved"
    if achieved is None:
        ok_a, bad_a = ok, bad
    else:
        ok_a = None if ok is None else (achieved.get(ok) or ok)
        bad_a = None if bad is None else (achieved.get(bad) or bad)
    if ok is not None and bad is not None and ok_a is not None and bad_a is not None:
        value = bad_a if reports == "failed" else ok_a
        iv = (min(ok_a, bad_a), max(ok_a, bad_a))
        return SearchReading("found", measure, value=value, interval=iv)
    if ok is None and bad is not None:
        return SearchReading("below", measure, bound=bad_a, asked=bad)
    if bad is None and ok is not None:
        return SearchReading("at_least", measure, bound=ok_a, asked=ok)
    return None


@dataclass(frozen=True)
class Search:
    """A search a kind's result record holds: its metric, where its `search` bracket
    sits (`key`: a sub-record; None: the record itself), and how records from before
    the `search` object read (`legacy`), so an old run's report never averages a
    censored search in as 0 or as its range's top."""

    metric: Metric
    key: str | None = None
    legacy: Callable[[Record], SearchReading | None] | None = None

    def reading(self, record: Record) -> SearchReading | None:
        node = record if self.key is None else record.get(self.key)
        if not isinstance(node, Mapping):
            return None
        if not isinstance(node.get("search"), Mapping) and self.legacy is not None:
            return self.legacy(node)
        return search_reading(node)

    def value(self, record: Record) -> float | None:
        """The found threshold (None: censored, or no search)."""
        found = self.reading(record)
        return found.value if found is not None else None

    def row(self) -> MetricRow:
        """The metric row of the search's found value (a censored one has none)."""
        return (self.metric, self.value)
