"""Terminal tables, the self-contained HTML report, charts and run comparison."""

from __future__ import annotations

import re
import shutil
from html import escape
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from secperf.report.compare import compare_runs, print_comparison
from secperf.report.html import write_html
from secperf.report.plots import numeric, swept_parameter
from secperf.report.terminal import build_tables, print_report, render_tables
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary

DATA_RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "20261122T010203Z-quick"


def data_run(tmp_path: Path) -> RunDir:
    return RunDir.open(shutil.copytree(DATA_RUN, tmp_path / DATA_RUN.name))


def rr_run(root: Path, per_variant: dict[str, list[float]]) -> RunDir:
    run = RunDir.create(root, "cmp")
    run.write_run_json({"scenario": {"name": "cmp", "repeat": {"confidence": 0.95}}})
    for variant, values in per_variant.items():
        for rep, tps in enumerate(values):
            tags = {"variant": variant, "workload": "tcp-rr", "point_id": "tcp-rr#0", "rep": rep}
            record = {
                "type": "result",
                "kind": "rr",
                "transactions": tps * 5,
                "transactions_per_second": tps,
                "machine_cpu": {"busy_s": 5.0},
            }
            run.append_record(tags, record)
    return run


def terminal_text(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    console = Console(record=True, width=220, color_system=None)
    print_report(console, summary, meta)
    return console.export_text()


def test_terminal_tables_hold_the_numbers_and_marks(tmp_path: Path) -> None:
    run = data_run(tmp_path)
    summary, meta = build_summary(run), run.read_run_json()
    text = terminal_text(summary, meta)
    # header: scenario, baseline kind, confidence, host, shared-CPU note
    assert "scenario quick" in text
    assert "forwarding DUT" in text and "confidence 95 %" in text
    assert "6.1.0-synthetic" in text and "2 CPUs" in text
    assert "share this machine's CPUs" in text
    # tcp-rr: baseline 100, acl-linear 75 and about +25 % worse, marked significant
    assert "100.0" in text and "75.00" in text
    assert re.search(r"\+25\.0 \[\+2[34]\.\d, \+2[56]\.\d\]†", text)
    # acl-set's 128 KiB stream point scatters: CI target missed, cap reached
    assert re.search(r"10,500 ±\d+\.\d%\*", text)
    # the targets named: the degradations' in points, each value's in %
    assert (
        "CI target (targets at 95 %: each Δ% ±2 points, each value ±2 %) not met: "
        "repetition cap reached" in " ".join(text.split())
    )
    # every row names what limited it (the synthetic run has no host CPU: not measured)
    assert "limited by" in text and "not measured" in text
    # the error is named, not only counted
    assert "errors: 1, a test or part of one not measured:" in text
    assert "tcp-rr tcp-rr#0 acl-linear rep 4: connect: connection refused" in text


def test_one_table_per_workload_and_metric_primary_first(tmp_path: Path) -> None:
    summary = build_summary(data_run(tmp_path))
    tables = build_tables(summary)
    keys = [(t.workload, t.metric) for t in tables]
    assert keys[:2] == [("tcp-rr", "tps"), ("tcp-rr", "sd_cpu_us_per_tx")]
    assert ("tcp-stream", "throughput") in keys
    stream = next(t for t in tables if t.metric == "throughput")
    assert [row[0].text for row in stream.rows] == ["message=16KiB", "message=128KiB"]
    assert stream.columns[:4] == ["point", "baseline", "acl-linear", "acl-linear Δ% [CI]"]
    assert len(render_tables(summary, {})) == len(tables)


def test_html_report_is_self_contained(tmp_path: Path) -> None:
    run = data_run(tmp_path)
    path = write_html(run)
    assert path == run.path / "report.html"
    html = path.read_text()
    for table in build_tables(build_summary(run)):
        assert f"<h3>{escape(table.title)}</h3>" in html
    assert "acl-linear" in html and "+25.0" in html
    assert "data:image/png;base64," in html or '<figure class="chart"' in html
    # no external resources of any kind (an inline SVG's url(#clip) is within the page)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r"url\(\s*['\"]?(?!#)", html)
    # scenario text is escaped: its description says <synthetic>
    assert "&lt;synthetic&gt;" in html and "<synthetic>" not in html


def test_html_without_summary_json_derives_it(tmp_path: Path) -> None:
    run = data_run(tmp_path)
    assert not run.has_summary()
    assert "<table" in write_html(run).read_text()


def test_sweep_detection_for_line_charts() -> None:
    assert numeric("16KiB") == 16384 and numeric(1.5) == 1.5 and numeric("fast") is None
    points = [{"message": 16384, "duration": 5}, {"message": 131072, "duration": 5}]
    assert swept_parameter(points) == "message"
    assert swept_parameter(points[:1]) is None
    assert swept_parameter([{"a": 1, "b": 1}, {"a": 2, "b": 2}]) is None  # two at once
    assert swept_parameter([{"p": "tcp"}, {"p": "udp"}]) is None  # not numeric


def test_compare_flags_a_significant_difference_only(tmp_path: Path) -> None:
    a = rr_run(tmp_path / "a", {"baseline": [100, 102, 98, 100], "acl": [90, 91, 89, 90]})
    b = rr_run(tmp_path / "b", {"baseline": [101, 99, 100, 100], "acl": [75, 76, 74, 75]})
    rows = {(r["variant"], r["metric"]): r for r in compare_runs(a, b)}
    same, slower = rows[("baseline", "tps")], rows[("acl", "tps")]
    assert same["significant"] is False
    assert same["ci_low"] < 0 < same["ci_high"]
    assert slower["significant"] is True and slower["worse"] is True
    assert slower["mean_a"] == pytest.approx(90) and slower["mean_b"] == pytest.approx(75)
    assert slower["difference_pct"] == pytest.approx(-16.67, abs=0.01)
    assert slower["ci_high"] < 0
    # service demand rises when tps falls at the same CPU: also worse
    assert rows[("acl", "sd_cpu_us_per_tx")]["worse"] is True

    console = Console(record=True, width=200, color_system=None)
    print_comparison(console, list(rows.values()))
    text = console.export_text()
    assert "-16.7" in text and "†" in text
    assert "2 of 4 figures changed significantly" in text


def test_compare_skips_what_only_one_run_has(tmp_path: Path) -> None:
    a = rr_run(tmp_path / "a", {"baseline": [100, 101], "acl": [90, 91]})
    b = rr_run(tmp_path / "b", {"baseline": [100, 101]})
    assert {r["variant"] for r in compare_runs(a, b)} == {"baseline"}


def test_paper_layout_puts_points_in_columns_and_variants_in_rows() -> None:
    from secperf.report.terminal import build_tables, paper_layouts

    run = RunDir.open(Path(__file__).parent.parent / "data" / "runs" / "20261122T010203Z-quick")
    meta = run.read_run_json()
    meta["scenario"]["workloads"][1]["table"] = "Table 1: TCP_STREAM"
    layouts = paper_layouts(meta)
    assert layouts == {"tcp-stream": "Table 1: TCP_STREAM"}
    summary = build_summary(run)
    plain = next(t for t in build_tables(summary) if t.workload == "tcp-stream")
    paper = next(t for t in build_tables(summary, layouts) if t.workload == "tcp-stream")
    assert paper.title.startswith("Table 1: TCP_STREAM — ")
    # the plain table's point labels are the paper table's columns, the key in the corner
    assert [row[0].text for row in plain.rows] == ["message=16KiB", "message=128KiB"]
    assert paper.columns == ["message", "16KiB", "128KiB"]
    # baseline first, then each variant and its degradation, then n
    assert [row[0].text for row in paper.rows] == [*plain.columns[1:-1], "n"]
    # the same cells, transposed
    assert paper.rows[0][1].text == plain.rows[0][1].text
    assert paper.rows[2][2].text == plain.rows[1][3].text


def test_short_columns_name_the_keys_once_in_the_paper_order() -> None:
    from secperf.report.terminal import short_columns

    labels = ["message=4KiB socket_buffer=56KiB", "message=1KiB socket_buffer=32KiB"]
    assert short_columns(labels) == ("socket buffer / message", ["56KiB / 4KiB", "32KiB / 1KiB"])
    assert short_columns(["request=1 response=1"]) == ("request / response", ["1 / 1"])
    assert short_columns(["flood_rate=160000"]) == ("flood rate", ["160,000"])
    # labels that are not all key=value pairs of the same keys stay as they are
    assert short_columns(["delay", "a=1"]) == ("", ["delay", "a=1"])
    assert short_columns(["a=1", "b=2"]) == ("", ["a=1", "b=2"])


def test_cpu_table_shows_each_host_and_flags_a_reconciliation_gap() -> None:
    from secperf.report.terminal import RECONCILE_FLAG, build_tables

    def part(mean: float) -> dict[str, float]:
        return {"mean": mean}

    cpu_row = {
        "workload": "tcp-rr",
        "point_id": "tcp-rr#0",
        "label": "tcp-rr",
        "variant": "baseline",
        "unit": "trans",
        "n": 3,
        "hosts": ["client", "dut", "server"],
        "per_unit_us": {
            "host:client": part(40.0),
            "host:dut": part(0.0),
            "host:server": part(38.0),
            "softirq": part(20.0),
            "testbed": part(78.0),
            "machine": part(120.0),
        },
        "percent": {"host:client": part(45.0), "machine": part(190.0)},
        "softirq_in_hosts": True,
        "accounted_pct": 65.0,
        "reconciliation_flag": True,
    }
    summary = {"rows": [], "cpu": [cpu_row]}
    (table,) = build_tables(summary)
    # The dut ran no process of secperf's: no column of zeros, a note instead.
    assert table.columns[2:5] == ["client", "server", "softirq"]
    assert any("ran on dut" in n for n in table.footnotes)
    cells = [c.text for c in table.rows[0]]
    assert cells[2] == "40.00 (45%)" and cells[6] == "120.0 (190%)"
    assert cells[7] == f"65% {RECONCILE_FLAG}"
    assert any("inside the hosts' figures" in n for n in table.footnotes)
    assert any(RECONCILE_FLAG in n for n in table.footnotes)


def test_header_says_which_hosts_were_pinned() -> None:
    from secperf.report.header import header_lines

    meta = {"testbed": {"cgroups": {"pin": {"client": [0], "dut": [1]}}}, "status": "complete"}
    lines = header_lines({}, meta)
    assert any("client on CPU 0" in x and "dut on CPU 1" in x for x in lines)
    assert not any(x.startswith("pinned") for x in header_lines({}, {"status": "complete"}))
