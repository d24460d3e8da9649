"""The precision plan in the answer: the forecast said again beside what the run
reached (terminal, HTML, JSON), a missed target's line in the JSON, and the forecast
checked against a kept run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from secperf.report.answer import precision_line
from secperf.report.html import _answer_html
from secperf.report.terminal import print_report
from secperf.results.shortfall import planned_precision, shortfall
from secperf.run.noise import NoiseModel

KEPT = Path(__file__).resolve().parents[2] / "docs" / "runs" / "quick" / "summary.json"

PRECISION = {
    "calibrate": "fresh",
    "forecast": {
        "target_pp": 2.0,
        "budget_s": 180.0,
        "needs_s": 660.0,
        "budget_pp": 5.0,
        "rounds": {"tcp-rr#0": 12},
        "text": "±2 points needs about 11 min here; the 3 min budget gives about ±5",
    },
    "points": [
        {
            "point_id": "tcp-rr#0",
            "duration": 5.0,
            "pinned": False,
            "why": "5 s: mostly fast noise (longer tests average it)",
            "source": "measured",
        }
    ],
}


def _row(**kw: Any) -> dict[str, Any]:
    return {
        "workload": "tcp-rr",
        "point_id": "tcp-rr#0",
        "label": "",
        "kind": "rr",
        "metric": "tps",
        "metric_label": "Transaction rate",
        "unit": "trans/s",
        "primary": True,
        "higher_is_better": True,
        **kw,
    }


def test_the_answer_says_the_forecast_again_beside_what_was_reached() -> None:
    rows = [
        _row(variant="baseline", n=12, mean=1000.0, ci_low=990.0, ci_high=1010.0),
        _row(
            variant="acl",
            n=12,
            mean=900.0,
            degradation_pct=10.0,
            degradation_ci_low=4.7,
            degradation_ci_high=15.3,
            degradation_halfwidth_pp=5.3,
            degradation_n=12,
            stop_reason="budget_spent",
            stop_reps=12,
            stop_rounds_s=120.0,
        ),
    ]
    back = planned_precision(PRECISION, rows)
    assert back is not None and back["reached_pp"] == pytest.approx(5.3)
    said = (
        "planned before the run: ±2 points needs about 11 min here; the 3 min budget gives "
        "about ±5; reached ±5.3"
    )
    assert back["text"] == said
    summary = {"rows": rows, "degradation_target_pp": 2.0, "precision": back}
    line = precision_line(summary)
    assert line is not None and said in line and "tcp-rr#0 5 s: mostly fast noise" in line
    console = Console(record=True, width=400, color_system=None)
    print_report(console, summary, {}, details=False, header=False)
    text = console.export_text()
    assert said in text
    short = (
        "target ±2 not met: ±5.3 after 12 rounds (budget spent); about 12 min more would reach it"
    )
    assert short in text
    html = "".join(_answer_html(summary, {}))
    assert said in html and short in html
    # the JSON: the summary's own fields
    assert json.loads(json.dumps(summary))["precision"]["reached_pp"] == pytest.approx(5.3)
    missed = shortfall(rows[1], 2.0)
    assert missed is not None and missed["text"] == short
    assert planned_precision(None, rows) is None
    assert precision_line({"rows": rows}) is None


def test_the_forecast_is_within_half_again_of_a_kept_runs_half_widths() -> None:
    """docs/runs/quick (a run kept before the calibration existed): each point's
    baseline spread over its rounds stands in for the calibration (rounds minutes
    apart: no correlation, D = 2 cv²), the half width it predicts at the rounds the
    point ran (its cost known: on the ratio scale it narrows the interval) is within
    ×1.5 of the one each degradation reached."""
    summary = json.loads(KEPT.read_text())
    rows = [r for r in summary["rows"] if r["primary"]]
    base = {r["point_id"]: r for r in rows if r["variant"] == "baseline"}
    checked = 0
    for r in rows:
        if r["variant"] == "baseline" or not r.get("degradation_halfwidth_pp"):
            continue
        b = base[r["point_id"]]
        cv = b["stddev"] / b["mean"]
        model = NoiseModel(fast=0.0, floor=2 * cv**2, overhead_s=0.0)
        ratio = 1 - r["degradation_pct"] / 100
        n = int(r["degradation_n"])
        predicted = model.halfwidth_pp(1.0, n, summary["confidence"], ratio=ratio)
        achieved = r["degradation_halfwidth_pp"]
        assert 1 / 1.5 <= predicted / achieved <= 1.5, (r["point_id"], r["variant"])
        checked += 1
    assert checked == 6
