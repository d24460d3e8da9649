"""What a result record measures: its kind's metrics, looked up in the registry.

Each workload kind declares its metrics (rows of Metric and extractor, in report
order), its searches and its unit of work on its declaration
(secperf.workloads.base.WorkloadKind); the Metric type and the extractors they
share are in secperf.metric. This module reads a record through the
kind its `kind` names; nothing here branches on a kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from secperf.mechanisms.registry import MECHANISMS
from secperf.metric import (
    DEFAULT_CENSORED_WORDS,
    TESTBED_CPU,
    Metric,
    MetricRow,
    SearchReading,
    WorkUnit,
    num,
    path,
    testbed_cpu_s,
)
from secperf.workloads.registry import WORKLOADS

__all__ = [
    "METRICS",
    "CpuBreakdown",
    "Metric",
    "SearchReading",
    "censored_words",
    "cpu_breakdown",
    "extract",
    "is_search_metric",
    "metric",
    "metrics_for_kind",
    "offered_metric",
    "searches",
    "work_unit",
]


def rows_for(kind: str) -> tuple[MetricRow, ...]:
    """The (metric, extractor) rows of a record of this kind, in report order; () for
    a kind not registered (a record of an older secperf, say)."""
    if kind in WORKLOADS:
        return WORKLOADS.get(kind).metrics
    # a `mechanism` record (one per mechanism after each test), by the mechanism's kind
    return MECHANISMS.get(kind).metrics if kind in MECHANISMS else ()


def _all_rows() -> Iterator[MetricRow]:
    for k in WORKLOADS:
        yield from k.metrics
    for m in MECHANISMS:
        yield from m.metrics


class _Metrics(Mapping[str, Metric]):
    """Every metric by name, of every kind registered now (a kind registered later,
    by a plugin or a test, counts)."""

    def _table(self) -> dict[str, Metric]:
        return {m.name: m for m, _ in _all_rows()}

    def __getitem__(self, name: str) -> Metric:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


METRICS: Mapping[str, Metric] = _Metrics()


def metrics_for_kind(kind: str) -> list[Metric]:
    """The metrics a record of this kind can yield, in report order ([] if unknown)."""
    return [m for m, _ in rows_for(kind)]


def metric(name: str) -> Metric:
    """Look a metric up by name (KeyError if unknown)."""
    return METRICS[name]


def is_search_metric(name: str) -> bool:
    """Is this the metric of a search (its value a bracket's end, never averaged in
    when censored)?"""
    return any(s.metric.name == name for k in WORKLOADS for s in k.searches)


def censored_words(name: str) -> dict[str, str]:
    """How a report words a censored search of this metric (below / at least)."""
    found = METRICS.get(name)
    return found.censored_words if found is not None else dict(DEFAULT_CENSORED_WORDS)


def searches(result_record: Mapping[str, Any]) -> dict[str, SearchReading]:
    """Metric name -> the search's reading, for a search record (else {})."""
    kind = str(result_record.get("kind", ""))
    if kind not in WORKLOADS:
        return {}
    out: dict[str, SearchReading] = {}
    for search in WORKLOADS.get(kind).searches:
        found = search.reading(result_record)
        if found is not None:
            out[search.metric.name] = found
    return out


def extract(
    result_record: Mapping[str, Any], *, irq_time_accounting: bool | None = False
) -> dict[str, float]:
    """The metric values of one engine `result` record; absent metrics are left out.

    `irq_time_accounting`: the run's kernel keeps interrupt time out of process CPU
    (run.json host.irq_time_accounting); service demand then adds the softirq time.
    """
    record = {**result_record, TESTBED_CPU: testbed_cpu_s(result_record, irq_time_accounting)}
    values: dict[str, float] = {}
    for m, get in rows_for(str(result_record.get("kind", ""))):
        value = get(record)
        if value is not None:
            values[m.name] = value
    return values


# -- CPU per host ----------------------------------------------------------------


def offered_metric(kind: str) -> str | None:
    """The rate metric of a kind that can run open loop (its achieved rate), else None."""
    offered = WORKLOADS.get(kind).offered if kind in WORKLOADS else None
    return offered.metric if offered is not None else None


def work_unit(kind: str) -> WorkUnit | None:
    """(unit of work, its count in a result record): what service demand divides by."""
    return WORKLOADS.get(kind).work_unit if kind in WORKLOADS else None


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
    unit_of = work_unit(str(record.get("kind", "")))
    if not isinstance(hosts, Mapping) or not hosts or unit_of is None:
        return None
    unit, count = unit_of
    units = count(record)
    busy = path(record, "machine_cpu", "busy_s")
    total = path(record, "machine_cpu", "total_s")
    cpus = path(record, "machine_cpu", "cpus")
    testbed = testbed_cpu_s(record, irq_time_accounting)
    if not units or busy is None or not total or not cpus or testbed is None:
        return None
    softirq = (path(record, "machine_cpu", "softirq_s") or 0.0) + (
        path(record, "machine_cpu", "irq_s") or 0.0
    )
    # the engine's own clock; older records: ticks over CPUs (short under steal)
    window = path(record, "machine_cpu", "window_s") or total / cpus
    return CpuBreakdown(
        unit=unit,
        units=units,
        window_s=window,
        hosts={str(h): float(num(v) or 0.0) for h, v in hosts.items()},
        softirq=softirq,
        testbed=testbed,
        machine=busy,
    )


def ratio_scale(name: str) -> bool:
    """Is a metric's paired degradation on the ratio scale (Metric.ratio_scale; an
    unknown metric: the arithmetic difference)?"""
    metric = METRICS.get(name)
    return metric is not None and metric.ratio_scale
