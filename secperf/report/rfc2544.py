"""RFC 2544's report, in the RFC's layout (section 26): a row per frame size.

- Throughput (26.1): the line rate beside each configuration's throughput in
  frames/s and % of the line rate, and the degradation against the baseline; and a
  chart of throughput against frame size with the theoretical line rate as a line.
- Latency (26.2): the rate the latency test ran at (achieved) and the latency.
- Frame loss rate (26.3): loss % at each step of the line rate, a row per frame size
  and configuration; a chart per configuration, a line per frame size.
- Back-to-back (26.4): the longest burst without loss, in frames.

A search that found no value prints its bound in words ("at least 148,810",
"not found down to 1,488"), never a number in its place.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

from secperf.report.plots import Chart, PlainTicks, figure_bytes, outside_legend
from secperf.report.terminal import (
    BASELINE,
    Cell,
    ReportTable,
    _degradation_cell,
    _reps,
    _value_cell,
    fmt_value,
)

KIND = "rfc2544"
LOSS_STEPS = (100, 90, 80, 70, 60, 50, 40, 30, 20, 10)
SHORT = "‡"  # the sender reached less than SHORT_RATIO of the step's rate
SHORT_RATIO = 0.98

Row = Mapping[str, Any]


def _frame(row: Row) -> int | None:
    value = (row.get("point") or {}).get("frame")
    return int(value) if isinstance(value, int | float) else None


class _Rows:
    """The workload's summary rows, by (point, variant, metric)."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.by_key = {(str(r["point_id"]), str(r["variant"]), str(r["metric"])): r for r in rows}
        self.frames = {str(r["point_id"]): _frame(r) for r in rows}
        self.points = list(dict.fromkeys(str(r["point_id"]) for r in rows))
        self.points.sort(key=lambda p: self.frame(p) or 0)
        variants = list(dict.fromkeys(str(r["variant"]) for r in rows))
        self.variants = [BASELINE] if BASELINE in variants else []
        self.variants += [v for v in variants if v != BASELINE]

    def frame(self, point: str) -> int | None:
        return self.frames.get(point)

    def get(self, point: str, variant: str, metric: str) -> Row | None:
        return self.by_key.get((point, variant, metric))

    def mean(self, point: str, variant: str, metric: str) -> float | None:
        row = self.get(point, variant, metric)
        value = row.get("mean") if row else None
        return float(value) if isinstance(value, int | float) else None

    def line_rate(self, point: str) -> float | None:
        for v in self.variants:
            found = self.mean(point, v, "rfc2544_line_rate_fps")
            if found is not None:
                return found
        return None

    def frame_cell(self, point: str) -> Cell:
        return Cell(str(self.frame(point) or point), numeric=False)


def _pct_of_line(row: Row | None, line: float | None) -> Cell:
    """Throughput as % of the line rate: the mean's, or the bound's with its sign."""
    if row is None or not line:
        return Cell("–")
    mean = row.get("mean")
    if isinstance(mean, int | float) and row.get("n"):
        return Cell(f"{mean / line * 100:.1f} %")
    search: Mapping[str, Any] = row.get("search") or {}
    for outcome, sign in (("at_least", "≥"), ("below", "<")):
        bound = search.get(f"{outcome}_bound")
        if search.get(f"{outcome}_n") and isinstance(bound, int | float):
            return Cell(f"{sign} {bound / line * 100:.1f} %")
    return Cell("–")


def throughput_table(workload: str, rows: _Rows) -> ReportTable:
    metric = "rfc2544_throughput_fps"
    columns = ["frame (B)", "line rate (frames/s)"]
    for v in rows.variants:
        columns += [f"{v} (frames/s)", f"{v} % of line"]
        if v != BASELINE:
            columns.append(f"{v} Δ% [CI]")
    columns.append("n")
    body: list[list[Cell]] = []
    for p in rows.points:
        line = rows.line_rate(p)
        cells = [rows.frame_cell(p), Cell(fmt_value(line))]
        counts = []
        for v in rows.variants:
            row = rows.get(p, v, metric)
            cells += [_value_cell(row), _pct_of_line(row, line)]
            if v != BASELINE:
                cells.append(_degradation_cell(row))
            counts.append(_reps(row))
        cells.append(Cell("/".join(counts)))
        body.append(cells)
    notes = [
        "throughput = the highest rate at which every offered frame arrived (RFC 2544 26.1), "
        "found by binary search per repetition; value [interval] = mean of the searches "
        "that found one, its interval widened by their brackets",
        "a search whose line-rate trial lost nothing reads 'at least x'; one whose lowest "
        "rate already lost frames 'not found down to x': no number stands in for either",
        "placed by the rate each trial achieved; 'x achieved (y asked)': the sender fell "
        "short of the rate asked, so the DUT was not offered more",
        "line rate = frames/s of this size on the link's rate, each frame with 20 B of "
        "preamble and inter-frame gap; Δ% = cost against the baseline, positive = worse",
        "n = repetitions: " + "/".join(rows.variants),
    ]
    return ReportTable(
        workload, metric, f"{workload} — RFC 2544 26.1 Throughput", columns, body, notes
    )


def latency_table(workload: str, rows: _Rows) -> ReportTable | None:
    mean_m, p99_m = "rfc2544_latency_mean_us", "rfc2544_latency_p99_us"
    if not any(rows.get(p, v, mean_m) for p in rows.points for v in rows.variants):
        return None
    columns = ["frame (B)"]
    for v in rows.variants:
        columns += [f"{v} rate (frames/s)", f"{v} mean (µs)", f"{v} p99 (µs)", f"{v} lost %"]
        if v != BASELINE:
            columns.append(f"{v} mean Δ% [CI]")
    columns.append("n")
    body: list[list[Cell]] = []
    for p in rows.points:
        cells = [rows.frame_cell(p)]
        counts = []
        for v in rows.variants:
            mean_row = rows.get(p, v, mean_m)
            cells += [
                Cell(fmt_value(rows.mean(p, v, "rfc2544_latency_fps"))),
                _value_cell(mean_row),
                Cell(fmt_value(rows.mean(p, v, p99_m))),
                Cell(fmt_value(rows.mean(p, v, "rfc2544_latency_loss_pct"))),
            ]
            if v != BASELINE:
                cells.append(_degradation_cell(mean_row))
            counts.append(_reps(mean_row))
        cells.append(Cell("/".join(counts)))
        body.append(cells)
    notes = [
        "one-way delay of the latency kind's timestamped probes (kernel software "
        "timestamps, one clock for every host), client to server, sent at the throughput "
        "rate found in the same repetition (RFC 2544 26.2); rate = what its sender "
        "achieved, which may be less than the throughput (then the delay is at that lower "
        "load); lost % = probes that did not arrive",
        "the RFC timestamps one tagged frame in a 120 s stream, 20 times; every probe "
        "here is timestamped (docs/methodology.md says what else differs)",
        "n = repetitions: " + "/".join(rows.variants),
    ]
    return ReportTable(
        workload, mean_m, f"{workload} — RFC 2544 26.2 Latency", columns, body, notes
    )


def loss_table(workload: str, rows: _Rows) -> ReportTable | None:
    metrics = {pct: f"rfc2544_loss_{pct}_pct" for pct in LOSS_STEPS}
    if not any(
        rows.get(p, v, m) for p in rows.points for v in rows.variants for m in metrics.values()
    ):
        return None
    columns = ["frame (B)", "configuration", *(f"{pct} %" for pct in LOSS_STEPS), "n"]
    body: list[list[Cell]] = []
    any_short = False
    for p in rows.points:
        for v in rows.variants:
            cells = [rows.frame_cell(p), Cell(v, numeric=False)]
            n = 0
            for pct, m in metrics.items():
                row = rows.get(p, v, m)
                if row is None or row.get("mean") is None:
                    cells.append(Cell("–"))
                    continue
                n = max(n, int(row.get("n") or 0))
                text = f"{float(row['mean']):.2f}"
                offered = rows.mean(p, v, f"rfc2544_offered_{pct}_pct")
                if offered is not None and offered < pct * SHORT_RATIO:
                    text += f" {SHORT}{offered:.0f}"
                    any_short = True
                cells.append(Cell(text))
            cells.append(Cell(str(n)))
            body.append(cells)
    notes = [
        "frame loss rate = (frames sent − frames received) / frames sent, in %, at each "
        "step of the line rate (RFC 2544 26.3), mean over repetitions",
        "– = not run: as the RFC says, the steps stop after two successive steps without "
        "loss (the lower rates are taken to lose nothing, not measured)",
    ]
    if any_short:
        notes.append(
            f"{SHORT}x: the sender reached only x % of the line rate at that step (its CPU "
            "limit here), so the loss is that of the lower load"
        )
    return ReportTable(
        workload,
        "rfc2544_loss",
        f"{workload} — RFC 2544 26.3 Frame loss rate (%, lower is better)",
        columns,
        body,
        notes,
    )


def back_to_back_table(workload: str, rows: _Rows) -> ReportTable | None:
    metric = "rfc2544_back_to_back_frames"
    if not any(rows.get(p, v, metric) for p in rows.points for v in rows.variants):
        return None
    columns = ["frame (B)"]
    for v in rows.variants:
        columns.append(f"{v} (frames)")
        if v != BASELINE:
            columns.append(f"{v} Δ% [CI]")
    columns.append("n")
    body: list[list[Cell]] = []
    for p in rows.points:
        cells = [rows.frame_cell(p)]
        counts = []
        for v in rows.variants:
            row = rows.get(p, v, metric)
            cells.append(_value_cell(row))
            if v != BASELINE:
                cells.append(_degradation_cell(row))
            counts.append(_reps(row))
        cells.append(Cell("/".join(counts)))
        body.append(cells)
    notes = [
        "the longest burst at line rate that arrived whole (RFC 2544 26.4), by binary "
        "search on the burst length per repetition; 'at least x': the longest burst "
        "tried (burst_max of line rate) lost nothing",
        "placed by the frames each burst really sent; a sender below line rate sends the "
        "burst more slowly (see the throughput table's 'achieved')",
        "n = repetitions: " + "/".join(rows.variants),
    ]
    return ReportTable(
        workload, metric, f"{workload} — RFC 2544 26.4 Back-to-back", columns, body, notes
    )


def tables(workload: str, wrows: Sequence[Row]) -> list[ReportTable]:
    rows = _Rows(wrows)
    out: list[ReportTable | None] = [
        throughput_table(workload, rows)
        if any(r["metric"] == "rfc2544_throughput_fps" for r in wrows)
        else None,
        latency_table(workload, rows),
        loss_table(workload, rows),
        back_to_back_table(workload, rows),
    ]
    return [t for t in out if t is not None]


# -- charts ---------------------------------------------------------------------


def throughput_chart(workload: str, rows: _Rows) -> Chart | None:
    """Throughput against frame size, a line per configuration, and the line rate."""
    metric = "rfc2544_throughput_fps"
    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.add_subplot()
    drawn = False
    values: list[float] = []  # every y drawn, for the axis' scale
    frames_line = [(rows.frame(p), rows.line_rate(p)) for p in rows.points]
    pts = [(f, line) for f, line in frames_line if f is not None and line is not None]
    if pts:
        ax.plot([f for f, _ in pts], [line for _, line in pts], "k--", label="line rate")
        values += [line for _, line in pts]
    for j, v in enumerate(rows.variants):
        color = f"C{j % 10}"
        xs, ys, lo, hi = [], [], [], []
        ups: list[tuple[float, float]] = []
        downs: list[tuple[float, float]] = []
        for p in rows.points:
            row, f = rows.get(p, v, metric), rows.frame(p)
            if row is None or f is None:
                continue
            mean = row.get("mean")
            if isinstance(mean, int | float) and row.get("n"):
                xs.append(float(f))
                ys.append(float(mean))
                low, high = row.get("ci_low"), row.get("ci_high")
                low = low if isinstance(low, int | float) else mean
                high = high if isinstance(high, int | float) else mean
                lo.append(max(float(mean) - float(low), 0.0))
                hi.append(max(float(high) - float(mean), 0.0))
                continue
            search: Mapping[str, Any] = row.get("search") or {}
            for outcome, into in (("at_least", ups), ("below", downs)):
                bound = search.get(f"{outcome}_bound")
                if search.get(f"{outcome}_n") and isinstance(bound, int | float):
                    into.append((float(f), float(bound)))
        values += ys + [m[1] for m in ups + downs]
        label: str | None = v
        if xs:
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=color, label=label)
            label = None
            drawn = True
        for marks, marker in ((ups, "^"), (downs, "v")):
            if marks:
                ax.plot(
                    [m[0] for m in marks],
                    [m[1] for m in marks],
                    linestyle="none",
                    marker=marker,
                    markerfacecolor="none",
                    markersize=9,
                    color=color,
                    label=label,
                )
                label = None
                drawn = True
    if not drawn:
        return None
    ax.plot(
        [],
        [],
        linestyle="none",
        marker="^",
        markerfacecolor="none",
        color="0.4",
        label="no value found: at least (△) / below (▽)",
    )
    ticks = sorted({f for f, _ in pts})
    ax.set_xticks(ticks, [str(t) for t in ticks], rotation=45, ha="right")
    if values and min(values) > 0 and max(values) / min(values) >= 10:
        ax.set_yscale("log")  # frame rates span decades across frame sizes
    else:
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(PlainTicks())
    ax.set_xlabel("frame size (B)")
    ax.set_ylabel("frames/s")
    title = f"{workload}: RFC 2544 throughput against frame size"
    ax.set_title(title, fontsize=10)
    outside_legend(ax, fontsize=8)
    fig.tight_layout()
    return Chart(title, figure_bytes(fig))


def loss_charts(workload: str, rows: _Rows) -> list[Chart]:
    """Frame loss % against the offered % of line rate: a chart per configuration
    (RFC 2544 26.3's graph), a line per frame size; steps not run are not drawn."""
    out: list[Chart] = []
    for v in rows.variants:
        fig = Figure(figsize=(6.4, 3.8))
        ax = fig.add_subplot()
        drawn = False
        for j, p in enumerate(rows.points):
            xy = [
                (pct, m)
                for pct in LOSS_STEPS
                if (m := rows.mean(p, v, f"rfc2544_loss_{pct}_pct")) is not None
            ]
            if not xy:
                continue
            xy.sort()
            ax.plot(
                [x for x, _ in xy],
                [y for _, y in xy],
                marker="o",
                color=f"C{j % 10}",
                label=f"{rows.frame(p)} B",
            )
            drawn = True
        if not drawn:
            continue
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 100)
        ax.yaxis.set_major_formatter(PlainTicks())
        ax.set_xlabel("offered load (% of line rate)")
        ax.set_ylabel("frames lost (%)")
        title = f"{workload}: RFC 2544 frame loss rate, {v}"
        ax.set_title(title, fontsize=10)
        outside_legend(ax, fontsize=8)
        fig.tight_layout()
        out.append(Chart(title, figure_bytes(fig)))
    return out


def charts(workload: str, wrows: Sequence[Row]) -> list[Chart]:
    rows = _Rows(wrows)
    first = throughput_chart(workload, rows)
    return ([first] if first else []) + loss_charts(workload, rows)


def is_rfc2544(wrows: Sequence[Row]) -> bool:
    return any(r.get("kind") == KIND for r in wrows)


def finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)
