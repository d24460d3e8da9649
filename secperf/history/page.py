"""The trend page of `secperf history --html`: one self-contained HTML file with a chart
per series (each run's degradation and its interval as an error bar, change points as a
red line with the step's size, machine fingerprint changes as a grey dotted line), drawn
by matplotlib as secperf.report.plots draws a run's charts."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

from secperf.history.changes import Series, machine_text
from secperf.history.store import HistoryError
from secperf.report.plots import figure_bytes, new_figure


def chart(s: Series) -> bytes:
    """The series' trend chart (SVG, or PNG where smaller)."""
    fig = new_figure(9.0, 3.2)
    ax = fig.add_subplot(1, 1, 1)
    xs = list(range(len(s.points)))
    for other in (False, True):
        pick = [i for i in xs if s.points[i].other_machine == other]
        if not pick:
            continue
        ax.errorbar(
            pick,
            [s.points[i].mean for i in pick],
            yerr=[
                [s.points[i].mean - s.points[i].low for i in pick],
                [s.points[i].high - s.points[i].mean for i in pick],
            ],
            fmt="o" if not other else "s",
            color="tab:blue" if not other else "tab:gray",
            capsize=3,
            markersize=4,
            label="another machine" if other else "this machine",
        )
    ax.axhline(0.0, color="black", linewidth=0.6)
    for i in s.machine_changes():
        ax.axvline(i - 0.5, color="tab:gray", linestyle=":", linewidth=1.2)
        ax.annotate(
            "machine", (i - 0.5, 1.0), xycoords=("data", "axes fraction"), fontsize=7,
            color="tab:gray", ha="right", va="top", rotation=90,
        )  # fmt: skip
    for st in s.steps:
        ax.axvline(st.index - 0.5, color="tab:red", linewidth=1.2)
        ax.annotate(
            f"step {st.size:+.1f} [{st.low:+.1f}, {st.high:+.1f}]",
            (st.index - 0.5, 0.02), xycoords=("data", "axes fraction"), fontsize=7,
            color="tab:red", ha="left", va="bottom",
        )  # fmt: skip
    ax.set_xticks(xs)
    ax.set_xticklabels([p.started[:16].replace("T", "\n") for p in s.points], fontsize=6)
    ax.set_ylabel("degradation, %")
    ax.set_title(s.title, fontsize=9)
    if any(p.other_machine for p in s.points):
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    data = figure_bytes(fig)
    return data


def _embed(data: bytes, alt: str) -> str:
    if data.lstrip().startswith((b"<?xml", b"<svg")):
        text = data.decode()
        return text[text.index("<svg") :]
    uri = "data:image/png;base64," + base64.b64encode(data).decode()
    return f'<img alt="{html.escape(alt)}" src="{uri}">'


def page(scenario: str, series: Sequence[Series]) -> str:
    parts = [
        '<!doctype html><html><head><meta charset="utf-8">',
        f"<title>secperf history: {html.escape(scenario)}</title>",
        "<style>body{font-family:sans-serif;margin:1em 2em}figure{margin:1em 0}"
        "li{font-size:90%}</style></head><body>",
        f"<h1>History of {html.escape(scenario)}</h1>",
        "<p>Each run's paired degradation with its interval; a red line marks a change "
        "point (the step's size and interval), a grey dotted line a change of machine.</p>",
    ]
    if not series:
        parts.append("<p>No run of this scenario has a paired degradation in the store.</p>")
    for n, s in enumerate(series):
        parts.append(f'<figure class="trend" id="trend-{n}">{_embed(chart(s), s.title)}')
        notes = [
            f"change point at {html.escape(st.point.who())}: {st.size:+.1f} points "
            f"[{st.low:+.1f}, {st.high:+.1f}], {st.before:+.1f} % → {st.after:+.1f} %"
            for st in s.steps
        ] + [
            f"machine change at {html.escape(s.points[i].who())}: "
            f"{html.escape(machine_text(s.points[i].fingerprint))}"
            for i in s.machine_changes()
        ]
        caption = "".join(f"<li>{t}</li>" for t in notes)
        parts.append(
            f"<figcaption>{html.escape(s.title)}"
            + (f"<ul>{caption}</ul>" if caption else "")
            + "</figcaption></figure>"
        )
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_page(path: Path, scenario: str, series: Sequence[Series]) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page(scenario, series), encoding="utf-8")
    except OSError as exc:
        raise HistoryError(
            f"cannot write the page: {exc.strerror or exc}",
            where=str(path),
            fix="give --html a path you may write",
        ) from None
    return path
