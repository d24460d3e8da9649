"""Run history's detection and gate on synthetic histories (issue 45): a step of known size
at a known run is found at that run; noise of ±10 % in the rates with a constant paired
degradation, and a drifting baseline, give no change point and no alarm; a machine change
is marked, not called a step; the gate exits 5 and writes JUnit; the page has a chart per
row."""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import secperf.api as sp
from secperf.cli import app
from secperf.history.changes import Point, _candidates, change_points
from secperf.history.gate import parse_rule
from secperf.history.query import add_run_dir, load_series
from secperf.history_command import history_gate, record

INTEL = {"cpu_model": "Intel(R) Xeon(R) Processor", "cpus": 2, "kernel": "6.18.44"}
EPYC = {"cpu_model": "AMD EPYC", "cpus": 2, "kernel": "6.18.44"}


def _row(variant: str, metric: str, mean: float, deg: float | None, half: float) -> dict:
    return {
        "workload": "tcp-rr", "point_id": "tcp-rr#0", "label": "tcp-rr", "point": {},
        "kind": "rr", "variant": variant, "metric": metric, "metric_label": metric,
        "unit": "trans/s", "higher_is_better": True, "primary": True, "n": 8, "mean": mean,
        "stddev": 1.0, "ci_low": mean * 0.98, "ci_high": mean * 1.02, "halfwidth_pct": 2.0,
        "ci_target_met": True, "outliers": [], "stop_reason": "ci_met", "stop_reps": 8,
        "errors": 0, "censored_n": 0, "search": None,
        "baseline_mean": None if deg is None else mean / (1 - deg / 100),
        "degradation_pct": deg,
        "degradation_ci_low": None if deg is None else deg - half,
        "degradation_ci_high": None if deg is None else deg + half,
        "degradation_n": None if deg is None else 8, "significant": None,
    }  # fmt: skip


def write_run(
    root: Path,
    i: int,
    baseline: float,
    deg: float,
    *,
    half: float = 2.0,
    host: dict | None = None,
    scenario: str = "syn",
    text: str = "[x]\n",
) -> Path:
    """A run directory of one rr point: the baseline's rate and the variant's paired
    degradation (in %, with its half-width)."""
    d = root / f"2026{(i // 28) + 1:02d}{(i % 28) + 1:02d}T120000Z-{scenario}"
    d.mkdir(parents=True)
    meta = {
        "format": 1, "scenario": {"name": scenario}, "scenario_text": text,
        "started": f"2026-{(i // 28) + 1:02d}-{(i % 28) + 1:02d}T12:00:00+00:00",
        "finished": None, "status": "complete", "secperf_version": "0.1.0",
        "host": host or INTEL, "placement": {"mode": "one"},
    }  # fmt: skip
    rows = [
        _row("baseline", "tps", baseline, None, half),
        _row("acl", "tps", baseline * (1 - deg / 100), deg, half),
    ]
    (d / "run.json").write_text(json.dumps(meta))
    (d / "summary.json").write_text(json.dumps({"format": 1, "scenario": scenario, "rows": rows}))
    return d


def _store(tmp_path: Path, runs: list[tuple[float, float]], **kw: object) -> Path:
    store = tmp_path / "h.sqlite"
    for i, (base, deg) in enumerate(runs):
        add_run_dir(write_run(tmp_path / "runs", i, base, deg, **kw), {"run": str(i)}, store)  # type: ignore[arg-type]
    return store


def test_a_step_of_known_size_at_a_known_run_is_found_there(tmp_path: Path) -> None:
    rng = random.Random(1)
    degs = [20 + rng.gauss(0, 0.6) for _ in range(14)] + [26 + rng.gauss(0, 0.6) for _ in range(10)]
    store = _store(tmp_path, [(10000 * rng.uniform(0.9, 1.1), d) for d in degs])
    (s,) = load_series("syn", store=store)
    (step,) = s.steps
    assert step.index == 14 and step.point.labels == {"run": "14"}
    assert step.low < 6.0 < step.high and 5.0 < step.size < 7.0
    assert "T12:00:00" in step.point.started and step.point.run_dir.endswith("-syn")


@pytest.mark.parametrize("seed", range(6))
def test_noise_in_the_rates_with_a_constant_degradation_is_no_step(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    runs = [(10000 * rng.uniform(0.9, 1.1), 20 + rng.gauss(0, 1.0)) for _ in range(24)]
    store = _store(tmp_path, runs)
    (s,) = load_series("syn", store=store)
    assert s.steps == []


def test_a_drifting_baseline_with_a_constant_degradation_gives_no_alarm(tmp_path: Path) -> None:
    rng = random.Random(7)
    # the baseline's rate falls by half over the history; the paired cost stays 20 %
    runs = [(12000 - 250 * i, 20 + rng.gauss(0, 0.8)) for i in range(24)]
    store = _store(tmp_path, runs)
    (s,) = load_series("syn", store=store)
    assert s.steps == []
    for rule in ("no regression since the last change point", "within the last 5 runs' range"):
        result = CliRunner().invoke(
            app, ["history", "syn", "--store", str(store), "--expect-history", rule]
        )
        assert result.exit_code == 0, result.output


def _shift(half: float) -> list[Point]:
    """200 runs whose degradation moves by 1 point at run 100, each run ±half."""
    return [
        Point(i, f"t{i:03d}", f"d{i}", {}, "a", 20.0 + (i >= 100), 20.0 - half + (i >= 100),
              20.0 + half + (i >= 100), 8, None)
        for i in range(200)
    ]  # fmt: skip


def test_a_step_inside_the_runs_own_intervals_is_no_step() -> None:
    # the candidate search proposes the 1-point shift; the runs' own ±1.5 points cover it
    assert _candidates(_shift(1.5)) == [100]
    assert change_points(_shift(1.5)) == []
    # the same shift measured to ±0.1 points is a step
    assert [st.index for st in change_points(_shift(0.1))] == [100]


def test_a_machine_change_is_marked_not_called_a_step(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    rng = random.Random(3)
    for i in range(16):
        deg = (20 if i < 8 else 35) + rng.gauss(0, 0.5)
        add_run_dir(
            write_run(tmp_path / "runs", i, 10000, deg, host=INTEL if i < 8 else EPYC), None, store
        )
    (here,) = load_series("syn", store=store)
    assert len(here.points) == 8 and not any(p.other_machine for p in here.points)
    (both,) = load_series("syn", store=store, all_machines=True)
    assert both.machine_changes() == [8] and both.steps == []
    assert [p.other_machine for p in both.points] == [True] * 8 + [False] * 8
    rows = sp.history("syn", store=store, all_machines=True)
    assert [r["machine_change"] for r in rows].index(True) == 8
    assert not any(r["change_point"] for r in rows)


def test_the_gate_fails_a_regression_with_exit_5_and_junit(tmp_path: Path) -> None:
    rng = random.Random(5)
    runs = [(10000, 20 + rng.gauss(0, 0.5)) for _ in range(12)] + [(10000, 26.0)]
    store = _store(tmp_path, runs)
    junit = tmp_path / "history.xml"
    result = CliRunner().invoke(app, [
        "history", "syn", "--store", str(store), "--junit", str(junit),
        "--expect-history", "no regression since the last change point",
        "--expect-history", "within the last 5 runs' range",
    ])  # fmt: skip
    assert result.exit_code == 5, result.output
    assert "history gate: FAILED" in result.output
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("name") == "syn" and suite.get("failures") == "2"
    cases = suite.findall("testcase")
    assert len(cases) == 2 and all(c.find("failure") is not None for c in cases)
    # the run before it passes both
    store2 = _store(tmp_path / "b", runs[:-1])
    ok = CliRunner().invoke(app, ["history", "syn", "--store", str(store2), "--expect-history",
                                  "no regression since the last change point"])  # fmt: skip
    assert ok.exit_code == 0, ok.output


def test_a_bad_history_rule_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        parse_rule("faster please")
    assert parse_rule("within the last 10 runs' range").last_n == 10
    result = CliRunner().invoke(app, ["history", "syn", "--expect-history", "faster please"])
    assert result.exit_code == 2


def test_the_page_has_one_chart_per_row_and_marks_the_change_point(tmp_path: Path) -> None:
    rng = random.Random(2)
    store = tmp_path / "h.sqlite"
    for i in range(12):
        d = write_run(tmp_path / "runs", i, 10000, (20 if i < 6 else 30) + rng.gauss(0, 0.3))
        summary = json.loads((d / "summary.json").read_text())
        extra = [dict(r, metric="sd_cpu_us_per_tx", primary=False) for r in summary["rows"]]
        summary["rows"] += extra
        (d / "summary.json").write_text(json.dumps(summary))
        add_run_dir(d, {"git": f"c{i}"}, store)
    page = tmp_path / "trend.html"
    result = CliRunner().invoke(app, ["history", "syn", "--store", str(store), "--html", str(page)])
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert text.count('<figure class="trend"') == 2
    assert text.count("change point at") == 2 and "git=c6" in text
    assert "<svg" in text or "data:image/png" in text
    assert "▲ step" in result.output


def test_json_and_csv(tmp_path: Path) -> None:
    store = _store(tmp_path, [(10000, 20.0), (10000, 21.0)])
    out = CliRunner().invoke(app, ["history", "syn", "--store", str(store), "--json"])
    doc = json.loads(out.stdout)
    assert doc["series"][0]["variant"] == "acl" and len(doc["series"][0]["runs"]) == 2
    csv = CliRunner().invoke(app, ["history", "syn", "--store", str(store), "--csv"]).stdout
    assert csv.splitlines()[0].startswith("variant,workload,point,metric")
    assert len(csv.splitlines()) == 3


def test_a_store_that_cannot_be_written_is_a_warning_not_a_lost_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not a database" * 100)
    run = write_run(tmp_path / "runs", 0, 10000, 20.0)
    record(run, {}, broken, Console())  # no exception: the run stands
    assert "the run is kept, but not in the results store" in capsys.readouterr().err
    assert (run / "summary.json").is_file()


def test_run_side_history_gate_sees_the_newest_run(tmp_path: Path) -> None:
    rng = random.Random(4)
    runs = [(10000, 20 + rng.gauss(0, 0.5)) for _ in range(10)] + [(10000, 30.0)]
    store = _store(tmp_path, runs)
    junit = tmp_path / "h.xml"
    rule = [parse_rule("no regression since the last change point")]
    (outcome,) = history_gate("syn", rule, store, junit, Console(file=None, quiet=True))
    assert outcome.failed and outcome.to_json()["run_dir"].endswith("-syn")
    assert ET.parse(junit).getroot().get("failures") == "1"


def test_a_scenario_edit_is_marked(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    for i in range(4):
        text = "[x]\n" if i < 2 else "[x]\nrules = 1200\n"
        add_run_dir(write_run(tmp_path / "runs", i, 10000, 20.0 + i, text=text), None, store)
    rows = sp.history("syn", store=store)
    assert [r["scenario_change"] for r in rows] == [False, False, True, False]
    out = CliRunner().invoke(app, ["history", "syn", "--store", str(store)]).output
    assert "scenario changed" in out


def test_the_api_gives_a_dataframe_with_pandas(tmp_path: Path) -> None:
    pytest.importorskip("pandas")
    store = _store(tmp_path, [(10000, 20.0), (10000, 21.0)])
    df = sp.history_dataframe("syn", store=store)
    assert list(df["degradation_pct"]) == [20.0, 21.0] and df["labels"][1] == {"run": "1"}


def test_a_run_s_store_lies_beside_its_run_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from secperf.history_command import run_store

    monkeypatch.delenv("SECPERF_STORE", raising=False)
    assert run_store(None, tmp_path / "out") == tmp_path / "out" / "history.sqlite"
    assert run_store(tmp_path / "s.sqlite", tmp_path / "out") == tmp_path / "s.sqlite"
    monkeypatch.setenv("SECPERF_STORE", str(tmp_path / "env.sqlite"))
    assert run_store(None, tmp_path / "out") is None  # store_path reads the variable
