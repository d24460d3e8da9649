"""RFC 2544's report layout, as the RFC lays it out (section 26): a row per frame size.

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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import secperf.workloads.rfc2544.metrics as m
from secperf.tables import (
    BASELINE,
    Cell,
    Chart,
    Drawing,
    ReportLayout,
    ReportTable,
    Row,
    degradation_cell,
    fmt_value,
    reps,
    value_cell,
)
from secperf.workloads.rfc2544.logic import LOSS_STEPS_PCT

SHORT = "‡"  # the sender reached less than SHORT_RATIO of the step's rate
SHORT_RATIO = 0.98


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
            found = self.mean(point, v, m.LINE_RATE.name)
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


def _by_frame(
    rows: _Rows,
    metric: str,
    lead: Sequence[str],
    lead_cells: Callable[[str], list[Cell]],
    heads: Sequence[str],
    cells: Callable[[str, str, Row | None], list[Cell]],
    delta: str = "Δ% [CI]",
) -> tuple[list[str], list[list[Cell]]]:
    """The columns and rows of a table with a row per frame size: the `lead` columns,
    then per configuration its `heads` ("{v}" is its name) and, beside the baseline's,
    its degradation of `metric`; last the repetitions of `metric` per configuration."""
    columns = list(lead)
    for v in rows.variants:
        columns += [head.format(v=v) for head in heads]
        if v != BASELINE:
            columns.append(f"{v} {delta}")
    columns.append("n")
    body: list[list[Cell]] = []
    for p in rows.points:
        line = lead_cells(p)
        counts = []
        for v in rows.variants:
            row = rows.get(p, v, metric)
            line += cells(p, v, row)
            if v != BASELINE:
                line.append(degradation_cell(row))
            counts.append(reps(row))
        line.append(Cell("/".join(counts)))
        body.append(line)
    return columns, body


def throughput_table(workload: str, rows: _Rows) -> ReportTable:
    metric = m.THROUGHPUT.name
    words = m.THROUGHPUT.censored_words
    columns, body = _by_frame(
        rows,
        metric,
        ["frame (B)", "line rate (frames/s)"],
        lambda p: [rows.frame_cell(p), Cell(fmt_value(rows.line_rate(p)))],
        ["{v} (frames/s)", "{v} % of line"],
        lambda p, _v, row: [value_cell(row, words), _pct_of_line(row, rows.line_rate(p))],
    )
    notes = [
        "throughput = the highest rate at which every offered frame arrived (RFC 2544 26.1), "
        "found per repetition by MLRsearch (RFC 9971's relevant lower bound: at most "
        'goal_exceed_ratio of its trial seconds lost a frame) or, with search = "bisect", '
        "by binary search; value [interval] = mean of the searches that found one, its "
        "interval widened by their brackets",
        "a search whose line rate lost nothing reads 'at least x'; one whose lowest "
        "rate already lost frames 'not found down to x': no number stands in for either",
        "MLRsearch places a trial by the rate asked (one whose sender reached < 95 % of it "
        "failed); the bisection by the rate it achieved ('x achieved (y asked)': the sender "
        "fell short of the rate asked, so the DUT was not offered more)",
        "line rate = frames/s of this size on the link's rate, each frame with 20 B of "
        "preamble and inter-frame gap; Δ% = cost against the baseline, positive = worse",
        "n = repetitions: " + "/".join(rows.variants),
    ]
    return ReportTable(
        workload, metric, f"{workload} — RFC 2544 26.1 Throughput", columns, body, notes
    )


def latency_table(workload: str, rows: _Rows) -> ReportTable | None:
    mean_m, p99_m = m.LAT_MEAN.name, m.LAT_P99.name
    if not any(rows.get(p, v, mean_m) for p in rows.points for v in rows.variants):
        return None
    columns, body = _by_frame(
        rows,
        mean_m,
        ["frame (B)"],
        lambda p: [rows.frame_cell(p)],
        ["{v} rate (frames/s)", "{v} mean (µs)", "{v} p99 (µs)", "{v} lost %"],
        lambda p, v, row: [
            Cell(fmt_value(rows.mean(p, v, m.LAT_RATE.name))),
            value_cell(row),
            Cell(fmt_value(rows.mean(p, v, p99_m))),
            Cell(fmt_value(rows.mean(p, v, m.LAT_LOSS.name))),
        ],
        delta="mean Δ% [CI]",
    )
    notes = [
        "one-way delay of the latency kind's timestamped probes (kernel software "
        "timestamps, one clock for every host), client to server, sent at the throughput "
        "rate found in the same repetition (RFC 2544 26.2); rate = what its sender "
        "achieved, which may be less than the throughput (then the delay is at that lower "
        "load); lost % = probes that did not arrive",
        "the RFC timestamps one tagged frame in a 120 s stream, 20 times; every probe "
        "here is timestamped (docs/studies/rfc.md says what else differs)",
        "– = not measured: the run's errors (above the tables) say why",
        "n = repetitions: " + "/".join(rows.variants),
    ]
    return ReportTable(
        workload, mean_m, f"{workload} — RFC 2544 26.2 Latency", columns, body, notes
    )


def loss_table(workload: str, rows: _Rows) -> ReportTable | None:
    metrics = {pct: metric.name for pct, metric in m.LOSS.items()}
    if not any(
        rows.get(p, v, name)
        for p in rows.points
        for v in rows.variants
        for name in metrics.values()
    ):
        return None
    columns = ["frame (B)", "configuration", *(f"{pct} %" for pct in LOSS_STEPS_PCT), "n"]
    body: list[list[Cell]] = []
    any_short = False
    for p in rows.points:
        for v in rows.variants:
            cells = [rows.frame_cell(p), Cell(v, numeric=False)]
            n = 0
            for pct, name in metrics.items():
                row = rows.get(p, v, name)
                if row is None or row.get("mean") is None:
                    cells.append(Cell("–"))
                    continue
                n = max(n, int(row.get("n") or 0))
                text = f"{float(row['mean']):.2f}"
                offered = rows.mean(p, v, m.LOSS_OFFERED[pct].name)
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
    metric = m.BACK_TO_BACK.name
    if not any(rows.get(p, v, metric) for p in rows.points for v in rows.variants):
        return None
    words = m.BACK_TO_BACK.censored_words
    columns, body = _by_frame(
        rows,
        metric,
        ["frame (B)"],
        lambda p: [rows.frame_cell(p)],
        ["{v} (frames)"],
        lambda _p, _v, row: [value_cell(row, words)],
    )
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
        if any(r["metric"] == m.THROUGHPUT.name for r in wrows)
        else None,
        latency_table(workload, rows),
        loss_table(workload, rows),
        back_to_back_table(workload, rows),
    ]
    return [t for t in out if t is not None]


# -- charts ---------------------------------------------------------------------


def throughput_chart(workload: str, rows: _Rows, draw: Drawing) -> Chart | None:
    """Throughput against frame size, a line per configuration, and the line rate."""
    metric = m.THROUGHPUT.name
    fig = draw.figure(6.4, 3.8)
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
        values += ys + [mark[1] for mark in ups + downs]
        label: str | None = v
        if xs:
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=color, label=label)
            label = None
            drawn = True
        for marks, marker in ((ups, "^"), (downs, "v")):
            if marks:
                draw.bound_marks(ax, marks, marker, color, label)
                label = None
                drawn = True
    if not drawn:
        return None
    draw.bound_key(ax, "no value found: at least (△) / below (▽)")
    ticks = sorted({f for f, _ in pts})
    ax.set_xticks(ticks, [str(t) for t in ticks], rotation=45, ha="right")
    if values and min(values) > 0 and max(values) / min(values) >= 10:
        ax.set_yscale("log")  # frame rates span decades across frame sizes
    else:
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(draw.plain_ticks())
    ax.set_xlabel("frame size (B)")
    ax.set_ylabel("frames/s")
    title = f"{workload}: RFC 2544 throughput against frame size"
    ax.set_title(title, fontsize=10)
    draw.legend(ax, fontsize=8)
    fig.tight_layout()
    return Chart(title, draw.image(fig))


def loss_charts(workload: str, rows: _Rows, draw: Drawing) -> list[Chart]:
    """Frame loss % against the offered % of line rate: a chart per configuration
    (RFC 2544 26.3's graph), a line per frame size; steps not run are not drawn."""
    out: list[Chart] = []
    for v in rows.variants:
        fig = draw.figure(6.4, 3.8)
        ax = fig.add_subplot()
        drawn = False
        for j, p in enumerate(rows.points):
            xy = [
                (pct, mean)
                for pct, metric in m.LOSS.items()
                if (mean := rows.mean(p, v, metric.name)) is not None
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
        ax.yaxis.set_major_formatter(draw.plain_ticks())
        ax.set_xlabel("offered load (% of line rate)")
        ax.set_ylabel("frames lost (%)")
        title = f"{workload}: RFC 2544 frame loss rate, {v}"
        ax.set_title(title, fontsize=10)
        draw.legend(ax, fontsize=8)
        fig.tight_layout()
        out.append(Chart(title, draw.image(fig)))
    return out


def charts(workload: str, wrows: Sequence[Row], draw: Drawing) -> list[Chart]:
    rows = _Rows(wrows)
    first = throughput_chart(workload, rows, draw)
    return ([first] if first else []) + loss_charts(workload, rows, draw)


LAYOUT = ReportLayout(tables=tables, charts=charts)
