"""Δ is defined one way for every ratio-scale row, service demand as the rates: the
geometric mean of the paired rounds' ratios; the answer and the table print that one
figure, and the table's notes say what it is (it is not the ratio of the two means)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from secperf import stats
from secperf.report.answer import verdicts
from secperf.report.terminal import run_tables
from secperf.tables import fmt_pct

ROOT = Path(__file__).resolve().parents[2]
QUICK_SUMMARY = ROOT / "docs" / "runs" / "quick" / "summary.json"


def test_a_service_demands_delta_is_the_paired_rounds_geometric_mean_ratio() -> None:
    base, variant = [10.0, 20.0, 30.0], [30.0, 40.0, 120.0]  # ratios 3, 2, 4
    d = stats.degradation(base, variant, higher_is_better=False, confidence=0.95, ratio=True)
    assert d.mean == pytest.approx((24 ** (1 / 3) - 1) * 100)  # +188.4 %
    means = (sum(variant) / 3) / (sum(base) / 3) - 1
    assert abs(d.mean - means * 100) > 20  # the means' ratio (+216.7 %) is another figure


def test_the_answer_and_the_table_print_one_delta_and_the_table_defines_it() -> None:
    summary = json.loads(QUICK_SUMMARY.read_text())
    rows = [
        r for r in summary["rows"] if r["metric"].startswith("sd_") and r["variant"] != "baseline"
    ]
    assert rows
    said = {(v.workload, v.variant, v.metric): v.pct for v in verdicts(summary) if v.pct}
    tables = {t.metric: t for t in run_tables(summary, {})}
    for r in rows:
        assert said[(r["workload"], r["variant"], r["metric"])] == r["degradation_pct"]
        table = tables[r["metric"]]
        cells = [c.text for line in table.rows for c in line]
        assert any(c.startswith(fmt_pct(r["degradation_pct"])) for c in cells), cells
        assert stats.delta_definition(True) in table.footnotes
        assert not math.isclose(r["degradation_pct"], (r["mean"] / r["baseline_mean"] - 1) * 100)
