"""Each test over time, and each round's value: where warm-up, drift, a flood's onset or
a tunnel's rekey show.

The engine writes an `interval` record every `interval` seconds of a test
(docs/engine-protocol.md): the receiver's bits per second, the transaction rate and
latency percentiles of rr and crr, a flood's packets per second. `collect` groups
them by workload point, variant and round (a retried test keeps its last attempt);
`series_chart` draws one point: a panel per quantity the records carry, a line per
round, a colour per variant, the warm-up shaded. A flood beside the test (its records
nested as `side` records of role `flood`) is drawn on its own panel above, on the
test's clock (both `start` records carry CLOCK_MONOTONIC, which every namespace
shares). Several generators' intervals are summed by their index.

A point is drawn when one of its tests has at least SERIES_MIN_POINTS measured
intervals (`too_few` says why not, in one line).

`strip_chart` is the per-round view of the summary's headline metrics: every round's
value as a dot, per variant, the mean as a bar, so that noise is visible.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from secperf.report.answer import headline
from secperf.report.plots import PlainTicks, figure_bytes, new_figure, outside_legend
from secperf.results.records import RecordLine, as_line
from secperf.results.rundir import RunDir
from secperf.results.summary import collect as collect_groups
from secperf.tables import BASELINE, Chart, point_name

# (key, label): what an interval record may carry, in panel order
THROUGHPUT = ("throughput", "Throughput (Mbit/s)")
RATE = ("rate", "Transactions/s")
PACKETS = ("rate", "Packets/s")
LATENCY = {"p50": "Latency p50 (µs)", "p99": "Latency p99 (µs)", "mean": "Latency mean (µs)"}
FLOOD = ("flood", "Flood beside it (packets/s)")
GENERATOR_ROLE = "generator-"
# Fewer measured intervals than this in every test: no series is drawn (two or three
# points are a line, not a shape over time).
SERIES_MIN_POINTS = 5


@dataclass
class Test:
    """One test's intervals: t = the middle of each, from the start of its traffic."""

    variant: str
    rep: int
    warmup_s: float | None = None
    clock_ns: int | None = None  # CLOCK_MONOTONIC at the start record
    flood_packets: bool = False  # a flood test: `rate` counts packets
    points: list[dict[str, float]] = field(default_factory=list)
    flood: list[tuple[float, float]] = field(default_factory=list)  # (t, packets/s)
    flood_clock_ns: int | None = None
    # generator name -> its intervals (summed into points at the end)
    generators: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    roles: set[str] = field(default_factory=set)  # whose start record came ("" = the test)

    def started(self, role: str) -> bool:
        """Has this role's start come already? Then another one is a new attempt."""
        return role in self.roles

    def flood_offset(self) -> float | None:
        """Seconds from this test's start to the flood's start (None: clocks unknown)."""
        if self.clock_ns is None or self.flood_clock_ns is None:
            return None
        return (self.flood_clock_ns - self.clock_ns) / 1e9


@dataclass
class PointSeries:
    workload: str
    point_id: str
    label: str  # the workload, and the point's label when it is swept
    tests: list[Test] = field(default_factory=list)


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def _sample(rec: Mapping[str, Any]) -> dict[str, float] | None:
    """What one interval record says, by quantity, at the middle of its interval;
    None without a time."""
    end = _num(rec.get("t_end"))
    if end is None:
        end = _num(rec.get("t"))
    if end is None:
        return None
    start = _num(rec.get("t_start"))
    t = (start + end) / 2 if start is not None and start <= end else end
    out: dict[str, float] = {"t": t, "warmup": 1.0 if rec.get("warmup") else 0.0}
    if start is not None and start < end:
        out["span"] = end - start
    bps = _num(rec.get("bits_per_second"))
    if bps is not None:
        out["throughput"] = bps / 1e6
    rate = _num(rec.get("rate"))
    transactions = _num(rec.get("transactions"))
    packets = _num(rec.get("packets"))
    if rate is not None and ((transactions or 0) > 0 or (packets or 0) > 0 or rate > 0):
        out["rate"] = rate
    latency = rec.get("latency_us")
    if isinstance(latency, Mapping):
        for key in LATENCY:
            value = _num(latency.get(key))
            if value is not None:
                out[key] = value
    return out


def _clock(rec: Mapping[str, Any]) -> int | None:
    clock = rec.get("clock")
    value = clock.get("monotonic_ns") if isinstance(clock, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def collect(lines: Iterable[Mapping[str, Any] | RecordLine]) -> list[PointSeries]:
    """The run's interval records by point, variant and round, in record order."""
    points: dict[tuple[str, str], PointSeries] = {}
    tests: dict[tuple[str, str, str, int], Test] = {}
    for given in lines:
        line = as_line(given)
        record, rep = line.record, line.rep
        if rep is None:
            continue
        workload, pid, variant = line.workload, line.point_id, line.variant
        rtype = line.rtype
        role = str(record.get("role", "")) if rtype == "side" else ""
        inner = record.get("record") if rtype == "side" else record
        if not isinstance(inner, Mapping) or inner.get("type") not in ("start", "interval"):
            continue
        if rtype == "side" and role != "flood" and not role.startswith(GENERATOR_ROLE):
            continue  # a search's probes, a reference run: not the measured test
        where = point_name(workload, line.label)
        point = points.setdefault((workload, pid), PointSeries(workload, pid, where))
        key = (workload, pid, variant, rep)
        test = tests.get(key)
        generator = role[len(GENERATOR_ROLE) :] if role.startswith(GENERATOR_ROLE) else None
        if test is None or (inner.get("type") == "start" and test.started(role)):
            # a new test, or a new attempt of it (a retried test starts over)
            test = Test(variant, rep)
            tests[key] = test
            point.tests = [t for t in point.tests if (t.variant, t.rep) != (variant, rep)]
            point.tests.append(test)
        if inner.get("type") == "start":
            raw = inner.get("spec")
            spec: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            test.roles.add(role)
            if generator is not None:
                test.generators.setdefault(generator, [])
            if role == "flood":
                test.flood_clock_ns = _clock(inner)
                continue
            test.clock_ns = test.clock_ns if test.clock_ns is not None else _clock(inner)
            warmup = _num(spec.get("warmup"))
            test.warmup_s = warmup if warmup is not None else test.warmup_s
            test.flood_packets = test.flood_packets or "flood" in spec
            continue
        sample = _sample(inner)
        if sample is None:
            continue
        if role == "flood":
            if "rate" in sample:
                test.flood.append((sample["t"], sample["rate"]))
        elif role:
            test.generators.setdefault(role[len(GENERATOR_ROLE) :], []).append(sample)
        else:
            test.points.append(sample)
    out = list(points.values())
    for point in out:
        for test in point.tests:
            if test.generators and not test.points:
                test.points = _summed(list(test.generators.values()))
        point.tests = [t for t in point.tests if t.points or t.flood]
    return [p for p in out if p.tests]


def _summed(parts: Sequence[Sequence[dict[str, float]]]) -> list[dict[str, float]]:
    """Generators' intervals added by index (rates add; latencies are averaged)."""
    out: list[dict[str, float]] = []
    for i in range(min(len(p) for p in parts)):
        row: dict[str, float] = {"t": max(p[i]["t"] for p in parts)}
        row["warmup"] = max(p[i].get("warmup", 0.0) for p in parts)
        for key in ("throughput", "rate"):
            values = [p[i][key] for p in parts if key in p[i]]
            if values:
                row[key] = sum(values)
        for key in LATENCY:
            values = [p[i][key] for p in parts if key in p[i]]
            if values:
                row[key] = sum(values) / len(values)
        out.append(row)
    return out


def rate_labels(summary: Mapping[str, Any]) -> dict[str, str]:
    """Workload -> how its `rate` reads, from its kind's own primary metric ("Connection
    rate (conn/s)" for crr, "Transaction rate (trans/s)" for rr): a rate of the engine's
    records counts what the kind counts."""
    out: dict[str, str] = {}
    for row in summary.get("rows") or []:
        unit = str(row.get("unit") or "")
        if row.get("primary") and unit.endswith("/s") and not unit.endswith("bit/s"):
            label = str(row.get("metric_label") or row.get("metric"))
            out.setdefault(str(row.get("workload")), f"{label} ({unit})")
    return out


def _panels(point: PointSeries, rate: str | None = None) -> list[tuple[str, str]]:
    """(quantity, label) panels the point's records carry, flood first; `rate`: how the
    point's rate reads (rate_labels), else "Transactions/s"."""
    have = {k for t in point.tests for s in t.points for k in s}
    packets = any(t.flood_packets for t in point.tests)
    panels: list[tuple[str, str]] = []
    if any(t.flood for t in point.tests):
        panels.append(FLOOD)
    if "rate" in have:
        panels.append(PACKETS if packets else (RATE[0], rate or RATE[1]))
    if "throughput" in have and ("rate" not in have or packets):
        panels.append(THROUGHPUT)
    for key in ("p50", "p99"):
        if key in have:
            panels.append((key, LATENCY[key]))
    if "mean" in have and not {"p50", "p99"} & have:
        panels.append(("mean", LATENCY["mean"]))
    return panels


def colors_of(variants: Sequence[str]) -> dict[str, str]:
    """One colour per variant, the baseline first, shared by a report's charts."""
    names = [BASELINE, *(v for v in dict.fromkeys(variants) if v != BASELINE)]
    return {v: f"C{i % 10}" for i, v in enumerate(names)}


def series_chart(
    point: PointSeries, order: Sequence[str] = (), rates: Mapping[str, str] | None = None
) -> Chart:
    """One point's tests over time: a panel per quantity, a line per round; `order`:
    the report's variants, for their colours and the legend; `rates`: rate_labels."""
    title = f"{point.label}: over time (every round)"
    panels = _panels(point, (rates or {}).get(point.workload))
    ran = set(t.variant for t in point.tests)
    colors = colors_of([*order, *(t.variant for t in point.tests)])
    variants = [v for v in colors if v in ran]
    fig = new_figure(6.4, 0.9 + 1.45 * max(1, len(panels)))
    axes: list[Any] = []
    unaligned = False
    for k, (key, label) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, k + 1, sharex=axes[0] if axes else None)
        axes.append(ax)
        for test in point.tests:
            if key == "flood":
                offset = test.flood_offset()
                unaligned |= offset is None and bool(test.flood)
                xs = [t + (offset or 0.0) for t, _ in test.flood]
                ys = [v for _, v in test.flood]
            else:
                pts = [s for s in test.points if key in s]
                xs, ys = [s["t"] for s in pts], [s[key] for s in pts]
            if xs:
                ax.plot(xs, ys, color=colors[test.variant], linewidth=1.0, alpha=0.75, marker=".")
        warmups = [t.warmup_s for t in point.tests if t.warmup_s]
        if warmups:
            ax.axvspan(0, max(warmups), color="0.9", zorder=0)
        ax.set_ylabel(label, fontsize=8)
        ax.set_ylim(0, max(ax.get_ylim()[1], 1e-9) * 1.1)  # a flat line clear of the frame
        ax.yaxis.set_major_formatter(PlainTicks())
        ax.tick_params(labelsize=8, labelbottom=k == len(panels) - 1)
        ax.grid(color="0.9", linewidth=0.6)
    axes[-1].set_xlabel(
        "seconds from the start of the test's traffic (shaded: warm-up, not measured)"
        + ("; flood not aligned: no clock in its records" if unaligned else ""),
        fontsize=8,
    )
    for v in variants:
        axes[0].plot([], [], color=colors[v], label=v)
    outside_legend(axes[0], fontsize=8)
    fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    return Chart(title, figure_bytes(fig))


def too_few(point: PointSeries) -> str | None:
    """Why the point's series is not drawn, in one line (None: it is): none of its
    tests has SERIES_MIN_POINTS measured intervals (or flood intervals beside it)."""
    most, spans = 0, []
    for test in point.tests:
        measured = [s for s in test.points if not s["warmup"]]
        most = max(most, len(measured), len(test.flood))
        spans += [s["span"] for s in measured if "span" in s]
    if most >= SERIES_MIN_POINTS:
        return None
    each = f" of {max(spans):.2g} s" if spans else ""
    return (
        f"{point.label}: not drawn over time: its tests have at most {most} measured "
        f"interval{'s' if most != 1 else ''}{each}, fewer than the {SERIES_MIN_POINTS} a "
        "series needs"
    )


def series_parts(
    lines: Iterable[Mapping[str, Any]],
    order: Sequence[str] = (),
    rates: Mapping[str, str] | None = None,
) -> tuple[list[Chart], list[tuple[str, str]]]:
    """A time-series chart per workload point with enough interval records, and
    (point label, why not) for each point with too few (`too_few`)."""
    charts: list[Chart] = []
    skipped: list[tuple[str, str]] = []
    for point in collect(lines):
        why = too_few(point)
        if why is None:
            charts.append(series_chart(point, order, rates))
        else:
            skipped.append((point.label, why))
    return charts, skipped


# -- every round's value -----------------------------------------------------------------


# (workload, point_id) -> metric -> variant -> every round's value, in round order
RoundValues = dict[tuple[str, str], dict[str, dict[str, list[float]]]]


def round_values(run: RunDir) -> RoundValues:
    """Every round's value of every metric, from the run's records."""
    out: RoundValues = {}
    for (workload, point_id, variant), group in collect_groups(run).items():
        per = out.setdefault((workload, point_id), {})
        for metric, series in group.values.items():
            per.setdefault(metric, {})[variant] = [series[r] for r in sorted(series)]
    return out


def strip_charts(
    summary: Mapping[str, Any], values: RoundValues, order: Sequence[str] = ()
) -> list[Chart]:
    """Per workload point, every round's value of its headline metrics."""
    rows = [r for r in summary.get("rows") or [] if headline(r)]
    out: list[Chart] = []
    for key in dict.fromkeys((str(r["workload"]), str(r["point_id"])) for r in rows):
        mine = [r for r in rows if (r["workload"], r["point_id"]) == key]
        metrics = list(dict.fromkeys(str(r["metric"]) for r in mine))
        labels = {
            str(r["metric"]): f"{r.get('metric_label') or r['metric']} ({r.get('unit', '')})"
            for r in mine
        }
        found = values.get(key, {})
        panels = [(m, labels[m]) for m in metrics if any(found.get(m, {}).values())]
        if not panels:
            continue
        where = point_name(key[0], str(mine[0].get("label") or ""))
        title = f"{where}: every round's value (bar: the mean)"
        out.append(Chart(title, strip_chart(title, panels, found, order)))
    return out


def strip_chart(
    title: str,
    metrics: Sequence[tuple[str, str]],
    values: Mapping[str, Mapping[str, Sequence[float]]],
    order: Sequence[str] = (),
) -> bytes:
    """A panel per metric (name, axis label); per variant each round's value as a dot
    (spread sideways a little so equal values stay visible) and the mean as a bar."""
    fig = new_figure(0.8 + 2.3 * len(metrics), 3.0)
    for k, (metric, label) in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), k + 1)
        per = values.get(metric, {})
        colors = colors_of([*order, *per])
        names = [v for v in colors if v in per]
        for i, name in enumerate(names):
            ys = list(per[name])
            if not ys:
                continue
            spread = [((j % 5) - 2) * 0.06 for j in range(len(ys))]
            ax.plot(
                [i + s for s in spread],
                ys,
                linestyle="none",
                marker="o",
                markersize=4,
                color=colors[name],
                alpha=0.8,
            )
            mean = sum(ys) / len(ys)
            ax.plot([i - 0.3, i + 0.3], [mean, mean], color="0.2", linewidth=1.5)
        ax.set_xticks(range(len(names)), names, rotation=25, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(names) - 0.4)
        ax.set_ylabel(label, fontsize=8)
        ax.yaxis.set_major_formatter(PlainTicks())
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", color="0.9", linewidth=0.6)
    fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    return figure_bytes(fig)
