"""The gate of a change review: thresholds in the scenario and on the command line,
judged against intervals, exit code 5 and JUnit XML; compare across days."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from secperf.cli import app
from secperf.cli_common import EXIT_THRESHOLD
from secperf.errors import ScenarioError
from secperf.report.compare import compare_runs
from secperf.report.gate import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    UNMEASURED,
    Estimate,
    GateError,
    check_expectations,
    decide,
    row_degradation,
    run_figures,
)
from secperf.results.metrics import METRICS
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.scenario.expect import Expect, parse_bound, parse_expect
from secperf.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parents[2]
DATA_RUN = ROOT / "tests" / "data" / "runs" / "20261122T010203Z-quick"
cli = CliRunner()


def test_expect_text_reads_in_its_order() -> None:
    e = parse_expect("acl-new tcp-crr degradation < 10%", METRICS)
    assert (e.variant, e.workload, e.metric) == ("acl-new", "tcp-crr", None)
    assert e.degradation is not None and str(e.degradation) == "< 10 %"
    e = parse_expect("proposed vs current tcp-rr tps degradation<=5", METRICS)
    assert (e.variant, e.against, e.workload, e.metric) == ("proposed", "current", "tcp-rr", "tps")
    e = parse_expect("acl tcp-stream message=16KiB throughput >= 5000", METRICS)
    assert (e.workload, e.point, e.metric) == ("tcp-stream", "message=16KiB", "throughput")
    assert e.value is not None and e.value.op == ">=" and e.value.number == 5000
    e = parse_expect("acl degradation < 10", METRICS)
    assert e.workload is None and e.metric is None
    assert e.describe() == "acl degradation < 10"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("acl tcp-crr degradation", "no bound"),
        ("acl tcp-crr bogus < 10", "must be 'degradation' or a metric"),
        ("acl a b degradation < 10", "at most one workload"),
        ("baseline degradation < 10", "the baseline has no degradation"),
        ("acl vs acl degradation < 10", "against names the variant itself"),
        ("acl tps < ten", "expected a bound"),
    ],
)
def test_bad_expect_text_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_expect(text, METRICS)


@pytest.mark.parametrize(
    ("estimate", "rule", "status"),
    [
        (Estimate(25.0, 24.0, 26.0), "interval", FAIL),  # the whole interval past 10
        (Estimate(12.0, 8.0, 16.0), "interval", INCONCLUSIVE),  # holds the threshold
        (Estimate(12.0, 8.0, 16.0), "mean", FAIL),  # the mean is past it
        (Estimate(5.0, 4.0, 6.0), "interval", PASS),
        (Estimate(5.0, 1.0, 11.0), "mean", PASS),
        (Estimate(5.0), "interval", UNMEASURED),  # no interval: never a pass
        (Estimate(None, why="no pair"), "mean", UNMEASURED),
    ],
)
def test_the_rule_decides_with_the_interval_or_the_mean(
    estimate: Estimate, rule: Any, status: str
) -> None:
    assert decide(estimate, parse_bound("< 10%"), rule) == status


def test_a_lower_bound_is_judged_the_other_way() -> None:
    bound = parse_bound(">= 5000")
    assert decide(Estimate(4000.0, 3900.0, 4100.0), bound, "interval") == FAIL
    assert decide(Estimate(6000.0, 5900.0, 6100.0), bound, "interval") == PASS


def write_scenario(tmp_path: Path, expect: str) -> Path:
    text = (ROOT / "scenarios" / "quick.toml").read_text() + "\n" + expect
    path = tmp_path / "q.toml"
    path.write_text(text)
    return path


def test_scenario_expectations_load_and_bad_ones_name_their_line(tmp_path: Path) -> None:
    good = write_scenario(
        tmp_path,
        '[[expect]]\nvariant = "acl-set"\nworkload = "tcp-crr"\ndegradation = "< 5%"\n'
        '[[expect]]\nvariant = "acl-linear"\nagainst = "acl-set"\nmetric = "tps"\n'
        'degradation = "< 50%"\nrule = "mean"\n',
    )
    sc = load_scenario(good)
    assert [e.describe() for e in sc.expect] == [
        "acl-set tcp-crr degradation < 5 %",
        "acl-linear vs acl-set tps degradation < 50 %",
    ]
    assert sc.expect[1].rule == "mean"
    # it round-trips through run.json
    assert sc.to_json_dict()["expect"][0]["degradation"] == "< 5 %"
    for bad, key, says in [
        ('[[expect]]\nvariant = "acl-lin"\ndegradation = "< 5%"\n', "variant", "not a variant"),
        (
            '[[expect]]\nvariant = "acl-set"\nworkload = "x"\ndegradation = "< 5%"\n',
            "workload",
            "not a workload",
        ),
        (
            '[[expect]]\nvariant = "acl-set"\nmetric = "tps"\nvalue = "> 5 %"\n',
            "value",
            "measured in trans/s",
        ),
        (
            '[[expect]]\nvariant = "acl-set"\ndegradation = "< 5"\nvalue = "> 1"\n',
            "",
            "exactly one",
        ),
        (
            '[[expect]]\nvariant = "acl-set"\ndegradation = "5%"\n',
            "degradation",
            "expected a bound",
        ),
    ]:
        path = write_scenario(tmp_path, bad)
        lines = path.read_text().splitlines()
        head = len(lines) - bad.count("\n") + 1  # the [[expect]] line
        line = next((i + 1 for i, x in enumerate(lines) if key and x.startswith(f"{key} =")), head)
        with pytest.raises(ScenarioError, match=says) as info:
            load_scenario(path)
        assert f"q.toml:{line}:" in str(info.value), (bad, line, str(info.value))


def data_run(tmp_path: Path, name: str = "run") -> Path:
    return shutil.copytree(DATA_RUN, tmp_path / name)


def test_a_threshold_on_a_run_fails_with_exit_5_and_a_junit_file_naming_it(tmp_path: Path) -> None:
    run = data_run(tmp_path)
    junit = tmp_path / "gate.xml"
    result = cli.invoke(
        app,
        [
            "report",
            str(run),
            "--expect",
            "acl-linear tcp-rr degradation < 10%",
            "--junit",
            str(junit),
        ],
    )
    assert result.exit_code == EXIT_THRESHOLD, result.output
    assert "FAIL: acl-linear · tcp-rr request=1 response=1 · Transaction rate" in result.output
    assert "degradation +25.0 % [+24.3, +25.6], expected < 10 %" in result.output
    assert "rule interval" in result.output and "gate: FAILED" in result.output
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "2" and suite.get("tests") == "2"
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert any("acl-linear" in str(n) and "Transaction rate" in str(n) for n in failed)
    # a bound the variant meets passes
    ok = cli.invoke(
        app,
        [
            "report",
            str(run),
            "--expect",
            "acl-linear tcp-rr degradation < 40%",
            "--junit",
            str(junit),
        ],
    )
    assert ok.exit_code == 0, ok.output
    assert ET.parse(junit).getroot().get("failures") == "0"


def test_a_variant_against_another_is_paired_by_round(tmp_path: Path) -> None:
    run = RunDir.open(data_run(tmp_path))
    summary = build_summary(run)
    (outcome,) = check_expectations(
        [parse_expect("acl-linear vs acl-set tcp-rr tps degradation < 10%", METRICS)],
        run_figures(summary, run),
    )
    assert outcome.status == FAIL
    assert outcome.estimate.mean == pytest.approx(24.8, abs=0.5)  # 75 against ~100
    (same,) = check_expectations(
        [parse_expect("acl-set vs acl-linear tcp-rr tps degradation < 0%", METRICS)],
        run_figures(summary, run),
    )
    assert same.status == PASS  # the set is ~33 % faster than the chain


def test_an_expectation_that_matches_nothing_is_an_error_not_a_pass(tmp_path: Path) -> None:
    run = RunDir.open(data_run(tmp_path))
    with pytest.raises(GateError, match="matches no row"):
        check_expectations(
            [Expect(variant="acl-set", metric="loss", degradation=parse_bound("< 1"))],
            run_figures(build_summary(run), run),
        )
    result = cli.invoke(app, ["report", str(run.path), "--expect", "nope degradation < 10"])
    assert result.exit_code == 2 and "matches no row" in result.output


def rr_run(root: Path, per_variant: dict[str, list[float]], **meta: Any) -> Path:
    run = RunDir.create(root, "cmp")
    run.write_run_json(
        {
            "scenario": {"name": "cmp", "repeat": {"confidence": 0.95}},
            "host": {"kernel": "6.1.0", "cpus": 2, "cpu_model": "X"},
            "placements": {"baseline": [], "acl": [{"kind": "acl", "hosts": ["dut"]}]},
            **meta,
        }
    )
    for variant, values in per_variant.items():
        for rep, tps in enumerate(values):
            tags = {
                "variant": variant,
                "workload": "tcp-rr",
                "point_id": "tcp-rr#0",
                "label": "",
                "point": {"request": 1, "response": 1},
                "rep": rep,
            }
            record = {
                "type": "result",
                "kind": "rr",
                "transactions": tps * 5,
                "transactions_per_second": tps,
                "machine_cpu": {"busy_s": 5.0},
            }
            run.append_record(tags, record)
    return run.path


BEFORE = {"baseline": [100, 102, 98, 100], "acl": [90, 91, 89, 90]}


def test_compare_gate_fails_a_regression_and_passes_a_pair_without_one(tmp_path: Path) -> None:
    a = rr_run(tmp_path / "a", BEFORE)
    slower = rr_run(tmp_path / "b", {"baseline": [101, 99, 100, 100], "acl": [75, 76, 74, 75]})
    same = rr_run(tmp_path / "c", {"baseline": [101, 99, 100, 100], "acl": [90, 90, 91, 89]})
    junit = tmp_path / "compare.xml"
    expect = ["--expect", "acl tcp-rr tps degradation < 5%", "--junit", str(junit)]
    failed = cli.invoke(app, ["compare", str(a), str(slower), *expect])
    assert failed.exit_code == EXIT_THRESHOLD, failed.output
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    assert len(cases) == 1 and cases[0].find("failure") is not None
    assert "acl" in str(cases[0].get("name")) and "Transaction rate" in str(cases[0].get("name"))
    passed = cli.invoke(app, ["compare", str(a), str(same), *expect])
    assert passed.exit_code == 0, passed.output
    assert ET.parse(junit).getroot().get("failures") == "0"
    as_json = cli.invoke(app, ["compare", str(a), str(slower), "--json", *expect[:2]])
    assert as_json.exit_code == EXIT_THRESHOLD
    gate = json.loads(as_json.stdout)["gate"]
    assert gate[0]["status"] == FAIL and gate[0]["mean"] == pytest.approx(16.7, abs=0.1)


def test_compare_matches_points_by_label_not_by_position(tmp_path: Path) -> None:
    a = RunDir.open(rr_run(tmp_path / "a", BEFORE))
    b = RunDir.open(rr_run(tmp_path / "b", BEFORE))
    # B's sweep grew a point before this one: its index moved, its label did not
    lines = [json.loads(x) for x in b.records_path.read_text().splitlines()]
    with b.records_path.open("w") as f:
        for line in lines:
            f.write(json.dumps({**line, "point_id": "tcp-rr#1"}) + "\n")
    rows = compare_runs(a, b)
    assert rows and all(r["point_id"] == "tcp-rr#0" and r["point_id_b"] == "tcp-rr#1" for r in rows)
    assert all(r["incomparable"] is None for r in rows)


def test_compare_refuses_rows_whose_testbed_differs(tmp_path: Path) -> None:
    a = rr_run(tmp_path / "a", BEFORE)
    b = rr_run(
        tmp_path / "b",
        BEFORE,
        host={"kernel": "6.9.0", "cpus": 2, "cpu_model": "X"},
        placements={"baseline": [], "acl": [{"kind": "acl", "hosts": ["server"]}]},
    )
    rows = compare_runs(RunDir.open(a), RunDir.open(b))
    acl = next(r for r in rows if r["variant"] == "acl")
    assert "kernel: A 6.1.0, B 6.9.0" in acl["incomparable"]
    assert "acl's mechanisms ran on acl on dut in A, acl on server in B" in acl["incomparable"]
    expect = ["--expect", "acl tcp-rr tps degradation < 5%"]
    refused = cli.invoke(app, ["compare", str(a), str(b), *expect])
    assert refused.exit_code == EXIT_THRESHOLD
    assert "not comparable" in refused.output and "the runs' testbeds differ" in refused.output
    allowed = cli.invoke(app, ["compare", str(a), str(b), *expect, "--allow-different"])
    assert allowed.exit_code == 0, allowed.output


def test_the_report_shows_the_scenarios_gate(tmp_path: Path) -> None:
    run = RunDir.open(data_run(tmp_path))
    meta = run.read_run_json()
    meta["scenario"]["expect"] = [{"variant": "acl-linear", "degradation": "< 10%"}]
    run.write_run_json(meta)
    result = cli.invoke(app, ["report", str(run.path)])
    assert result.exit_code == EXIT_THRESHOLD
    html = run.report_html_path.read_text()
    assert 'class="gate failed"' in html and "gate: FAILED" in html


def test_an_unreadable_expectation_in_run_json_is_said_not_skipped(tmp_path: Path) -> None:
    run = RunDir.open(data_run(tmp_path))
    meta = run.read_run_json()
    meta["scenario"]["expect"] = [{"variant": "acl-linear", "degradation": "about 10"}]
    run.write_run_json(meta)
    result = cli.invoke(app, ["report", str(run.path)])
    assert result.exit_code == 4
    assert "scenario.expect[0] cannot be read: expected a bound" in result.output


def test_two_paired_rounds_give_the_gate_no_interval_to_pass_on() -> None:
    # a summary written before the rule stored a 1-degree-of-freedom interval for 2 rounds
    two = {"degradation_pct": 1.0, "degradation_ci_low": -80.0, "degradation_ci_high": 82.0}
    estimate = row_degradation({**two, "degradation_n": 2})
    assert (estimate.low, estimate.high) == (None, None)
    assert estimate.why == "2 paired rounds, no interval"
    three = row_degradation({**two, "degradation_n": 3})
    assert (three.low, three.high) == (-80.0, 82.0)
