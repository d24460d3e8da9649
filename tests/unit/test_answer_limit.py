"""A limit every line of a variant shares is said once, beside the variant."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from secperf.report.answer import answer_tables
from secperf.report.html import _answer_html

KEPT = Path(__file__).resolve().parents[2] / "docs" / "runs" / "quick"


def _kept() -> tuple[dict, dict]:
    return json.loads((KEPT / "summary.json").read_text()), json.loads(
        (KEPT / "run.json").read_text()
    )


def test_a_shared_limit_is_said_once_per_variant() -> None:
    summary, meta = _kept()
    console = Console(record=True, width=200, color_system=None)
    for block in answer_tables(summary, meta):
        console.print(block)
    text = console.export_text()
    variants = {r["variant"] for r in summary["rows"] if r["variant"] != "baseline"}
    assert text.count("limited by one CPU") == len(variants) == 2
    assert text.count("(limited by one CPU: every line)") == 2
    html = "".join(_answer_html(summary, meta))
    assert html.count("limited by one CPU") == 2


def test_limits_that_differ_stay_on_their_lines() -> None:
    summary, meta = _kept()
    rows = summary["rows"]
    first = next(r for r in rows if r["variant"] == "acl-set" and r.get("primary"))
    first["bottleneck"] = {"short": "the link"}
    console = Console(record=True, width=200, color_system=None)
    for block in answer_tables(summary, meta):
        console.print(block)
    text = console.export_text()
    assert "limited by the link" in text and "every line)" in text  # acl-linear still shares one
    assert text.count("limited by one CPU") > 2  # acl-set's lines each say theirs
