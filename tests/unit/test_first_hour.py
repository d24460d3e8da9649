"""Issue 15, "a user's first hour": silent wrong results, checks that come too late,
conventions of the command line, and the Python API. Each test fails on the code
before the issue was fixed."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from secperf.cli import app
from secperf.errors import EngineError, ScenarioError
from secperf.results.rundir import RunDir
from secperf.scenario.loader import load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
DATA_RUN = ROOT / "tests" / "data" / "runs" / "20261122T010203Z-quick"
cli = CliRunner()

HEAD = 'name = "t"\n[variants.v]\nmechanisms = [{ kind = "acl", rules = 10 }]\n'


def problem_text(text: str, tmp_path: Path, name: str = "s.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    return str(info.value)


# ---------------------------------------------------------------- silent wrong results


@pytest.mark.parametrize(
    "workload",
    [
        'kind = "stream"\nprotocol = "udp"\nmessage = "60000B"\nsocket_buffer = "4KiB"\n',
        # a swept message: one point of the product does not fit
        'kind = "stream"\nprotocol = "udp"\nmessage = [1024, 9000]\nsocket_buffer = "8KiB"\n',
    ],
)
def test_udp_message_larger_than_socket_buffer_is_refused(tmp_path: Path, workload: str) -> None:
    text = problem_text(HEAD + "[[workloads]]\n" + workload, tmp_path)
    assert "does not fit a socket_buffer" in text
    assert "move nothing" in text
    assert ":4:" in text or "line 4" in text  # the workload's line


def test_udp_message_that_fits_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text(
        HEAD + '[[workloads]]\nkind = "stream"\nprotocol = "udp"\nmessage = 1024\n'
        'socket_buffer = "32KiB"\n'
    )
    assert load_scenario(path).workloads[0].socket_buffer == 32768


def test_two_acls_in_one_variant_are_refused(tmp_path: Path) -> None:
    text = problem_text(
        'name = "t"\n[variants.v]\nmechanisms = [{ kind = "acl", rules = 10 }, '
        '{ kind = "acl", rules = 5, layout = "set" }]\n[[workloads]]\nkind = "rr"\n',
        tmp_path,
    )
    assert 'both kind = "acl"' in text and "never be evaluated" in text
    assert "s.toml:3" in text


def test_a_test_that_moved_nothing_is_an_error_not_zero() -> None:
    from secperf.run.validity import moved_nothing

    udp = {
        "type": "result",
        "kind": "stream",
        "bytes": 0,
        "bits_per_second": 0.0,
        "sender": {"bytes": 0, "messages": 0},
        "loss": {"lost": 0, "ratio": 0.0},
    }
    assert "moved no traffic" in (moved_nothing(udp) or "")
    assert "sender sent nothing" in (moved_nothing(udp) or "")
    assert moved_nothing({**udp, "bytes": 10}) is None
    assert moved_nothing({"type": "result", "kind": "rr", "transactions": 0}) is not None
    assert moved_nothing({"type": "result", "kind": "latency"}) is None


class _Executor:
    def __init__(self, outcome: Any) -> None:
        self.calls = 0
        self.outcome = outcome

    def measure(self, ctx: Any, point: Any) -> Any:
        self.calls += 1
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def _bare_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, executor: _Executor) -> Any:
    import secperf.run.runner as runner_mod
    from secperf.schema.registry import KindRegistry
    from secperf.workloads import stream
    from secperf.workloads.base import WorkloadPoint

    r = runner_mod.Runner.__new__(runner_mod.Runner)
    r.run = RunDir.create(tmp_path, "t")
    r.seq = 0
    r.seed = 7  # the run's seed (a mix draws from it)
    r.denied = {}  # no rule-set review: no flow traced denied
    # a plan with just what one test reads: the point's hosts and the server's address
    r.plan = SimpleNamespace(
        topology=None,
        traffic=None,
        family=4,
        endpoints={"udp-stream#0": ("client", "server")},
        generators={"udp-stream#0": ("client",)},
        target=lambda variant, server: "198.18.1.2:5201",
    )
    # the stream kind as declared, measured by the fake executor
    kinds = KindRegistry("workload", [dataclasses.replace(stream.KIND, executor=executor)])
    monkeypatch.setattr(runner_mod, "WORKLOADS", kinds)
    spec = stream.StreamWorkload.model_validate({"kind": "stream", "protocol": "udp"})
    point = WorkloadPoint(workload_index=0, index=0, spec=spec)
    return r, runner_mod.Variant("baseline"), point


# A testbed whose hosts have one backend each (no VM to read a guest's CPU from).
NO_VM = SimpleNamespace(switchable={})


def test_deterministic_engine_error_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    err = EngineError(
        "socket_buffer too big",
        record={"type": "error", "t": 0.0, "kind": "spec", "field": None, "message": "x"},
    )
    ex = _Executor(err)
    r, v, point = _bare_runner(tmp_path, monkeypatch, ex)
    with pytest.raises(EngineError):
        r._one_test(NO_VM, v, point, 0)
    assert ex.calls == 1


def test_transient_engine_error_is_retried_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ex = _Executor(
        EngineError(
            "reset",
            record={"type": "error", "t": 0.0, "kind": "connect", "field": None, "message": "x"},
        )
    )
    r, v, point = _bare_runner(tmp_path, monkeypatch, ex)
    with pytest.raises(EngineError, match="failed twice"):
        r._one_test(NO_VM, v, point, 0)
    assert ex.calls == 2


def test_zero_traffic_result_raises_and_is_recorded_as_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ex = _Executor({"type": "result", "kind": "stream", "bytes": 0, "sender": {"messages": 0}})
    r, v, point = _bare_runner(tmp_path, monkeypatch, ex)
    with pytest.raises(EngineError, match="moved no traffic"):
        r._one_test(NO_VM, v, point, 0)
    assert ex.calls == 1
    kinds = [line["record"]["type"] for line in r.run.iter_records()]
    assert kinds == ["error"]


def _data_run(tmp_path: Path) -> Path:
    return shutil.copytree(DATA_RUN, tmp_path / DATA_RUN.name)


def test_report_without_records_fails_and_keeps_the_report(tmp_path: Path) -> None:
    run = _data_run(tmp_path)
    assert cli.invoke(app, ["report", str(run)]).exit_code == 0
    summary = (run / "summary.json").read_bytes()
    html = (run / "report.html").read_bytes()
    for damage in ("empty", "missing"):
        records = run / "records.jsonl"
        saved = records.read_bytes()
        if damage == "empty":
            records.write_text("")
        else:
            records.unlink()
        result = cli.invoke(app, ["report", str(run)])
        assert result.exit_code == 4, result.output
        assert "nothing to report" in result.output
        assert (run / "summary.json").read_bytes() == summary
        assert (run / "report.html").read_bytes() == html
        records.write_bytes(saved)


def test_report_with_a_cut_last_line_says_what_it_dropped(tmp_path: Path) -> None:
    run = _data_run(tmp_path)
    assert cli.invoke(app, ["report", str(run)]).exit_code == 0
    summary = (run / "summary.json").read_bytes()
    records = run / "records.jsonl"
    records.write_bytes(records.read_bytes()[:-20])  # the last line cut short
    result = cli.invoke(app, ["report", str(run)])
    assert result.exit_code == 4
    assert "cut short" in result.output and "less than the existing report" in result.output
    assert (run / "summary.json").read_bytes() == summary
    forced = cli.invoke(app, ["report", "--force", str(run)])
    assert forced.exit_code == 0
    assert "dropped" in forced.output and "incomplete" in forced.output
    assert json.loads((run / "summary.json").read_text())["dropped_records"][0]["line"] == 306


def test_compare_names_runs_and_warns_on_other_scenario(tmp_path: Path) -> None:
    a = _data_run(tmp_path / "a")
    b = shutil.copytree(DATA_RUN, tmp_path / "b" / "other")
    meta = json.loads((b / "run.json").read_text())
    meta["scenario"]["name"] = "other"
    meta["scenario"]["repeat"]["halfwidth_pct"] = 5.0
    (b / "run.json").write_text(json.dumps(meta))
    result = cli.invoke(app, ["compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert "different scenarios" in result.output
    assert "repeat.halfwidth_pct" in result.output
    assert f"A = {a}" in result.output and f"B = {b}" in result.output
    same = cli.invoke(app, ["compare", str(a), str(a)])
    assert "warning" not in same.output


# ---------------------------------------------------------------- checks that come too late


def test_socket_buffer_above_rmem_max_is_refused_by_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from secperf.workloads import stream

    monkeypatch.setattr(stream, "_sysctl", lambda name: 212992)
    path = tmp_path / "s.toml"
    path.write_text(HEAD + '[[workloads]]\nkind = "stream"\nsocket_buffer = "1MiB"\n')
    result = cli.invoke(app, ["check", str(path)])
    assert result.exit_code == 3
    assert "above net.core." in result.output and "1 MiB" in result.output


def test_floods_on_ipv6_are_refused(tmp_path: Path) -> None:
    text = problem_text(
        HEAD.replace('name = "t"\n', 'name = "t"\n[testbed]\nfamily = "ipv6"\n')
        + '[[workloads]]\nkind = "rr"\n[[workloads]]\nkind = "stream"\nflood = "udp"\n'
        "flood_rate = 10000\n",
        tmp_path,
    )
    assert "IPv4 only" in text and "workloads[1]" in text
    assert "s.toml:8" in text  # the flooding workload's line


def _custom(tmp_path: Path, rules: str) -> Path:
    (tmp_path / "rules.ipt").write_text(rules)
    path = tmp_path / "c.toml"
    path.write_text(
        'name = "c"\n[variants.v]\nmechanisms = [{ kind = "custom", file = "rules.ipt", '
        'format = "iptables" }]\n[[workloads]]\nkind = "rr"\n'
    )
    return path


def test_iptables_bad_jump_target_is_refused(tmp_path: Path) -> None:
    from secperf.run.preflight import check_static

    path = _custom(
        tmp_path,
        "*filter\n:FORWARD DROP [0:0]\n:MINE - [0:0]\n-A FORWARD -j MINE\n"
        "-A MINE -p tcp --dport 22 -j DORP\nCOMMIT\n",
    )
    with pytest.raises(ScenarioError) as info:  # a bad rule file is bad input (exit 3)
        check_static(load_scenario(path))
    assert "rules.ipt:5" in str(info.value) and "'DORP'" in str(info.value)
    assert "did you mean DROP" in str(info.value)
    (tmp_path / "rules.ipt").write_text(
        "*filter\n:FORWARD DROP [0:0]\n:MINE - [0:0]\n-A FORWARD -j MINE\n"
        "-A MINE -j LOG\n-A MINE -j ACCEPT\nCOMMIT\n"
    )
    check_static(load_scenario(path))


def test_check_as_non_root_says_it_skipped_rule_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _custom(tmp_path, "*filter\n:FORWARD ACCEPT [0:0]\nCOMMIT\n")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = cli.invoke(app, ["check", str(path)])
    assert result.exit_code == 0
    assert "NOT checked" in result.output and "needs root" in result.output


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("testbed.link_rate", "nan"),
        ("testbed.link_rate", "inf"),
        ("repeat.confidence", "nan"),
        ("repeat.halfwidth_pct", "inf"),
        ("timing.duration", "nan"),
        ("w.rate_pps", "nan"),
        ("w.load", "-inf"),
    ],
)
def test_nan_and_inf_are_refused_clearly(tmp_path: Path, key: str, value: str) -> None:
    table, name = key.split(".")
    text = 'name = "t"\n'
    if table != "w":
        text += f"[{table}]\n{name} = {value}\n"
    text += HEAD.removeprefix('name = "t"\n') + '[[workloads]]\nkind = "latency"\nrate_pps = 100\n'
    if table == "w":
        text = text.replace("rate_pps = 100\n", f"{name} = {value}\n")
    message = problem_text(text, tmp_path)
    assert name in message
    assert "nan" in message or "inf" in message or "finite" in message


def test_confidence_as_percentage_and_plain_numbers_in_errors(tmp_path: Path) -> None:
    text = problem_text(
        'name = "t"\n[repeat]\nconfidence = 95\n'
        + HEAD.removeprefix('name = "t"\n')
        + '[[workloads]]\nkind = "stream"\nsocket_buffer = "3GiB"\nrcvlowat = true\n',
        tmp_path,
    )
    assert "write 0.95" in text
    assert "2147483647 B" in text and "e+09" not in text
    assert "got true" in text and "True" not in text


def test_exponent_rates_are_whole_numbers(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        'name = "t"\n[testbed]\nlink_rate = 1e9\n'
        + HEAD.removeprefix('name = "t"\n')
        + '[[workloads]]\nkind = "flood"\nrate = 1e5\n'
    )
    sc = load_scenario(path)
    assert sc.testbed.link_rate == 10**9 and sc.workloads[0].rate == 100_000


def test_bom_duplicate_table_and_cross_field_line(tmp_path: Path) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + (HEAD + '[[workloads]]\nkind = "rr"\n').encode())
    assert load_scenario(path).name == "t"
    dup = problem_text(HEAD + '[variants.v]\ndescription = "x"\n', tmp_path, "dup.toml")
    assert "written twice" in dup and "quot" not in dup
    cross = problem_text(
        HEAD + '[[workloads]]\nkind = "rr"\n[[workloads]]\nkind = "latency"\nload = 0.1\n',
        tmp_path,
        "cross.toml",
    )
    assert "cross.toml:8" in cross


# ---------------------------------------------------------------- conventions


def test_version_help_and_exit_codes(tmp_path: Path) -> None:
    assert cli.invoke(app, ["--version"]).exit_code == 0
    assert "secperf 0." in cli.invoke(app, ["--version"]).output
    assert "Usage" in cli.invoke(app, ["-h"]).output
    assert cli.invoke(app, ["run", "-h"]).exit_code == 0
    assert cli.invoke(app, ["nosuchcommand"]).exit_code == 2
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "t"\n')
    assert cli.invoke(app, ["check", str(bad)]).exit_code == 3
    assert cli.invoke(app, ["report", str(tmp_path)]).exit_code == 4


def test_run_out_pointing_at_a_file_is_a_clear_error(tmp_path: Path) -> None:
    afile = tmp_path / "f"
    afile.write_text("")
    result = cli.invoke(app, ["run", str(ROOT / "scenarios" / "quick.toml"), "--out", str(afile)])
    assert result.exit_code == 4
    assert "--out is a file" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_check_prints_the_estimated_run_time() -> None:
    result = cli.invoke(app, ["check", str(ROOT / "scenarios" / "quick.toml")])
    assert result.exit_code == 0
    assert "estimated run time" in result.output


def test_progress_counter_and_estimate() -> None:
    from secperf.run.estimate import estimate_seconds, fmt_eta

    sc = load_scenario(ROOT / "scenarios" / "quick.toml")
    lo, hi = estimate_seconds(sc)
    assert 0 < lo < hi
    assert fmt_eta(45) == "45 s" and fmt_eta(600) == "10 min" and fmt_eta(7500) == "2 h 05 min"


# ---------------------------------------------------------------- Python API and CSV


def test_api_loads_dicts_and_files_and_gives_records(tmp_path: Path) -> None:
    import secperf.api as sp

    sc = sp.load(
        {
            "name": "api",
            "variants": {"v": {"mechanisms": [{"kind": "acl", "rules": 10}]}},
            "workloads": [{"kind": "rr"}],
        }
    )
    assert sc.name == "api" and sc.workloads[0].name == "tcp-rr"
    with pytest.raises(ScenarioError, match="unknown key"):
        sp.load({"name": "api", "variantz": {}, "workloads": []})
    assert sp.load(ROOT / "scenarios" / "quick.toml").name == "quick"
    rows = sp.records(_data_run(tmp_path))
    assert rows and {"variant", "metric", "mean", "degradation_pct"} <= set(rows[0])
    csv_text = sp.to_csv(rows)
    assert csv_text.splitlines()[0].startswith("workload,point_id,label,variant")
    assert len(csv_text.splitlines()) == len(rows) + 1


def test_api_dataframe_needs_pandas_or_says_so(tmp_path: Path) -> None:
    import secperf.api as sp
    from secperf.errors import SecperfError

    run = _data_run(tmp_path)
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(SecperfError, match="pip install pandas"):
            sp.dataframe(run)
        return
    df = sp.dataframe(run)
    assert len(df) == len(sp.records(run))


def test_report_csv_and_json(tmp_path: Path) -> None:
    run = _data_run(tmp_path)
    csv_out = cli.invoke(app, ["report", "--csv", str(run)])
    assert csv_out.exit_code == 0
    assert csv_out.output.startswith("workload,point_id,label,variant")
    js = cli.invoke(app, ["report", "--json", str(run)])
    assert json.loads(js.output)["scenario"] == "quick"


def test_parse_scenario_of_shipped_files_still_ok() -> None:
    for path in sorted((ROOT / "scenarios").glob("*.toml")):
        parse_scenario(path.read_text(), path)


# ---------------------------------------------------------------- charts and tables


def test_tick_labels_have_the_precision_the_data_needs() -> None:
    from secperf.report.plots import PlainTicks

    fmt = PlainTicks()
    locs = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]
    fmt.set_locs(locs)
    labels = [fmt(x) for x in locs]
    assert len(set(labels)) == len(labels), labels  # not "0, 0, 0, 1, 1, ..."
    assert labels[1] == "0.25"
    big = [0.0, 5000.0, 10000.0, 15000.0]
    fmt.set_locs(big)
    assert [fmt(x) for x in big] == ["0", "5,000", "10,000", "15,000"]


def test_wide_table_is_transposed_not_cut(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from secperf.report.terminal import print_report
    from secperf.results.summary import build_summary

    rd = RunDir.open(_data_run(tmp_path))
    summary = build_summary(rd)
    rows = []
    for r in summary["rows"]:
        rows.append(r)
        if r["variant"] != "baseline":  # five variants and more, as in rfc3511
            rows += [{**r, "variant": f"{r['variant']}-{k}"} for k in range(3)]
    summary["rows"] = rows
    buf = io.StringIO()
    print_report(Console(file=buf, width=150), summary, rd.read_run_json())
    out = buf.getvalue()
    assert "…" not in out
    assert "+25.0 [+24.3, +25.6]" in out  # every number whole
    first_table = next(p for p in out.split("\n\n") if "┏" in p)
    assert "Δ% = cost, positive = worse" in first_table  # at the table's top


def test_failure_before_any_measurement_leaves_no_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from secperf.errors import SecperfError
    from secperf.run.runner import run_scenario

    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # preflight refuses: not root
    sc = load_scenario(ROOT / "scenarios" / "quick.toml")
    with pytest.raises(SecperfError) as info:
        run_scenario(sc, tmp_path / "results", Console(quiet=True))
    assert "before any measurement" in str(info.value) and "removed" in str(info.value)
    assert list((tmp_path / "results").iterdir()) == []


def test_verbose_shows_and_logs_every_command(tmp_path: Path) -> None:
    import io
    import subprocess

    from rich.console import Console

    from secperf import verbose

    buf = io.StringIO()
    log = tmp_path / "commands.log"
    try:
        verbose.enable(Console(file=buf, width=200))
        verbose.log_to(log)
        subprocess.run(["nft", "--version"], capture_output=True, check=False)
    finally:
        verbose.disable()
    assert "$ nft --version" in buf.getvalue()
    assert log.read_text().rstrip().endswith("nft --version")
    subprocess.run(["true"], check=False)  # disabled: nothing more
    assert "true" not in log.read_text()


@pytest.mark.parametrize("where", ["/proc/secperf-results", "/dev/null/results"])
def test_run_out_in_an_unwritable_place_is_a_clear_error(where: str) -> None:
    result = cli.invoke(app, ["run", str(ROOT / "scenarios" / "quick.toml"), "--out", where])
    assert result.exit_code == 4, result.output
    assert "cannot write run directories" in result.output or "is a file" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_which_engine_errors_fail_again() -> None:
    from secperf.run.validity import fails_again

    error = {"type": "error", "t": 0.0, "field": None}
    assert fails_again({**error, "kind": "spec", "message": "socket_buffer …"})
    assert fails_again({**error, "kind": "measurement", "message": "moved no traffic"})
    assert not fails_again({**error, "kind": "measurement", "message": "unstamped"})
    assert not fails_again({**error, "kind": "connect", "message": "reset"})
    assert not fails_again(None)
