"""The run directory and the summary derived from it alone."""

from __future__ import annotations

import json
import math
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from secperf.errors import SecperfError
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.results.upgrade import FORMAT

DATA_RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "20261122T010203Z-quick"

Values = dict[tuple[str, str, str], list[float | None]]  # (workload, point_id, variant)


def rr_result(tps: float) -> dict[str, Any]:
    return {
        "type": "result",
        "kind": "rr",
        "protocol": "tcp",
        "transactions": tps * 5,
        "transactions_per_second": tps,
        "latency_us": {"count": 10, "mean": 1e6 / tps, "p99": 2e6 / tps},
        "machine_cpu": {"busy_s": 5.0, "total_s": 10.0, "cpus": 2},
    }


def make_run(
    root: Path,
    values: Values,
    *,
    variants: tuple[str, ...] = ("acl",),
    workloads: tuple[str, ...] = ("tcp-rr",),
    halfwidth_pct: float = 2.0,
    stops: list[dict[str, Any]] | None = None,
) -> RunDir:
    """A run whose records are written in the order `values` lists them (rep by rep)."""
    run = RunDir.create(root, "t")
    run.write_run_json(
        {
            "scenario": {
                "name": "t",
                "testbed": {"baseline": "direct"},
                "repeat": {"min": 2, "max": 6, "confidence": 0.95, "halfwidth_pct": halfwidth_pct},
                "variants": {v: {"mechanisms": []} for v in variants},
                "workloads": [{"name": w, "kind": "rr"} for w in workloads],
            },
            "host": {"kernel": "6.1.0-test", "cpus": 2},
            "status": "complete",
            "stops": stops or [],
        }
    )
    reps = max(len(v) for v in values.values())
    for rep in range(reps):
        for (workload, point_id, variant), series in values.items():
            if rep >= len(series) or series[rep] is None:
                continue
            tags = {
                "variant": variant,
                "workload": workload,
                "point_id": point_id,
                "point": {"request": 1, "response": 1 + int(point_id.rpartition("#")[2])},
                "label": f"label of {point_id}",
                "rep": rep,
            }
            run.append_record(tags, {"type": "start", "t": 0.0, "format": 1})
            value = series[rep]
            assert value is not None
            run.append_record(tags, rr_result(value))
    return run


def rows_of(summary: dict[str, Any], metric: str = "tps") -> list[dict[str, Any]]:
    return [r for r in summary["rows"] if r["metric"] == metric]


# -- run directory ----------------------------------------------------------------


def test_create_names_by_utc_time_and_scenario_and_stays_unique(tmp_path: Path) -> None:
    when = datetime(2026, 11, 22, 1, 2, 3, tzinfo=UTC)
    a = RunDir.create(tmp_path, "quick", now=when)
    b = RunDir.create(tmp_path, "quick", now=when)
    assert a.name == "20261122T010203Z-quick"
    assert b.name != a.name and b.name.startswith("20261122T010203Z-quick")
    assert a.files_dir.is_dir()
    c = RunDir.create(tmp_path, "../../etc odd name")
    assert c.path.parent == tmp_path
    assert re.fullmatch(r"\d{8}T\d{6}Z-[A-Za-z0-9._-]+", c.name)


def test_open_refuses_a_non_run_dir_and_a_wrong_format(tmp_path: Path) -> None:
    with pytest.raises(SecperfError) as info:
        RunDir.open(tmp_path)
    assert "run.json" in str(info.value) and info.value.fix
    (tmp_path / "run.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(SecperfError, match="format 99"):
        RunDir.open(tmp_path)


def test_run_json_is_the_current_format_and_rewritable(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "x")
    run.write_run_json({"status": "running", "scenario": {"name": "x"}})
    run.update_run_json(status="interrupted")
    meta = RunDir.open(run.path).read_run_json()
    assert meta["format"] == FORMAT and meta["status"] == "interrupted"
    assert meta["secperf_version"]


def test_records_are_on_disk_at_once_and_tagged(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "x")
    tags = {"variant": "baseline", "workload": "w", "point_id": "w#0", "point": {}, "rep": 0}
    assert run.append_record(tags, {"type": "start"}) == 0
    assert run.append_record(tags, {"type": "result", "kind": "rr"}) == 1
    # read with a fresh object and the raw file: nothing is buffered in the writer
    raw = run.records_path.read_text().splitlines()
    assert len(raw) == 2
    first = json.loads(raw[0])
    assert first["variant"] == "baseline" and first["seq"] == 0
    assert first["record"] == {"type": "start"}
    assert run.append_record({**tags, "seq": 40}, {"type": "result"}) == 40
    assert [line["seq"] for line in RunDir(run.path).iter_records()] == [0, 1, 40]


def test_reopened_run_continues_seq(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "x")
    run.write_run_json({})
    run.append_record({"rep": 0}, {"type": "start"})
    again = RunDir.open(run.path)
    assert again.append_record({"rep": 1}, {"type": "start"}) == 1


def test_a_cut_last_line_is_skipped_and_a_damaged_middle_line_is_an_error(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "x")
    run.append_record({"rep": 0}, {"type": "start"})
    with run.records_path.open("a") as f:
        f.write('{"rep": 1, "record": {"ty')  # killed mid-write
    assert len(list(run.iter_records())) == 1
    with run.records_path.open("a") as f:
        f.write("\n" + json.dumps({"rep": 2, "record": {}}) + "\n")
    with pytest.raises(SecperfError) as info:
        list(run.iter_records())
    assert info.value.where is not None and info.value.where.endswith(":2")


# -- summary ------------------------------------------------------------------------


def test_means_and_paired_degradation(tmp_path: Path) -> None:
    run = make_run(
        tmp_path,
        {
            ("tcp-rr", "tcp-rr#0", "baseline"): [100, 102, 98, 100],
            ("tcp-rr", "tcp-rr#0", "acl"): [75, 76, 74, 75],
        },
    )
    summary = build_summary(run, 0.95)
    json.dumps(summary, allow_nan=False)  # JSON-ready, no NaN
    assert summary["format"] == FORMAT and summary["baseline"] == "direct"
    base, acl = rows_of(summary)
    assert (base["variant"], acl["variant"]) == ("baseline", "acl")
    assert base["mean"] == pytest.approx(100.0) and base["n"] == 4
    assert acl["mean"] == pytest.approx(75.0)
    assert base["ci_low"] < 100 < base["ci_high"]
    assert base["degradation_pct"] is None and base["baseline_mean"] is None
    assert acl["baseline_mean"] == pytest.approx(100.0)
    assert acl["degradation_pct"] == pytest.approx(25.0, abs=0.05)
    assert 0 < acl["degradation_ci_low"] < 25.0 < acl["degradation_ci_high"] < 27
    assert acl["significant"] is True
    assert acl["unit"] == "trans/s" and acl["primary"] and acl["higher_is_better"]
    # latency is lower-is-better: 75 tps is 1/75 s per transaction, a third worse
    lat = next(r for r in rows_of(summary, "latency_mean_us") if r["variant"] == "acl")
    assert lat["degradation_pct"] == pytest.approx(33.3, abs=0.2)


def test_an_insignificant_change_is_not_flagged(tmp_path: Path) -> None:
    run = make_run(
        tmp_path,
        {
            ("tcp-rr", "tcp-rr#0", "baseline"): [100, 102, 98, 100],
            ("tcp-rr", "tcp-rr#0", "acl"): [101, 101, 99, 99],
        },
    )
    acl = rows_of(build_summary(run, 0.95))[1]
    assert acl["degradation_ci_low"] < 0 < acl["degradation_ci_high"]
    assert acl["significant"] is False


def test_degradation_pairs_by_rep(tmp_path: Path) -> None:
    run = make_run(
        tmp_path,
        {
            ("tcp-rr", "tcp-rr#0", "baseline"): [100, 102, 98, 100],
            # rep 1 missing for the variant: baseline's 102 must not pair with 74
            ("tcp-rr", "tcp-rr#0", "acl"): [75, None, 73.5, 75],
        },
    )
    base, acl = rows_of(build_summary(run, 0.95))
    assert base["n"] == 4 and acl["n"] == 3 and acl["degradation_n"] == 3
    assert acl["degradation_pct"] == pytest.approx(25.0, abs=0.01)


def test_ci_target_comes_from_the_scenario(tmp_path: Path) -> None:
    values: Values = {("tcp-rr", "tcp-rr#0", "baseline"): [100, 102, 98, 100]}
    wide = build_summary(make_run(tmp_path / "a", values, halfwidth_pct=5.0), 0.95)
    narrow = build_summary(make_run(tmp_path / "b", values, halfwidth_pct=0.5), 0.95)
    assert rows_of(wide)[0]["ci_target_met"] is True
    assert rows_of(narrow)[0]["ci_target_met"] is False
    assert narrow["halfwidth_target_pct"] == 0.5


def test_confidence_defaults_to_the_scenario(tmp_path: Path) -> None:
    values: Values = {("tcp-rr", "tcp-rr#0", "baseline"): [100, 102, 98, 100]}
    run = make_run(tmp_path, values)
    assert build_summary(run)["confidence"] == 0.95
    s99 = rows_of(build_summary(run, 0.99))[0]
    s95 = rows_of(build_summary(run, 0.95))[0]
    assert s99["ci_high"] - s99["ci_low"] > s95["ci_high"] - s95["ci_low"]


def test_rows_follow_scenario_order_not_record_order(tmp_path: Path) -> None:
    values: Values = {
        ("second", "second#1", "z-first"): [1, 1],
        ("second", "second#0", "a-second"): [1, 1],
        ("second", "second#0", "z-first"): [1, 1],
        ("first", "first#0", "a-second"): [1, 1],
        ("second", "second#1", "baseline"): [1, 1],
        ("second", "second#0", "baseline"): [1, 1],
        ("first", "first#0", "baseline"): [1, 1],
    }
    run = make_run(
        tmp_path, values, variants=("z-first", "a-second"), workloads=("first", "second")
    )
    order = [(r["point_id"], r["variant"]) for r in rows_of(build_summary(run, 0.95))]
    assert order == [
        ("first#0", "baseline"),
        ("first#0", "a-second"),
        ("second#0", "baseline"),
        ("second#0", "z-first"),
        ("second#0", "a-second"),
        ("second#1", "baseline"),
        ("second#1", "z-first"),
    ]


def test_stop_reasons_are_carried(tmp_path: Path) -> None:
    stops = [{"point_id": "tcp-rr#0", "reason": "max_reached", "reps": 6}]
    values: Values = {("tcp-rr", "tcp-rr#0", "baseline"): [100, 130]}
    row = rows_of(build_summary(make_run(tmp_path, values, stops=stops), 0.95))[0]
    assert row["stop_reason"] == "max_reached" and row["stop_reps"] == 6


def test_a_single_repetition_has_a_mean_but_no_interval(tmp_path: Path) -> None:
    values: Values = {
        ("tcp-rr", "tcp-rr#0", "baseline"): [100],
        ("tcp-rr", "tcp-rr#0", "acl"): [80],
    }
    summary = build_summary(make_run(tmp_path, values), 0.95)
    json.dumps(summary, allow_nan=False)
    base, acl = rows_of(summary)
    assert base["mean"] == 100 and base["ci_low"] is None and base["ci_target_met"] is False
    assert acl["degradation_pct"] == pytest.approx(20.0) and acl["degradation_ci_low"] is None


def test_shipped_synthetic_run_summarises(tmp_path: Path) -> None:
    run = RunDir.open(shutil.copytree(DATA_RUN, tmp_path / DATA_RUN.name))
    summary = build_summary(run)
    assert [e["variant"] for e in summary["errors"]] == ["acl-linear"]  # its failed rep
    tps = {r["variant"]: r for r in rows_of(summary)}
    assert tps["baseline"]["n"] == 5 and tps["acl-linear"]["n"] == 4
    assert tps["acl-linear"]["degradation_pct"] == pytest.approx(25.0, abs=0.1)
    workloads = list(dict.fromkeys(r["workload"] for r in summary["rows"]))
    assert workloads == ["tcp-rr", "tcp-stream"]
    run.write_summary(summary)
    assert run.read_summary() == json.loads(json.dumps(summary))


def test_an_unswept_point_is_labelled_by_its_workload(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "x")
    run.write_run_json({"scenario": {"name": "x"}})
    tags = {"variant": "baseline", "workload": "tcp-rr", "point_id": "tcp-rr#0", "label": ""}
    for rep in range(2):
        run.append_record({**tags, "rep": rep}, rr_result(100.0 + rep))
    assert rows_of(build_summary(run, 0.95))[0]["label"] == "tcp-rr"


# -- CPU per host ------------------------------------------------------------------


def _cpu_run(root: Path, hosts: dict[str, float], busy: float, irq: bool | None) -> RunDir:
    run = RunDir.create(root, "cpu")
    run.write_run_json(
        {
            "scenario": {"name": "cpu", "workloads": [{"name": "tcp-rr", "kind": "rr"}]},
            "host": {"cpus": 2, "irq_time_accounting": irq},
            "status": "complete",
        }
    )
    for rep in range(3):
        rec = rr_result(1000.0)  # 5000 transactions
        rec["host_cpu"] = hosts
        rec["machine_cpu"] = {
            "busy_s": busy,
            "total_s": 10.0,
            "cpus": 2,
            "softirq_s": 1.0,
            "irq_s": 0.0,
        }
        tags = {"variant": "baseline", "workload": "tcp-rr", "point_id": "tcp-rr#0", "rep": rep}
        run.append_record(tags, rec)
    return run


def test_cpu_per_host_per_unit_and_percent(tmp_path: Path) -> None:
    run = _cpu_run(tmp_path, {"client": 2.0, "dut": 0.0, "server": 2.0}, busy=4.1, irq=False)
    summary = build_summary(run)
    (cpu,) = summary["cpu"]
    assert cpu["unit"] == "trans" and cpu["n"] == 3 and cpu["hosts"] == ["client", "dut", "server"]
    assert cpu["per_unit_us"]["host:client"]["mean"] == pytest.approx(400.0)  # 2 s / 5000
    assert cpu["percent"]["host:client"]["mean"] == pytest.approx(40.0)  # 2 s of a 5 s window
    assert cpu["per_unit_us"]["testbed"]["mean"] == pytest.approx(800.0)
    assert cpu["per_unit_us"]["machine"]["mean"] == pytest.approx(820.0)
    assert cpu["softirq_in_hosts"] is True
    assert cpu["accounted_pct"] == pytest.approx(4.0 / 4.1 * 100)
    assert cpu["reconciliation_flag"] is False  # 2.4 % apart: within 5 %
    sd = rows_of(summary, "sd_cpu_us_per_tx")[0]
    assert sd["mean"] == pytest.approx(800.0)  # the testbed, not the machine's 820


def test_a_gap_between_the_parts_and_the_machine_is_flagged(tmp_path: Path) -> None:
    run = _cpu_run(tmp_path, {"client": 1.0, "server": 1.0}, busy=4.0, irq=False)
    (cpu,) = build_summary(run)["cpu"]
    assert cpu["accounted_pct"] == pytest.approx(50.0)
    assert cpu["reconciliation_flag"] is True


def test_softirq_joins_the_testbed_where_the_kernel_keeps_it_out_of_processes(
    tmp_path: Path,
) -> None:
    run = _cpu_run(tmp_path, {"client": 1.5, "server": 1.5}, busy=4.0, irq=True)
    (cpu,) = build_summary(run)["cpu"]
    assert cpu["softirq_in_hosts"] is False
    assert cpu["per_unit_us"]["testbed"]["mean"] == pytest.approx(800.0)  # 3 s + 1 s softirq
    assert cpu["reconciliation_flag"] is False


def test_a_rates_degradation_is_on_the_ratio_scale_and_a_delays_a_difference(
    tmp_path: Path,
) -> None:
    # nearly denied in every round: the arithmetic interval would pass 100 %
    values: Values = {
        ("tcp-rr", "tcp-rr#0", "baseline"): [88, 90, 86],
        ("tcp-rr", "tcp-rr#0", "acl"): [0.9, 4.5, 12.0],
    }
    summary = build_summary(make_run(tmp_path, values), 0.95)
    json.dumps(summary, allow_nan=False)
    acl = rows_of(summary)[1]
    assert acl["degradation_scale"] == "ratio"
    assert acl["degradation_ci_low"] < acl["degradation_pct"] < acl["degradation_ci_high"]
    assert acl["degradation_ci_high"] < 100.0
    # the half width against the target is the larger side
    hw = acl["degradation_halfwidth_pp"]
    pct, lo, hi = acl["degradation_pct"], acl["degradation_ci_low"], acl["degradation_ci_high"]
    assert hw == pytest.approx(max(hi - pct, pct - lo)) and hw > (hi - lo) / 2
    # service demand (CPU per transaction) on the ratio scale: asymmetric, above -100 %
    sd = rows_of(summary, "sd_cpu_us_per_tx")[1]
    assert sd["degradation_scale"] == "ratio"
    assert sd["degradation_ci_high"] - sd["degradation_pct"] > 3 * (
        sd["degradation_pct"] - sd["degradation_ci_low"]
    )
    lat = rows_of(summary, "latency_mean_us")[1]
    assert lat["degradation_scale"] == "difference"


def test_two_paired_rounds_give_a_figure_but_no_interval(tmp_path: Path) -> None:
    values: Values = {
        ("tcp-rr", "tcp-rr#0", "baseline"): [100, 102],
        ("tcp-rr", "tcp-rr#0", "acl"): [80, 60],
    }
    acl = rows_of(build_summary(make_run(tmp_path, values), 0.95))[1]
    assert acl["degradation_n"] == 2 and acl["degradation_pct"] is not None
    assert acl["degradation_ci_low"] is None and acl["degradation_ci_high"] is None
    assert acl["significant"] is None and acl["degradation_target_met"] is False


def test_a_missed_target_is_in_the_summary_with_rounds_and_an_estimate(tmp_path: Path) -> None:
    stops = [{"point_id": "tcp-rr#0", "reason": "budget_spent", "reps": 4, "rounds_s": 40.0}]
    values: Values = {
        ("tcp-rr", "tcp-rr#0", "baseline"): [100, 100, 100, 100],
        ("tcp-rr", "tcp-rr#0", "acl"): [80, 90, 70, 85],
    }
    acl = rows_of(build_summary(make_run(tmp_path, values, stops=stops), 0.95))[1]
    short = acl["degradation_shortfall"]
    assert short["target_pp"] == 2.0 and short["rounds"] == 4
    assert short["halfwidth_pp"] == pytest.approx(acl["degradation_halfwidth_pp"])
    assert short["reason"] == "budget spent"
    # the JSON carries the answer's line
    assert (
        short["text"].startswith("target ±2 not met: ±")
        and "after 4 rounds (budget" in short["text"]
    )
    # the half width shrinks as 1/sqrt(n): n (h/t)^2 rounds in all, 10 s a round here
    more = math.ceil(4 * (short["halfwidth_pp"] / 2.0) ** 2) - 4
    assert short["more_rounds"] == more and short["more_s"] == pytest.approx(more * 10.0)
    assert acl["stop_rounds_s"] == 40.0
