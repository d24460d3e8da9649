"""Searches that found nothing, and charts of variants swept over a rule count."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

import pytest

from secperf.report import plots
from secperf.report.html import write_html
from secperf.report.terminal import build_tables
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary

RULES = (1, 8, 64)
SWEEPS = {f"acl[rules={n}]": {"family": "acl", "rules": n} for n in RULES}


def search(rate: int | None, hi: int = 200_000, reached: int = 149_000) -> dict[str, Any]:
    """A min_flood_rate result: denied from `rate` up (not denied at 0.8 × it), or (None)
    never denied, the flood at `hi` having reached only `reached` packets/s."""
    if rate is None:
        bracket: dict[str, Any] = {
            "outcome": "at_least",
            "bound": reached,
            "passed_at": {"asked": hi, "achieved": reached},
        }
    else:
        bracket = {"outcome": "found", "value": rate, "interval": [0.8 * rate, rate]}
    return {
        "type": "result",
        "kind": "min_flood_rate",
        "search": {**bracket, "measure": "achieved", "reports": "failed", "range": [5000, hi]},
    }


def flood_run(root: Path) -> RunDir:
    """Baseline never denied; acl[rules=1] denied in one rep of two; the rest found."""
    run = RunDir.create(root, "mf")
    run.write_run_json({"scenario": {"name": "mf"}, "variant_sweeps": SWEEPS})
    for workload in ("min-flood-allowed", "min-flood-denied"):
        for rep in range(2):
            tags = {"workload": workload, "point_id": f"{workload}#0", "label": "", "rep": rep}
            run.append_record({**tags, "variant": "baseline"}, search(None))
            for n in RULES:
                rate = None if (n == 1 and rep == 1) else 100_000 // n + rep
                run.append_record({**tags, "variant": f"acl[rules={n}]"}, search(rate))
    return run


def test_a_search_that_found_nothing_is_reported_as_such(tmp_path: Path) -> None:
    summary = build_summary(flood_run(tmp_path))
    rows = {(r["workload"], r["variant"]): r for r in summary["rows"]}
    base = rows[("min-flood-allowed", "baseline")]
    assert base["n"] == 0 and base["mean"] is None
    assert base["censored_n"] == 2 and base["search"]["at_least_bound"] == 149_000
    assert base["search"]["at_least_asked"] == 200_000
    one = rows[("min-flood-allowed", "acl[rules=1]")]
    assert one["n"] == 1 and one["censored_n"] == 1 and one["mean"] == 100_000
    assert rows[("min-flood-allowed", "acl[rules=8]")]["censored_n"] == 0

    table = next(t for t in build_tables(summary) if t.workload == "min-flood-allowed")
    cells = [c.text for c in table.rows[0]]
    # the bound is the rate the flood reached, the asked one beside it
    assert cells[1] == "not denied up to 149,000 achieved (200,000 asked)"
    assert cells[2] == (
        "100,000 [80,000–100,000] (1 of 2: not denied up to 149,000 achieved (200,000 asked))"
    )
    assert cells[-1] == "2/2/2/2"  # repetitions run, the fruitless searches included
    assert any("placed by the flood rate achieved" in n for n in table.footnotes)


def test_points_sharing_a_metric_share_a_line_per_family_with_the_baseline_dashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[tuple[str, str, list[Any], list[tuple[str, float]]]] = []

    def fake(title: str, unit: str, parameter: str, rows: Any, references: Any = ()) -> bytes:
        drawn.append((title, parameter, list(rows), list(references)))
        return b"png"

    monkeypatch.setattr(plots, "sweep_chart", fake)
    summary = build_summary(flood_run(tmp_path))
    charts = plots.variant_sweep_charts(summary, SWEEPS)
    assert [c.title for c in charts] == ["Minimum flood rate that denies against rules"]
    _title, parameter, rows, references = drawn[0]
    assert parameter == "rules"
    lines = {r["variant"] for r in rows}
    assert lines == {"acl · min-flood-allowed", "acl · min-flood-denied"}
    assert sorted(
        r["point"]["rules"] for r in rows if r["variant"] == "acl · min-flood-denied"
    ) == [
        1,
        8,
        64,
    ]
    bound = "none found up to here"
    assert references == [
        (f"baseline · min-flood-allowed: {bound}", 149_000.0),
        (f"baseline · min-flood-denied: {bound}", 149_000.0),
    ]
    # both baselines found nothing up to the same bound: one dashed line, both named
    assert plots._merge_references(references) == [
        ("baseline · min-flood-allowed & min-flood-denied: none found up to here", 149_000.0)
    ]


def test_a_measured_baseline_is_a_reference_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(
        plots, "sweep_chart", lambda *a, **k: seen.append(a[4] if len(a) > 4 else k) or b""
    )
    run = RunDir.create(tmp_path, "lat")
    run.write_run_json({"scenario": {"name": "lat"}, "variant_sweeps": SWEEPS})
    for rep, delay in enumerate((30.0, 32.0)):
        tags = {"workload": "delay", "point_id": "delay#0", "label": "", "rep": rep}
        for variant, extra in (
            ("baseline", 0.0),
            *((v, n * 1.0) for v, n in zip(SWEEPS, RULES, strict=True)),
        ):
            stats = {"count": 100, "mean": delay + extra, "stddev": 1.0, "p99": delay + 5}
            record = {"type": "result", "kind": "latency", "latency_us": stats}
            run.append_record({**tags, "variant": variant}, record)
    charts = plots.variant_sweep_charts(build_summary(run), SWEEPS)
    assert [c.title for c in charts] == ["delay: One-way delay mean against rules"]
    assert seen == [[("baseline", 31.0)]]


def test_a_real_png_with_found_and_not_found_points(tmp_path: Path) -> None:
    summary = build_summary(flood_run(tmp_path))
    (chart,) = plots.variant_sweep_charts(summary, SWEEPS)
    assert chart.image[:8] == b"\x89PNG\r\n\x1a\n" or b"<svg" in chart.image[:400]
    bars = plots.charts(summary)
    assert all(c.mime in ("image/png", "image/svg+xml") for c in bars) and len(bars) == 2


def test_swept_variants_come_out_by_family_and_swept_value(tmp_path: Path) -> None:
    """seed004-rule-sweep's tables listed set[rules=100], linear[rules=10], … in the
    order a shuffled first round met them; the growth with the rule count is the point."""
    counts = (1, 10, 100, 1000)
    sweeps = {
        f"{family}[rules={n}]": {"family": family, "rules": n}
        for family in ("linear", "set")
        for n in counts
    }
    run = RunDir.create(tmp_path, "sweep")
    run.write_run_json(
        {
            "scenario": {"name": "sweep", "variants": {"linear": {}, "set": {}}},
            "variant_sweeps": sweeps,
        }
    )
    shuffled = ["set[rules=100]", "linear[rules=10]", "baseline", "linear[rules=1000]",
                "set[rules=10]", "linear[rules=1]", "set[rules=1000]", "set[rules=1]",
                "linear[rules=100]"]  # fmt: skip
    for rep in range(2):
        for variant in shuffled:
            tags = {"workload": "delay", "point_id": "delay#0", "label": "", "rep": rep}
            delay = 30.0 + rep + (sweeps[variant]["rules"] / 100 if variant in sweeps else 0)
            record = {
                "type": "result",
                "kind": "latency",
                "latency_us": {"count": 9, "mean": delay},
            }
            run.append_record({**tags, "variant": variant}, record)
    summary = build_summary(run)
    expected = [f"linear[rules={n}]" for n in counts] + [f"set[rules={n}]" for n in counts]
    order = list(dict.fromkeys(r["variant"] for r in summary["rows"]))
    assert order == ["baseline", *expected]
    table = next(t for t in build_tables(summary) if t.workload == "delay")
    assert [c for c in table.columns if "[" in c and "Δ%" not in c] == expected
    # and the report draws the line against the swept value beside that table
    html = write_html(run).read_text()
    start = html.index(f"<h3>{escape(table.title)}</h3>")
    beside = html.index("One-way delay mean against rules", start)
    after = [i for i in (html.find("<h3>", start + 1), html.find("<h2", start + 1)) if i > 0]
    assert beside < min(after)


def test_an_older_summary_is_reported_in_sweep_order_too() -> None:
    """A summary.json written before swept variants were ordered: the report orders them."""
    from rich.console import Console

    from secperf.report.terminal import print_report

    sweeps = {f"acl[rules={n}]": {"family": "acl", "rules": n} for n in (1, 10, 100)}
    base = {"workload": "w", "point_id": "w#0", "label": "", "metric": "tps", "primary": True}
    rows = [
        {**base, "variant": v, "degradation_pct": 5.0, "degradation_ci_low": 4.0,
         "degradation_ci_high": 6.0}
        for v in ("baseline", "acl[rules=100]", "acl[rules=1]", "acl[rules=10]")
    ]  # fmt: skip
    meta = {"scenario": {"variants": {"acl": {}}}, "variant_sweeps": sweeps}
    console = Console(record=True, width=120, color_system=None)
    print_report(console, {"rows": rows}, meta, details=False, header=False)
    text = console.export_text()
    assert text.index("acl[rules=1]") < text.index("acl[rules=10]") < text.index("acl[rules=100]")
