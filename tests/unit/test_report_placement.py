"""What the placement means for the numbers is in the report's header, before the answer."""

from __future__ import annotations

import json
from pathlib import Path

from secperf.report.html import render_html

KEPT = Path(__file__).resolve().parents[2] / "docs" / "runs" / "quick"


def test_the_placement_line_comes_before_the_answer() -> None:
    summary = json.loads((KEPT / "summary.json").read_text())
    meta = json.loads((KEPT / "run.json").read_text())
    html = render_html(summary, meta)
    at = html.index('<p class="note placement">placement: one')
    assert (
        "not the path&#x27;s capacity" in html[at : at + 600] or "capacity" in html[at : at + 600]
    )
    assert at < html.index('id="answer"')
    assert html.count("placement: one") == 1  # not repeated in the header below
