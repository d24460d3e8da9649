"""The answer first: verdicts by the stated rule, the forest plot, and a terminal
summary that fits one screen (issue 26)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from secperf.cli import app
from secperf.report.answer import (
    BETTER,
    COST,
    NONE,
    UNMEASURED,
    UNRESOLVED,
    judge,
    rule_text,
    verdicts,
)
from secperf.report.forest import forest_charts
from secperf.report.html import _answer_html, write_html
from secperf.report.terminal import common_notes, print_report
from secperf.results.bracketed import censored_bound
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.scenario.loader import load_scenario
from secperf.tables import ReportTable, degradation_cell

ROOT = Path(__file__).resolve().parents[2]
DATA_RUN = ROOT / "tests" / "data" / "runs" / "20261122T010203Z-quick"
QUICK_SUMMARY = ROOT / "docs" / "runs" / "quick" / "summary.json"


def row(pct: float | None, lo: float | None = None, hi: float | None = None, **more: Any) -> dict:
    return {
        "degradation_pct": pct,
        "degradation_ci_low": lo,
        "degradation_ci_high": hi,
        "n": 5,
        **more,
    }


@pytest.mark.parametrize(
    ("r", "outcome"),
    [
        (row(25.0, 24.0, 26.0), COST),  # the interval excludes 0: a cost
        (row(-5.0, -7.0, -3.0), BETTER),
        (row(0.5, -1.5, 2.5), NONE),  # holds 0, within ±5
        (row(0.5, -1.5, 5.0), UNRESOLVED),  # holds 0, reaches the bound: not "none"
        (row(-10.0, -60.0, 40.0), UNRESOLVED),
        (row(3.0), UNMEASURED),  # one pair: no interval, no verdict
        (row(None), UNMEASURED),
        (row(None, censored_n=2, n=0), UNMEASURED),
    ],
)
def test_the_verdict_rule(r: dict, outcome: str) -> None:
    assert judge(r, 5.0)[0] == outcome


def test_a_verdict_line_per_variant_and_headline_metric(tmp_path: Path) -> None:
    summary = build_summary(RunDir.open(shutil.copytree(DATA_RUN, tmp_path / "run")))
    found = {(v.variant, v.where, v.metric): v for v in verdicts(summary)}
    # headline metrics only: the primary one and service demand, never latency
    assert {m for _, _, m in found} == {"tps", "sd_cpu_us_per_tx", "throughput", "sd_cpu_us_per_kb"}
    assert not any(v == "baseline" for v, _, _ in found)
    rr = "tcp-rr request=1 response=1"  # the synthetic run labels its one point
    linear = found[("acl-linear", rr, "tps")]
    assert linear.outcome == COST and linear.text.startswith("costs +25.0 % [+2")
    # acl-set's rr is within 1 % of the baseline, its interval narrower than ±2 %
    assert found[("acl-set", rr, "tps")].outcome == NONE
    assert "no measurable cost (|Δ| < 2 %)" in found[("acl-set", rr, "tps")].text
    # a swept workload names its point
    assert ("acl-linear", "tcp-stream message=16KiB", "throughput") in found
    # the scattered 128 KiB point of acl-set cannot say either
    assert found[("acl-set", "tcp-stream message=128KiB", "throughput")].outcome == UNRESOLVED


def test_a_row_that_names_its_bottleneck_says_so_and_one_without_says_nothing() -> None:
    base = {"workload": "w", "point_id": "w#0", "label": "", "metric": "tps", "primary": True}
    rows = [
        {**base, **row(25.0, 24.0, 26.0), "variant": "a", "bottleneck": "dut CPU"},
        {**base, **row(25.0, 24.0, 26.0), "variant": "b"},
    ]
    summary = {"rows": rows, "halfwidth_target_pct": 2.0}
    a, b = verdicts(summary)
    assert a.limited_by == "limited by dut CPU" and b.limited_by == ""
    console = Console(record=True, width=150, color_system=None)
    print_report(console, summary, {}, details=False, header=False)
    text = console.export_text()
    assert text.count("limited by") == 1 and "limited by dut CPU" in text


def test_the_summarys_bottleneck_record_is_named_short_flagged_or_said_unmeasured() -> None:
    base = {"workload": "w", "point_id": "w#0", "label": "", "metric": "tps", "primary": True}
    one_cpu = {"kind": "one_cpu", "short": "one CPU", "text": "the one CPU: client 60 %"}
    link = {"kind": "link", "short": "link c-d", "text": "link c-d (20 Mbit/s) at 99 %"}
    unmeasured = {"kind": "not_measured", "short": "not measured", "text": "not measured: …"}
    rows = [
        {**base, **row(25.0, 24.0, 26.0), "variant": "a", "bottleneck": one_cpu},
        {**base, **row(1.0, -1.0, 3.0), "variant": "b", "bottleneck": link, "comparison": "x"},
        {**base, **row(25.0, 24.0, 26.0), "variant": "c", "bottleneck": unmeasured},
    ]
    summary = {"rows": rows, "halfwidth_target_pct": 2.0}
    a, b, c = verdicts(summary)
    assert a.limited_by == "limited by one CPU"
    assert b.limited_by == "limited by link c-d ‼"
    assert c.limited_by == "limit not measured"
    assert "‼ = the baseline and the variant hit the same limit" in rule_text(summary)
    assert "‼" not in rule_text({"rows": rows[:1]})


def test_the_forest_plot_has_every_variant_and_metric(tmp_path: Path) -> None:
    summary = build_summary(RunDir.open(shutil.copytree(DATA_RUN, tmp_path / "run")))
    (chart,) = forest_charts(summary)
    svg = chart.image.decode()
    assert "<svg" in svg and "acl-linear" in svg and "acl-set" in svg
    assert svg.count("Transaction rate") == 2 and svg.count("Service demand") == 6
    assert "+25.0" in svg  # the numbers beside the plot


def quick_meta() -> dict[str, Any]:
    scenario = load_scenario(ROOT / "scenarios" / "quick.toml")
    return {
        "scenario": scenario.to_json_dict(),
        "status": "complete",
        "started": "2026-11-23T20:27:46+00:00",
        "finished": "2026-11-23T20:29:51+00:00",
        "host": {"kernel": "6.18.44", "cpus": 2, "cpu_model": "AMD EPYC"},
    }


def quick_summary() -> dict[str, Any]:
    """quick.toml's kept summary (three workloads, two variants)."""
    if not QUICK_SUMMARY.is_file():
        pytest.fail(f"{QUICK_SUMMARY} is gone: keep quick.toml's summary in docs/runs/quick")
    summary: dict[str, Any] = json.loads(QUICK_SUMMARY.read_text())
    return summary


def test_quick_summary_fits_one_screen() -> None:
    console = Console(record=True, width=150, color_system=None)
    print_report(console, quick_summary(), quick_meta(), details=False)
    lines = console.export_text().rstrip("\n").splitlines()
    assert len(lines) <= 40, "\n".join(lines)
    text = "\n".join(lines)
    for variant in ("acl-linear", "acl-set"):
        assert variant in text
    assert "costs +" in text and "Connection rate" in text
    assert "┏" not in text  # no table without --details


def test_details_prints_every_table_with_shared_notes_once() -> None:
    console = Console(record=True, width=250, color_system=None)
    print_report(console, quick_summary(), quick_meta(), details=True)
    text = console.export_text()
    assert text.count("┏") >= 6  # the tables
    assert text.count("Δ% = cost against the baseline, positive = worse;") == 1
    assert text.index("The answer") < text.index("┏")


def test_a_note_of_one_workload_stays_with_its_tables() -> None:
    def t(workload: str, notes: list[str]) -> ReportTable:
        return ReportTable(workload, "m", "title", [], [], notes)

    common, tables = common_notes(
        [t("a", ["shared", "outlier of a"]), t("a", ["shared", "outlier of a"]), t("b", ["shared"])]
    )
    assert common == ["shared"]
    assert [x.footnotes for x in tables] == [["outlier of a"], ["outlier of a"], []]


def test_cli_prints_the_answer_and_the_tables_behind_details(tmp_path: Path) -> None:
    run = shutil.copytree(DATA_RUN, tmp_path / "run")
    cli = CliRunner()
    short = cli.invoke(app, ["report", str(run)])
    assert short.exit_code == 0, short.output
    assert "The answer" in short.output and "costs +25.0 %" in short.output
    assert "┏" not in short.output and "--details" in short.output
    full = cli.invoke(app, ["report", str(run), "--details"])
    assert full.exit_code == 0 and "┏" in full.output
    quiet = cli.invoke(app, ["--quiet", "report", str(run)])
    assert quiet.exit_code == 0
    assert "costs +25.0 %" in quiet.output
    assert "secperf report — scenario" not in quiet.output and "report:" not in quiet.output


def test_a_point_without_a_variant_gives_its_value_not_a_verdict() -> None:
    base = {"workload": "w", "point_id": "w#0", "label": "", "metric": "tps", "primary": True}
    rows = [
        {
            **base,
            "variant": "baseline",
            "mean": 20853.0,
            "ci_low": 19100.0,
            "ci_high": 22600.0,
            "unit": "trans/s",
            "metric_label": "Transaction rate",
        },
    ]
    console = Console(record=True, width=150, color_system=None)
    print_report(console, {"rows": rows}, {}, details=False, header=False)
    text = console.export_text()
    assert "baseline alone" in text and "20,853 [19,100–22,600] trans/s" in text
    assert "costs" not in text and "no measurable" not in text


def test_png_writes_every_chart_of_the_report(tmp_path: Path) -> None:
    run = shutil.copytree(DATA_RUN, tmp_path / "run")
    result = CliRunner().invoke(app, ["report", str(run), "--png"])
    assert result.exit_code == 0, result.output
    pngs = sorted((run / "charts").glob("*.png"))
    # the forest plot first, then the tables' charts, the time series and the rounds
    assert pngs[0].name.startswith("01-what-each-variant-costs")
    assert len(pngs) >= 1 + 6 + 3 + 3
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert f"{len(pngs)} PNG files" in result.output


def test_the_html_report_leads_with_the_answer_and_says_shared_notes_once(tmp_path: Path) -> None:
    run = RunDir.open(shutil.copytree(DATA_RUN, tmp_path / "run"))
    html = write_html(run).read_text()
    answer, results = html.index('<h2 id="answer">'), html.index('<h2 id="results">')
    assert answer < results
    # the forest plot is the report's first chart, inside the answer
    first_chart = html.index('<figure class="chart"')
    assert answer < first_chart < results
    assert "What each variant costs" in html[first_chart : first_chart + 300]
    # several tables, one note on what Δ% means
    assert html.count("<table>") > 2
    assert html.count("Δ% = cost against the baseline, positive = worse;") == 1


def test_a_search_that_found_no_value_says_its_bounds_in_the_answer() -> None:
    point = {"workload": "rfc2544", "point_id": "rfc2544#0", "label": "", "primary": True}
    metric = {**point, "metric": "rfc2544_throughput_fps", "degradation_pct": None}
    rows = [
        {**metric, "variant": "baseline", "n": 0, "censored_n": 2,
         "search": {"at_least_n": 2, "at_least_bound": 8127.0}},
        {**metric, "variant": "drop", "n": 0, "censored_n": 2,
         "search": {"below_n": 2, "below_bound": 500.0}},
    ]  # fmt: skip
    # "below 500" against "at least 8,127" bounds the ratio: a cost, said as a bound
    (v,) = verdicts({"rows": [{**r, "higher_is_better": True} for r in rows]})
    assert v.outcome == COST
    assert v.text == (
        "costs: not found down to 500, at most 0.06 × the baseline's, which was at least 8,127"
    )
    # both "at least": nothing is known of their ratio
    rows[1]["search"] = {"at_least_n": 2, "at_least_bound": 500.0}
    (v,) = verdicts({"rows": rows})
    assert v.outcome == UNMEASURED
    assert v.text == (
        "not measured: the search found no value: at least 500 (baseline: at least 8,127)"
    )


# -- what the answer cannot claim (issues 42 and 43) --------------------------------

_POINT = {"workload": "w", "point_id": "w#0", "label": "", "metric": "tps", "primary": True}


def test_two_rounds_say_no_interval_never_85_points() -> None:
    # a summary written before the rule: 2 pairs with a t interval of 1 degree of freedom
    two = {**_POINT, **row(12.3, -72.7, 97.3), "variant": "a", "degradation_n": 2}
    (v,) = verdicts({"rows": [two], "degradation_target_pp": 2.0})
    assert v.outcome == UNMEASURED
    assert v.text == "2 rounds: no interval (Δ +12.3 %)"
    assert "points" not in v.text and v.low is None and v.high is None
    one = {**two, "degradation_n": 1, "degradation_ci_low": None, "degradation_ci_high": None}
    assert verdicts({"rows": [one]})[0].text == "1 round: no interval (Δ +12.3 %)"


def test_a_found_value_against_an_at_least_is_a_bounded_verdict() -> None:
    kept = ROOT / "docs" / "runs" / "seed002-flood-tolerance-quick-2026-11-26" / "summary.json"
    summary = json.loads(kept.read_text("utf-8"))
    found = {v.variant: v for v in verdicts(summary) if v.metric == "min_flood_rate"}
    efw = found["efw-1"]
    assert efw.outcome == COST
    assert efw.text == (
        "costs: 9,819 [6,220–9,821] packets/s, at most 0.11 × the baseline's, which was "
        "not denied up to 87,758 achieved (96,000 asked)"
    )
    assert "not measured" not in " ".join(v.text for v in found.values())


def test_a_bound_that_holds_no_change_is_not_resolved() -> None:
    base = {**_POINT, "metric": "max_conn_rate", "higher_is_better": True}
    rows = [
        {**base, "variant": "baseline", "n": 3, "mean": 900.0, "ci_low": 880.0,
         "ci_high": 920.0, "search": {"found_n": 3}},
        {**base, "variant": "a", "n": 0, "censored_n": 3, "degradation_pct": None,
         "search": {"at_least_n": 3, "at_least_bound": 500.0}},
    ]  # fmt: skip
    (v,) = verdicts({"rows": rows})
    assert v.outcome == UNRESOLVED
    assert v.text.startswith("not resolved: ≥ 500, at least 0.54 × the baseline's, which was 900")


def test_a_row_that_missed_its_target_says_by_how_much_and_what_would_reach_it() -> None:
    wide = {
        **_POINT,
        **row(10.0, 4.7, 15.3),
        "variant": "a",
        "degradation_n": 12,
        "degradation_halfwidth_pp": 5.3,
        "stop_reason": "budget_spent",
        "stop_reps": 12,
        "stop_rounds_s": 120.0,
    }
    summary = {"rows": [wide], "degradation_target_pp": 2.0}
    (v,) = verdicts(summary)
    # 12 (5.3 / 2)^2 = 84.3 rounds in all: 73 more of 10 s each, about 12 min
    shortfall = (
        "target ±2 not met: ±5.3 after 12 rounds (budget spent); about 12 min more would reach it"
    )
    assert v.text == f"costs +10.0 % [+4.7, +15.3]; {shortfall}"
    console = Console(record=True, width=250, color_system=None)
    print_report(console, summary, {}, details=False, header=False)
    assert shortfall in console.export_text()
    assert shortfall in "".join(_answer_html(summary, {}))
    # without the rounds' time (a run from before it was kept): the rounds it needs
    (old,) = verdicts({**summary, "rows": [{**wide, "stop_rounds_s": None}]})
    assert old.text.endswith("after 12 rounds (budget spent); about 73 more rounds would reach it")
    # a row within its target says nothing more
    narrow = {**wide, **row(10.0, 8.5, 11.5), "degradation_halfwidth_pp": 1.5}
    (met,) = verdicts({**summary, "rows": [narrow]})
    assert "target" not in met.text


def test_the_tables_print_a_censored_comparison_as_its_bound() -> None:
    kept = ROOT / "docs" / "runs" / "seed002-flood-tolerance-quick-2026-11-26" / "summary.json"
    rows = json.loads(kept.read_text("utf-8"))["rows"]
    flood = {r["variant"]: r for r in rows if r["metric"] == "min_flood_rate"}
    efw = {**flood["efw-1"], "degradation_bound": censored_bound(flood["efw-1"], flood["baseline"])}
    assert degradation_cell(efw).text == "≥ +88.8 % (bound)†"
    assert degradation_cell(flood["efw-1"]).text == "–"  # kept before the bound existed
