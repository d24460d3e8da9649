"""The forest plot keeps the smallest variant readable: a panel per variant and metric
family, each on its own scale, read from the rendered raster (the kept quick run, whose
acl-set costs a few percent beside acl-linear's +567 %)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg

from secperf.report.answer import negligible_pct, verdicts
from secperf.report.forest import _plotted, forest_figure, panels

KEPT = Path(__file__).resolve().parents[2] / "docs" / "runs" / "quick"
RED = np.array([0xB2, 0x18, 0x2B])


def _render() -> tuple[object, np.ndarray, list]:
    summary = json.loads((KEPT / "summary.json").read_text())
    rows = [v for v in verdicts(summary) if _plotted(v)]
    fig = forest_figure(rows, negligible_pct(summary))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    raster = np.asarray(canvas.buffer_rgba())[:, :, :3].astype(int)
    return fig, raster, panels(rows)


def _red_run(raster: np.ndarray, box: object, y_px: float) -> int:
    """The longest run of the interval's red along one pixel row inside the plot area."""
    height = raster.shape[0]
    row = round(height - y_px)
    x0, x1 = int(box.x0) + 1, int(box.x1) - 1  # type: ignore[attr-defined]
    line = np.abs(raster[row, x0:x1] - RED).sum(axis=1) < 60
    best = run = 0
    for hit in line:
        run = run + 1 if hit else 0
        best = max(best, run)
    return best


def test_each_panel_of_the_smallest_variant_shows_its_intervals_and_band() -> None:
    fig, raster, groups = _render()
    plots = [ax for ax in fig.axes if ax.get_title(loc="left")]  # the panels, not their label axes
    assert [ax.get_title(loc="left") for ax in plots] == [title for title, _ in groups]
    assert len(plots) == 4  # acl-linear and acl-set, rates and CPU per unit of work
    for ax, (title, rows) in zip(plots, groups, strict=True):
        box = ax.get_window_extent()
        left, right = ax.get_xlim()
        band = (2 * negligible_pct({}) / (right - left)) * box.width
        for y, v in enumerate(reversed(rows)):
            _, y_px = ax.transData.transform((0, y))
            wide = _red_run(raster, box, y_px)
            if title.startswith("acl-set"):
                # a few percent's interval spans a good part of its own panel
                assert wide >= 0.25 * box.width, (title, v.metric, wide, box.width)
                assert band >= 0.2 * box.width
            else:
                assert wide >= 3, (title, v.metric, wide)  # drawn, if narrow
