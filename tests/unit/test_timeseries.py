"""Every test over time (the engine's interval records) and every round's value."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from secperf.report import timeseries
from secperf.report.html import write_html
from secperf.report.timeseries import collect, round_values, series_chart, strip_charts
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary

ROOT = Path(__file__).resolve().parents[2]
DATA_RUN = ROOT / "tests" / "data" / "runs" / "20261122T010203Z-quick"


def line(variant: str, rep: int, record: dict[str, Any], **tags: Any) -> dict[str, Any]:
    return {
        "workload": "w",
        "point_id": "w#0",
        "label": "",
        "variant": variant,
        "rep": rep,
        "record": record,
        **tags,
    }


def start(clock: int | None = None, **spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "start", "spec": {"warmup": 1.0, **spec}}
    if clock is not None:
        out["clock"] = {"monotonic_ns": clock}
    return out


def interval(t0: float, t1: float, **values: Any) -> dict[str, Any]:
    return {"type": "interval", "t_start": t0, "t_end": t1, "warmup": t0 < 1.0, **values}


def test_intervals_group_by_test_and_a_retry_keeps_its_last_attempt() -> None:
    lines = [
        line("baseline", 0, start()),
        line("baseline", 0, interval(0, 1, rate=50.0, transactions=50)),
        line("baseline", 0, {"type": "error", "kind": "connect"}),
        # the retried test starts over: the first attempt's interval is gone
        line("baseline", 0, start()),
        line("baseline", 0, interval(0, 1, rate=90.0, transactions=90)),
        line("baseline", 0, interval(1, 2, rate=100.0, transactions=100)),
        line("acl", 0, start()),
        line("acl", 0, interval(0, 1, bits_per_second=8e6, latency_us=None)),
        line("acl", 1, start()),
        line("acl", 1, interval(0, 1, bits_per_second=9e6, latency_us=None)),
        # a search's probe nested beside the test is not the test
        line("acl", 1, {"type": "side", "role": "probe-5000", "record": interval(0, 1, rate=1.0)}),
    ]
    (point,) = collect(lines)
    tests = {(t.variant, t.rep): t for t in point.tests}
    assert sorted(tests) == [("acl", 0), ("acl", 1), ("baseline", 0)]
    base = tests[("baseline", 0)]
    assert [s["rate"] for s in base.points] == [90.0, 100.0]
    assert [s["t"] for s in base.points] == [0.5, 1.5]  # the middle of each interval
    assert base.warmup_s == 1.0
    assert [s["throughput"] for s in tests[("acl", 1)].points] == [9.0]  # Mbit/s


def test_a_flood_beside_the_test_is_on_the_tests_clock() -> None:
    flood = {"type": "side", "role": "flood"}
    lines = [
        line("baseline", 0, {**flood, "record": start(clock=5_000_000_000, flood="udp")}),
        line("baseline", 0, start(clock=5_500_000_000)),
        line("baseline", 0, {**flood, "record": interval(0, 1, rate=10_000.0, packets=10_000)}),
        line("baseline", 0, interval(0, 1, bits_per_second=5e6, latency_us=None)),
    ]
    (point,) = collect(lines)
    (test,) = point.tests
    assert test.flood_offset() == -0.5  # the flood began half a second before the test
    assert test.flood == [(0.5, 10_000.0)]
    chart = series_chart(point)
    svg = chart.image.decode()
    assert "Flood beside it" in svg and "Throughput" in svg


def test_generators_are_summed_by_interval() -> None:
    def gen(name: str, record: dict[str, Any]) -> dict[str, Any]:
        return line("baseline", 0, {"type": "side", "role": f"generator-{name}", "record": record})

    lines = [
        gen("c1", start()),
        gen("c2", start()),
        gen("c1", interval(0, 1, rate=40.0, transactions=40)),
        gen("c2", interval(0, 1, rate=60.0, transactions=60)),
    ]
    (point,) = collect(lines)
    assert [s["rate"] for s in point.tests[0].points] == [100.0]


def test_every_test_has_its_time_series_and_its_rounds_in_the_report(tmp_path: Path) -> None:
    run = RunDir.open(shutil.copytree(DATA_RUN, tmp_path / "run"))
    html = write_html(run).read_text()
    tests = {(line["workload"], line["label"]) for line in run.iter_records()}
    assert len(tests) == 3
    for workload, label in tests:
        # an SVG or, where smaller, a PNG: captioned either way
        assert f"<figcaption>{workload} {label}: over time (every round)</figcaption>" in html
        assert f"<figcaption>{workload} {label}: every round&#x27;s value" in html
    # the rounds in the strip plot are the records' values, one dot each
    values = round_values(run)
    assert values[("tcp-rr", "tcp-rr#0")]["tps"]["acl-linear"] == [75.0, 76.0, 74.0, 75.0]
    summary = build_summary(run)
    strips = strip_charts(summary, values)
    assert len(strips) == 3
    # the over-time section comes after the tables and before the testbed
    assert html.index('id="results"') < html.index('id="over-time"') < html.index('id="testbed"')


def test_a_run_without_interval_records_has_no_time_series(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "x")
    run.write_run_json({"scenario": {"name": "x"}})
    tags = {"workload": "w", "point_id": "w#0", "label": "", "variant": "baseline"}
    for rep in range(2):
        record = {"type": "result", "kind": "rr", "transactions_per_second": 100.0 + rep}
        run.append_record({**tags, "rep": rep}, record)
    html = write_html(run).read_text()
    assert "over time (every round)" not in html
    assert re.search(r"No interval records for w: its kind writes none", html)
    assert "<figcaption>w: every round&#x27;s value (bar: the mean)</figcaption>" in html


def test_an_rr_test_over_time_draws_its_rate_and_latency_percentiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunDir.open(shutil.copytree(DATA_RUN, tmp_path / "run"))
    (rr,) = [p for p in collect(run.iter_records()) if p.label.startswith("tcp-rr")]
    # every round of every variant is a test of its own
    rounds = {(t.variant, t.rep) for t in rr.tests}
    assert len(rr.tests) == len(rounds) and {v for v, _ in rounds} == {
        "baseline",
        "acl-linear",
        "acl-set",
    }
    first = rr.tests[0].points[0]
    assert first["rate"] == 50.0 and first["p50"] == 20000.0 and first["p99"] == 30000.0
    drawn: list[Any] = []
    monkeypatch.setattr(timeseries, "figure_bytes", lambda fig: drawn.append(fig) or b"")
    series_chart(rr)
    (fig,) = drawn
    labels = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()]
    assert labels == ["Transactions/s", "Latency p50 (µs)", "Latency p99 (µs)"]
    # a line per round on each panel, overlaid
    for ax in fig.axes:
        if ax.get_ylabel():
            assert len([x for x in ax.get_lines() if len(x.get_xdata()) > 1]) >= len(rounds)


def test_a_rate_reads_as_its_kinds_primary_metric() -> None:
    lines = [
        line("baseline", 0, start()),
        line("baseline", 0, interval(0, 1, rate=5.0, transactions=5)),
    ]
    (point,) = collect(lines)
    summary = {
        "rows": [
            {
                "workload": "w",
                "metric": "cps",
                "unit": "conn/s",
                "metric_label": "Connection rate",
                "primary": True,
            },
            {"workload": "x", "metric": "throughput", "unit": "Mbit/s", "primary": True},
        ]
    }
    rates = timeseries.rate_labels(summary)
    assert rates == {"w": "Connection rate (conn/s)"}  # a bit rate is not a count rate
    svg = series_chart(point, rates=rates).image.decode()
    assert "Connection rate (conn/s)" in svg and "Transactions/s" not in svg


def test_a_series_of_fewer_than_five_measured_intervals_is_not_drawn_and_says_why(
    tmp_path: Path,
) -> None:
    run = RunDir.create(tmp_path, "x")
    run.write_run_json({"scenario": {"name": "x"}})
    for workload, measured in (("short", 2), ("long", 5)):
        tags = {"workload": workload, "point_id": f"{workload}#0", "label": ""}
        for rep in range(2):
            at = {**tags, "variant": "baseline", "rep": rep}
            run.append_record(at, start())
            for i in range(1 + measured):  # the warm-up's interval, then the measured ones
                run.append_record(at, interval(i, i + 1, rate=100.0, transactions=100))
            run.append_record(at, {"type": "result", "kind": "rr", "transactions_per_second": 1e2})
    html = write_html(run).read_text()
    assert "<figcaption>long: over time (every round)</figcaption>" in html
    assert "short: over time" not in html
    assert (
        "short: not drawn over time: its tests have at most 2 measured intervals of 1 s, "
        "fewer than the 5 a series needs." in html
    )
    assert "No interval records for short" not in html
