"""Searches end to end without root: the real executors (conn_rate, min_flood_rate)
against a fake engine, their records summarized and printed as the report does.

Each test here failed on the code before brackets: a search below its range was
averaged in as 0, one above it as its cap, identical bisections gave a zero-width
interval and a dagger, and min_flood_rate bounded a fruitless search by the rate
it asked for instead of the one its flood reached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from secperf.report.terminal import build_tables
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.tables import fmt_value
from secperf.workloads import conn_rate, min_flood
from secperf.workloads.base import Executor, MeasureContext, WorkloadPoint
from secperf.workloads.conn_rate import ConnRateExecutor, ConnRateWorkload
from secperf.workloads.min_flood import MinFloodRateExecutor, MinFloodRateWorkload


class _Bed:
    """Stands in for a testbed: the fake engine never looks at the host."""

    prefix = "fake"

    def host(self, _name: str) -> None:
        return None


def context(variant: str, keep: Callable[[dict[str, Any]], None]) -> MeasureContext:
    return MeasureContext(
        testbed=cast(Any, _Bed()),
        topology=cast(Any, SimpleNamespace(names=())),  # no DUT to flush between trials
        plan=cast(Any, None),
        family=4,
        variant=variant,
        direct=False,
        target="198.18.2.2:5201",
        keep=keep,
    )


def run_searches(
    root: Path,
    executor: Executor[Any],
    point: WorkloadPoint[Any],
    per_rep: Mapping[str, list[Callable[[], None]]],
) -> RunDir:
    """Measure `point` once per rep and variant, after that rep's setup (which sets the
    fake DUT), keeping every record as the runner does."""
    run = RunDir.create(root, "s")
    run.write_run_json({"scenario": {"name": "s", "repeat": {"halfwidth_pct": 5.0}}})
    for variant, setups in per_rep.items():
        for rep, setup in enumerate(setups):
            setup()
            tags = {
                "variant": variant,
                "workload": point.name,
                "point_id": f"{point.name}#0",
                "label": "",
                "rep": rep,
            }

            def keep(rec: dict[str, Any], tags: dict[str, Any] = tags) -> None:
                run.append_record(tags, rec)

            executor.measure(context(variant, keep), point)
    return run


# -- conn_rate against a fake DUT that completes connections up to `capacity`/s ------


class FakeDut:
    capacity = 1000.0


def fake_crr(dut: FakeDut) -> Callable[..., dict[str, Any]]:
    def run_on_client(_ctx: Any, spec: dict[str, Any], keep_all: bool) -> dict[str, Any]:
        rate, secs = float(spec["rate"]), float(spec["duration"])
        done = min(rate, dut.capacity)
        lost = 0 if rate <= dut.capacity else int((rate - dut.capacity) * secs)
        return {
            "type": "result",
            "kind": "crr",
            "transactions": int(done * secs),
            "transactions_per_second": done,
            "loss": {"lost": lost},
        }

    return run_on_client


CONN_RATE = WorkloadPoint(
    0,
    0,
    ConnRateWorkload.model_validate(
        {
            "kind": "conn_rate",
            "low": 500.0,
            "high": 20000.0,
            "resolution_pct": 25.0,
            "max_steps": 10,
            "duration": 1.0,
        }
    ),
)


def capacity(dut: FakeDut, value: float) -> Callable[[], None]:
    def setup() -> None:
        dut.capacity = value

    return setup


def rows_of(run: RunDir) -> dict[str, dict[str, Any]]:
    return {str(r["variant"]): r for r in build_summary(run)["rows"]}


def cells_of(run: RunDir) -> list[str]:
    (table,) = build_tables(build_summary(run))
    return [c.text for c in table.rows[0]]


def test_a_search_below_its_range_is_not_averaged_in_as_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dut = FakeDut()
    monkeypatch.setattr(conn_rate, "run_on_client", fake_crr(dut))
    # two searches find ~1000/s; the third fails even at its lowest rate, 500/s
    setups = [capacity(dut, 1000), capacity(dut, 1000), capacity(dut, 300)]
    run = run_searches(tmp_path, ConnRateExecutor(), CONN_RATE, {"baseline": setups})
    row = rows_of(run)["baseline"]
    assert row["n"] == 2 and row["censored_n"] == 1
    assert 900 < row["mean"] <= 1000  # not (1000 + 1000 + 0) / 3
    assert row["search"]["below_n"] == 1 and row["search"]["below_bound"] == 500
    cell = cells_of(run)[1]
    assert cell.endswith("(1 of 3: < 500)"), cell
    assert not cell.startswith("6")  # no 667-like mean of a censored value


def test_a_search_above_its_range_is_a_bound_not_a_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dut = FakeDut()
    monkeypatch.setattr(conn_rate, "run_on_client", fake_crr(dut))
    setups = [capacity(dut, 50_000), capacity(dut, 50_000)]
    run = run_searches(tmp_path, ConnRateExecutor(), CONN_RATE, {"baseline": setups})
    row = rows_of(run)["baseline"]
    assert row["n"] == 0 and row["mean"] is None and row["ci_low"] is None
    assert row["censored_n"] == 2 and row["search"]["at_least_bound"] == 20000
    assert cells_of(run)[1] == "≥ 20,000"


def test_identical_bisections_keep_their_resolution_and_earn_no_dagger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dut = FakeDut()
    monkeypatch.setattr(conn_rate, "run_on_client", fake_crr(dut))
    # a 5 % difference that a 25 % search cannot resolve; every rep bisects alike
    bisect = replace(CONN_RATE, spec=CONN_RATE.spec.model_copy(update={"search": "bisect"}))
    run = run_searches(
        tmp_path,
        ConnRateExecutor(),
        bisect,
        {
            "baseline": [capacity(dut, 1000), capacity(dut, 1000), capacity(dut, 1000)],
            "acl": [capacity(dut, 950), capacity(dut, 950), capacity(dut, 950)],
        },
    )
    rows = rows_of(run)
    base, acl = rows["baseline"], rows["acl"]
    assert base["stddev"] == 0.0  # identical results ...
    assert base["ci_low"] <= base["mean"] < base["ci_high"]  # ... yet not a zero-width CI
    assert acl["degradation_pct"] > 0  # the point estimate says worse ...
    assert acl["significant"] is False  # ... but the brackets overlap: no dagger
    assert acl["degradation_ci_low"] <= 0 < acl["degradation_ci_high"]
    # the interval spans at least the search's own resolution
    resolution = base["search"]["resolution_pct"]
    assert resolution > 5
    assert (base["ci_high"] - base["ci_low"]) / base["mean"] * 100 >= resolution - 1e-9
    cells = cells_of(run)
    assert "†" not in cells[3]
    mean, lo, hi = (fmt_value(base[k]) for k in ("mean", "ci_low", "ci_high"))
    assert cells[1] == f"{mean} [{lo}–{hi}]*"  # * : 25 % steps cannot meet a ±5 % target
    (table,) = build_tables(build_summary(run))
    assert any("resolution is coarser than the target" in n for n in table.footnotes)


# -- min_flood_rate: a flood that reaches less than it asks ------------------------


def test_min_flood_bounds_a_fruitless_search_by_the_rate_the_flood_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    @dataclass
    class Done:
        result: dict[str, Any]

    def run_test(_host: Any, _spec: Any, on_record: Any = None, **_kw: Any) -> Done:
        return Done({"type": "result", "kind": "stream", "bits_per_second": 95e6})

    def run_beside(_ctx: Any, _inner: Any, _point: Any, *, rate: int, **_kw: Any) -> Any:
        # the generator tops out at 149 kpps; the stream is never denied
        sent = float(min(rate, 149_000))
        return (
            {"type": "result", "kind": "stream", "bits_per_second": 80e6},
            {"type": "result", "kind": "flood", "asked_pps": rate, "rate_pps": sent},
        )

    monkeypatch.setattr(min_flood, "run_test", run_test)
    monkeypatch.setattr(min_flood, "run_beside", run_beside)
    params = {
        "kind": "min_flood_rate",
        "name": "min-flood",
        "flood": "udp",
        "flood_target": "allowed",
        "flood_payload": None,
        "lo": 5000,
        "hi": 200_000,
        "threshold_pct": 1.0,
        "max_probes": 6,
        "resolution_pct": 25.0,
        "message": 131072,
        "duration": 1.0,
        "warmup": 0.5,
    }
    point = WorkloadPoint(0, 0, MinFloodRateWorkload.model_validate(params | {"search": "bisect"}))
    nothing = [lambda: None, lambda: None]
    run = run_searches(tmp_path, MinFloodRateExecutor(), point, {"baseline": nothing})
    assert cells_of(run)[1] == "not denied up to 149,000 achieved (200,000 asked)"
    row = rows_of(run)["baseline"]
    assert row["n"] == 0 and row["censored_n"] == 2
    assert row["search"]["at_least_bound"] == 149_000

    # MLRsearch places the flood by its asked rate: one that fell short of its ask and
    # did not deny is a probe the tool could not run, so the search stays below it and
    # answers "at least" the highest rate the flood reached and did not deny at
    mlr = WorkloadPoint(0, 0, MinFloodRateWorkload.model_validate(params))
    run = run_searches(tmp_path / "mlr", MinFloodRateExecutor(), mlr, {"baseline": nothing})
    row = rows_of(run)["baseline"]
    assert row["n"] == 0 and row["censored_n"] == 2
    bound = row["search"]["at_least_bound"]
    assert 0.8 * 149_000 / 0.95 <= bound <= 149_000 / 0.95
    assert cells_of(run)[1] == f"not denied up to {bound:,.0f}"


# -- records written before the bracket: the published RFC 3511 synproxy row -------


def test_old_records_of_the_published_333_read_as_brackets(tmp_path: Path) -> None:
    """docs/methodology.md published synproxy's §5.3 as 333 conn/s: the mean of
    {500, 500, 0}, the 0 a search that failed at its lowest rate. Those records,
    re-read, are two brackets [500, 2437.5] and one "< 500"."""
    run = RunDir.create(tmp_path, "old")
    run.write_run_json({"scenario": {"name": "old"}})
    old = [
        {"rate": 500.0, "best": 500.0, "bracket": [500.0, 2437.5]},
        {"rate": 500.0, "best": 500.0, "bracket": [500.0, 2437.5]},
        {"rate": 0.0, "best": None, "bracket": [None, 500.0]},
    ]
    for rep, fields in enumerate(old):
        tags = {"variant": "baseline", "workload": "s5-3", "point_id": "s5-3#0", "rep": rep}
        run.append_record(tags, {"type": "result", "kind": "conn_rate", **fields, "steps": []})
    (row,) = build_summary(run)["rows"]
    assert row["n"] == 2 and row["mean"] == 500.0 and row["censored_n"] == 1
    assert (row["ci_low"], row["ci_high"]) == (500.0, 2437.5)  # the bracket, not 500 ± 0
    assert cells_of(run)[1] == "500 [500–2,438] (1 of 3: < 500)"


def test_charts_draw_a_below_only_row_without_a_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from secperf.report import plots

    dut = FakeDut()
    monkeypatch.setattr(conn_rate, "run_on_client", fake_crr(dut))
    setups = [capacity(dut, 100), capacity(dut, 100)]
    run = run_searches(tmp_path, ConnRateExecutor(), CONN_RATE, {"baseline": setups})
    assert cells_of(run)[1] == "< 500"
    assert plots._censored(rows_of(run)["baseline"]) == ("<", 500.0)
    (chart,) = plots.charts(build_summary(run))
    assert chart.image[:4] == b"\x89PNG" or b"<svg" in chart.image[:400]
