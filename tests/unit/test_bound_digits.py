"""An interval's end keeps its sign: "costs +3.8 % [+0.01, +7.6]", never "[0.0, +7.6]",
which would read as an interval that includes no effect beside a verdict that says cost."""

from __future__ import annotations

from secperf.report.answer import COST, Verdict
from secperf.tables import degradation_cell, fmt_bound


def test_a_small_nonzero_end_gets_the_digits_of_its_sign() -> None:
    assert fmt_bound(0.012) == "+0.01" and fmt_bound(-0.0031) == "-0.003"
    assert fmt_bound(0.0) == "0.0" and fmt_bound(3.85) == "+3.9" and fmt_bound(None) == "–"


def test_the_answer_and_the_tables_print_it() -> None:
    v = Verdict("acl", "w", "w#0", "w", "tps", "Rate", COST, 3.8, 0.012, 7.6, 12, 2.0)
    assert v.text == "costs +3.8 % [+0.01, +7.6]"
    row = {"degradation_pct": 3.8, "degradation_ci_low": 0.012, "degradation_ci_high": 7.6}
    assert degradation_cell(row).text.startswith("+3.8 [+0.01, +7.6]")
