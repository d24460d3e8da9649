"""[[paper]] rows: the source paper's numbers beside the run's, with a verdict each
(agrees / differs with the cause shown by a row of the same run / differs unexplained /
not measured), in summary.json, under the report's tables and as Markdown."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from secperf.cli import app
from secperf.errors import ScenarioError
from secperf.report import paper as paper_report
from secperf.results.paper import (
    AGREES,
    DIFFERS,
    EXPLAINED,
    UNMEASURED,
    UNRESOLVED,
    paper_verdicts,
)
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.scenario.loader import load_scenario
from secperf.scenario.paper import PaperRow, PaperTable, parse_selector, parse_tolerance

ROOT = Path(__file__).resolve().parents[2]
DATA_RUN = ROOT / "tests" / "data" / "runs" / "20261122T010203Z-quick"
cli = CliRunner()


def _row(**kw: Any) -> dict[str, Any]:
    base = {
        "workload": "tcp-rr",
        "point_id": "tcp-rr#0",
        "label": "tcp-rr",
        "metric": "tps",
        "unit": "trans/s",
        "higher_is_better": True,
        "variant": "acl",
    }
    return base | kw


def _table(figure: str, tolerance: str, values: str | None = None) -> dict[str, Any]:
    return {"figure": figure, "tolerance": tolerance, "values": values, "reason": "a test's"}


def _verdict(rows: list[dict[str, Any]], **paper: Any) -> dict[str, Any]:
    """The verdict of one row, its table's tolerance `tolerance` (x2) for changes and
    values alike."""
    tolerance = paper.pop("tolerance", "x2")
    raw = {"figure": "Table 1", "row": "r", "variant": "acl", "metric": "tps"} | paper
    table = _table("Table 1", tolerance, tolerance if tolerance.endswith("%") else None)
    if tolerance.endswith("%"):
        table["tolerance"] = "x2"
    (v,) = paper_verdicts({"paper": [raw], "paper_table": [table]}, rows, {}, 0.95)
    return v


# A 54 % drop of throughput: degradation +54 (worse), change -54 %.
DROP = _row(degradation_pct=54.0, degradation_ci_low=52.0, degradation_ci_high=56.0)


def test_a_drop_agrees_with_the_papers_drop_within_its_factor() -> None:
    v = _verdict([DROP], change="-60%")
    assert v["verdict"] == AGREES
    assert v["ours"] == "-54.0 % [-56.0, -52.0]"  # signed as the value moves
    assert _verdict([DROP], change="-20%")["verdict"] == DIFFERS  # 54/20 > 2
    assert _verdict([DROP], change="+60%")["verdict"] == DIFFERS  # the other way
    assert _verdict([DROP], change="-50%", tolerance="3pp")["verdict"] == DIFFERS
    assert _verdict([DROP], change="-50%", tolerance="5pp")["verdict"] == AGREES
    # a narrow interval around 0 that excludes the paper's -10 % is resolved: it differs
    none = _row(degradation_pct=0.0, degradation_ci_low=-0.1, degradation_ci_high=0.1)
    assert _verdict([none], change="-10%")["verdict"] == DIFFERS
    # a wide one that excludes the paper's change is resolved too
    away = _row(degradation_pct=-40.0, degradation_ci_low=-70.0, degradation_ci_high=-10.0)
    assert _verdict([away], change="-1%", tolerance="5pp")["verdict"] == DIFFERS


def test_a_ratio_reads_as_treatment_over_baseline() -> None:
    delay = _row(
        metric="delay_mean_us",
        higher_is_better=False,
        degradation_pct=870.0,
        degradation_ci_low=810.0,
        degradation_ci_high=930.0,
    )
    v = _verdict([delay], metric="delay_mean_us", ratio=10.2)
    assert v["verdict"] == AGREES and v["paper"] == "×10.2"
    assert v["ours"].startswith("×9.70")


def test_direction_needs_the_whole_interval_on_the_papers_side() -> None:
    wide = _row(degradation_pct=3.0, degradation_ci_low=-1.0, degradation_ci_high=7.0)
    assert _verdict([wide], change="-5%", tolerance="direction")["verdict"] == UNRESOLVED
    other_way = _row(degradation_pct=-5.0, degradation_ci_low=-7.0, degradation_ci_high=-3.0)
    assert _verdict([other_way], change="-5%", tolerance="direction")["verdict"] == DIFFERS
    assert _verdict([DROP], change="-5%", tolerance="direction")["verdict"] == AGREES


def test_a_value_is_compared_in_its_unit() -> None:
    row = _row(variant="baseline", mean=92.6, ci_low=92.0, ci_high=93.2, unit="Mbit/s")
    v = _verdict([row], variant="baseline", value=95.0, tolerance="5%")
    assert v["verdict"] == AGREES and v["paper"] == "95.0 Mbit/s"
    assert _verdict([row], variant="baseline", value=120.0, tolerance="5%")["verdict"] == DIFFERS


def test_a_difference_is_explained_only_by_a_row_measured_in_the_same_run() -> None:
    capped = _row(variant="acl-capped", degradation_pct=50.0, degradation_ci_low=45.0,
                  degradation_ci_high=55.0)  # fmt: skip
    small = _row(degradation_pct=5.0, degradation_ci_low=4.0, degradation_ci_high=6.0)
    cause = {"because": "the link limits", "shown_by": "acl-capped"}
    v = _verdict([small, capped], change="-54%", **cause)
    assert v["verdict"] == EXPLAINED
    assert v["shown"] == "-50.0 % [-55.0, -45.0]"
    assert "shown by acl-capped: -50.0 %" in paper_report.outcome(v)
    # the same cause, its row not measured: asserted, not shown, counted as unexplained
    v = _verdict([small], change="-54%", **cause)
    assert v["verdict"] == DIFFERS and "acl-capped was not measured" in v["why"]
    v = _verdict([small], change="-54%", because="the link limits")
    assert v["verdict"] == DIFFERS
    assert "asserted, not shown" in paper_report.outcome(v)


def test_a_cause_row_that_resolves_nothing_explains_nothing() -> None:
    small = _row(degradation_pct=5.0, degradation_ci_low=4.0, degradation_ci_high=6.0)
    cause = {"because": "the rules cost nothing", "shown_by": "acl-256"}

    def shown_by(lo: float, hi: float) -> dict[str, object]:
        other = _row(variant="acl-256", degradation_pct=-(lo + hi) / 2, degradation_ci_low=-hi,
                     degradation_ci_high=-lo)  # fmt: skip
        return _verdict([small, other], change="-54%", **cause)

    # an interval that holds 0 shows no effect, however wide or narrow (no "absence"
    # within the precision target explains a gap of 49 points)
    v = shown_by(-45.0, 10.0)
    assert v["verdict"] == DIFFERS
    assert "(a) its interval holds 0" in v["why"]
    assert "is asserted; not shown by acl-256" in paper_report.outcome(v)
    assert shown_by(-1.5, 1.0)["verdict"] == DIFFERS
    # an effect toward the paper that reaches the gap (-49 points) explains it
    assert shown_by(-60.0, -40.0)["verdict"] == EXPLAINED
    assert shown_by(-40.0, -30.0)["verdict"] == DIFFERS  # short of it: (b)


def test_a_row_the_run_lacks_is_not_measured_never_a_number() -> None:
    v = _verdict([DROP], variant="other", change="-54%")
    assert v["verdict"] == UNMEASURED and v["ours"] is None
    unpaired = _row(degradation_pct=None)
    assert _verdict([unpaired], change="-54%")["verdict"] == UNMEASURED


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({}, "exactly one of the paper's numbers"),
        ({"change": "-5%", "ratio": 1.2}, "exactly one"),
        ({"change": "-5%", "direction": "down"}, "exactly one"),
        ({"change": "5"}, ""),  # a number alone is %
        ({"change": "five"}, "expected the paper's change"),
        ({"change": "-5%", "tolerance": "x2"}, "cannot set its own tolerance"),
        ({"change": "-5%", "shown_by": "x"}, "say it in because"),
        ({"change": "-5%", "explains": 0.5}, "name it in shown_by"),
        ({"change": "-5%", "because": "b", "shown_by": "x", "explains": 1.5}, "at most 1"),
    ],
)
def test_bad_paper_rows_say_what_is_wrong(fields: dict[str, Any], says: str) -> None:
    raw = {"figure": "F", "row": "r", "variant": "acl", "metric": "tps"} | fields
    if not says:
        assert PaperRow.model_validate(raw).paper_change == 5.0
        return
    with pytest.raises(ValueError, match=says):
        PaperRow.model_validate(raw)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"tolerance": "x1"}, "above 1"),
        ({"tolerance": "close"}, "expected a tolerance"),
        ({"tolerance": "x2", "values": "5pp"}, "a value is compared within a factor"),
        ({"tolerance": "x2", "reason": " "}, "say why this tolerance"),
    ],
)
def test_bad_paper_tables_say_what_is_wrong(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        PaperTable.model_validate({"figure": "F", "reason": "r"} | fields)


def test_tolerances_print_as_written() -> None:
    written = ("x2", "×1.5", "5pp", "x2 or 10pp", "10%", "direction")
    assert [str(parse_tolerance(t)) for t in written] == [
        "x2",
        "x1.5",
        "5pp",
        "x2 or 10pp",
        "10%",
        "direction",
    ]


def _scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "q.toml"
    path.write_text((ROOT / "scenarios" / "quick.toml").read_text() + "\n" + text)
    return path


def test_scenario_paper_rows_name_what_exists(tmp_path: Path) -> None:
    good = (
        '[[paper_table]]\nfigure = "Fig. 1"\ntolerance = "x2"\nreason = "r"\n'
        '[[paper]]\nfigure = "Fig. 1"\nrow = "set"\nvariant = "acl-set"\nworkload = "tcp-crr"\n'
        'metric = "cps"\nchange = "-10%"\nbecause = "b"\nshown_by = "acl-linear tcp-crr cps"\n'
    )
    sc = load_scenario(_scenario(tmp_path, good))
    assert sc.paper[0].paper_change == -10.0
    assert sc.to_json_dict()["paper_table"][0]["tolerance"] == "x2"
    for bad, says in [
        (good.replace('variant = "acl-set"', 'variant = "acl-st"'), "not a variant"),
        (good.replace('workload = "tcp-crr"', 'workload = "crr"'), "not a workload"),
        (good.replace('metric = "cps"', 'metric = "cpx"'), "no workload here measures"),
        (good.replace('"acl-linear tcp-crr cps"', '"acl-lin"'), "shown_by names 'acl-lin'"),
        (good.replace('"acl-linear tcp-crr cps"', '"acl-linear crr"'), "neither a workload"),
    ]:
        with pytest.raises(ScenarioError, match=says):
            load_scenario(_scenario(tmp_path, bad))


def test_a_run_carries_its_verdicts_under_its_tables_and_as_markdown(tmp_path: Path) -> None:
    run_path = shutil.copytree(DATA_RUN, tmp_path / "run")
    meta = json.loads((run_path / "run.json").read_text())
    meta["scenario"]["paper_table"] = [_table("Table 2", "x2")]
    meta["scenario"]["paper"] = [
        # acl-linear is ~25 % slower than acl-set on tcp-rr (75 against ~100 trans/s)
        {
            "figure": "Table 2",
            "row": "linear vs set",
            "variant": "acl-linear",
            "against": "acl-set",
            "workload": "tcp-rr",
            "metric": "tps",
            "change": "-25%",
        },
        {"figure": "Table 2", "row": "gone", "variant": "nope", "metric": "tps", "ratio": 0.5},
    ]
    (run_path / "run.json").write_text(json.dumps(meta))
    summary = build_summary(RunDir.open(run_path))
    agrees, gone = summary["paper"]
    assert agrees["verdict"] == AGREES, agrees
    assert agrees["ours_mean"] == pytest.approx(-25.0, abs=1.0)  # paired by round
    assert gone["verdict"] == UNMEASURED
    shown = cli.invoke(app, ["report", str(run_path), "--details"])
    out = shown.output
    assert "Table 2, linear vs set: paper -25 %, ours -25." in out
    # under the tcp-rr table, before the next workload's
    tables = out.index("tcp-rr — Transaction rate")
    assert tables < out.index("Table 2, linear vs set") < out.index("tcp-rr — Service demand")
    assert "Table 2: 2 rows; 1 agrees, 1 not measured (50 % of rows agree or are" in out
    md = cli.invoke(app, ["report", str(run_path), "--paper-markdown"])
    assert md.exit_code == 0, md.output
    assert md.output.startswith("| Paper | Row | Paper's | Ours | Verdict |")
    assert "| Table 2 | linear vs set | -25 % | -25." in md.output
    assert (run_path / "report.html").read_text().count('class="verdict"') == 1


def test_shown_by_reads_a_swept_variant_whose_name_holds_spaces() -> None:
    sel = parse_selector("vtun[cipher=x lzo=y] vs plain[a=1 b=2] tcp-rr#1 tps", {"tps"})
    assert (sel.variant, sel.against, sel.workload, sel.metric) == (
        "vtun[cipher=x lzo=y]",
        "plain[a=1 b=2]",
        "tcp-rr#1",
        "tps",
    )


def test_an_interval_too_wide_to_compare_is_not_resolved_never_agreed() -> None:
    wide = _row(degradation_pct=20.0, degradation_ci_low=-80.0, degradation_ci_high=119.5)
    v = _verdict([wide], change="-25%")
    assert v["verdict"] == UNRESOLVED and "holds 0" in v["why"]
    loose = _row(degradation_pct=4.0, degradation_ci_low=-2.0, degradation_ci_high=10.0)
    assert _verdict([loose], change="-5%", tolerance="5pp")["verdict"] == UNRESOLVED
    assert _verdict([DROP], change="-50%", tolerance="5pp")["verdict"] == AGREES
    # a narrow interval around 0 that excludes the paper's -10 % is resolved: it differs
    none = _row(degradation_pct=0.0, degradation_ci_low=-0.1, degradation_ci_high=0.1)
    assert _verdict([none], change="-10%")["verdict"] == DIFFERS
    # a wide one that excludes the paper's change is resolved too
    away = _row(degradation_pct=-40.0, degradation_ci_low=-70.0, degradation_ci_high=-10.0)
    assert _verdict([away], change="-1%", tolerance="5pp")["verdict"] == DIFFERS


def test_a_found_value_against_a_censored_one_is_judged_by_its_bound() -> None:
    # efw-64 denied at 14,200 packets/s; efw-1 not denied up to 71,681: at most ×0.20
    point = {
        "workload": "min-flood",
        "point_id": "min-flood#0",
        "label": "min-flood",
        "metric": "min_flood_rate",
        "unit": "packets/s",
        "higher_is_better": True,
    }
    one = {
        **point,
        "variant": "efw-1",
        "n": 0,
        "censored_n": 3,
        "degradation_pct": None,
        "search": {"at_least_n": 3, "at_least_bound": 71_681.0},
    }
    many = {
        **point,
        "variant": "efw-64",
        "n": 3,
        "mean": 14_200.0,
        "ci_low": 14_000.0,
        "ci_high": 14_300.0,
        "degradation_pct": None,
        "search": {"found_n": 3},
    }
    rows = [one, many]  # fmt: skip

    def judged(ratio: float, tolerance: str) -> dict[str, Any]:
        raw = {"figure": "Fig. 3b", "row": "64 rules", "variant": "efw-64", "against": "efw-1",
               "workload": "min-flood", "metric": "min_flood_rate", "ratio": ratio}  # fmt: skip
        scenario = {"paper": [raw], "paper_table": [_table("Fig. 3b", tolerance)]}
        (v,) = paper_verdicts(scenario, rows, {}, 0.95)
        return v

    # a change of -100 % to -80 %: within x1.5 of the paper's -77.5 % (×0.225) at both ends
    agrees = judged(0.225, "x1.5")
    assert agrees["verdict"] == AGREES and agrees["ours"] == "≤ ×0.199 (bound)"
    v = judged(0.15, "x1.1")  # -85 % ×1.1: -93.5 to -77.3; -80 holds, -100 does not
    assert v["verdict"] == UNRESOLVED
    assert "bound reaches both inside and outside x1.1" in v["why"]
    assert judged(0.6, "x1.5")["verdict"] == DIFFERS  # -40 % ×1.5: never -80 % or less
    assert paper_report.outcome(v) != "not measured"
