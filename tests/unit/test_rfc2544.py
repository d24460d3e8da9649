"""RFC 2544's logic against fake trials: frame arithmetic, the throughput search, the
frame loss steps, back-to-back, and what the record and report make of them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import secperf.workloads.rfc2544.layout as report
import secperf.workloads.rfc2544.logic as rfc2544
from secperf.errors import EngineError
from secperf.report.terminal import build_tables
from secperf.results.metrics import extract, searches
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import expand
from secperf.workloads.rfc2544 import Rfc2544Workload
from secperf.workloads.rfc2544.executor import MANAGEMENT, Steering


def fake_dut(capacity_fps: float, *, sender_max: float = 1e9, seconds: float = 1.0):  # type: ignore[no-untyped-def]
    """A DUT that forwards up to `capacity_fps` and loses the rest; the sender reaches
    at most `sender_max`. Records every rate it was offered."""
    asked: list[float] = []

    def trial(fps: float) -> rfc2544.Offer:
        asked.append(fps)
        sent_fps = min(fps, sender_max)
        sent = int(sent_fps * seconds)
        received = min(sent, int(capacity_fps * seconds))
        return rfc2544.Offer(fps, sent, received, seconds)

    trial.asked = asked  # type: ignore[attr-defined]
    return trial


def test_frame_arithmetic() -> None:
    # 100 Mbit/s Ethernet: 148,810 64-byte frames/s, 8,127 of 1518 bytes
    assert rfc2544.line_rate_fps(100e6, 64) == pytest.approx(148_809.5, abs=0.5)
    assert rfc2544.line_rate_fps(1e9, 1518) == pytest.approx(81_274.4, abs=0.5)
    # an AF_PACKET socket writes the frame without its FCS
    assert rfc2544.sent_bytes(64) == 60
    assert rfc2544.sent_bytes(1518) == 1514
    # 14 B Ethernet + 20 B IPv4 + 8 B UDP + payload + 4 B FCS
    assert rfc2544.udp_payload(64) == 18
    assert rfc2544.udp_payload(1518) == 1472


def test_throughput_finds_the_capacity_within_the_resolution() -> None:
    trial = fake_dut(50_000)
    found = rfc2544.throughput(
        trial, line_fps=148_810, low_fps=1_488, resolution_pct=2, max_trials=20
    )
    assert found.outcome == "found"
    assert found.value is not None
    assert 50_000 / 1.02 <= found.value <= 50_000
    lo, hi = found.interval or (0, 0)
    assert lo <= 50_000 < hi and hi / lo - 1 <= 0.02
    # the line rate first, then the lowest rate, then halving
    assert trial.asked[:2] == [148_810, 1_488]


def test_one_lost_frame_fails_a_trial() -> None:
    def trial(fps: float) -> rfc2544.Offer:
        sent = int(fps)
        return rfc2544.Offer(fps, sent, sent - (1 if fps > 10_000 else 0), 1.0)

    found = rfc2544.throughput(
        trial, line_fps=100_000, low_fps=1_000, resolution_pct=1, max_trials=30
    )
    assert found.value is not None and found.value <= 10_000
    # a tolerance lets that frame through (then it is not RFC 2544's throughput)
    lax = rfc2544.throughput(
        trial,
        line_fps=100_000,
        low_fps=1_000,
        resolution_pct=1,
        max_trials=30,
        loss_tolerance_pct=0.01,
    )
    assert lax.outcome == "at_least"


def test_censored_throughput_is_a_bound_not_a_value() -> None:
    at_line = rfc2544.throughput(
        fake_dut(1e9), line_fps=8_127, low_fps=100, resolution_pct=2, max_trials=10
    )
    assert at_line.outcome == "at_least" and at_line.value is None
    assert at_line.bound == pytest.approx(8_127, rel=0.01)
    lossy = rfc2544.throughput(
        fake_dut(50), line_fps=8_127, low_fps=100, resolution_pct=2, max_trials=10
    )
    assert lossy.outcome == "below" and lossy.value is None and lossy.bound == 100


def test_a_sender_that_falls_short_bounds_the_value_at_what_it_sent() -> None:
    # the sender reaches 100k of 148,810 and the DUT drops nothing: at least 100k
    found = rfc2544.throughput(
        fake_dut(1e9, sender_max=100_000),
        line_fps=148_810,
        low_fps=1_488,
        resolution_pct=2,
        max_trials=10,
    )
    assert found.outcome == "at_least"
    assert found.bound == pytest.approx(100_000)
    assert found.as_dict()["passed_at"]["asked"] == 148_810


def test_loss_steps_stop_after_two_clean_steps() -> None:
    trial = fake_dut(60_000)
    rates = rfc2544.loss_rates(trial, line_fps=100_000)
    pcts = [p for p, _ in rates.steps]
    # 100..70 lose, 60 and 50 do not: stop there (RFC 2544 26.3)
    assert pcts == [100, 90, 80, 70, 60, 50]
    assert rates.not_run == (40, 30, 20, 10)
    loss = {p: o.loss_pct for p, o in rates.steps}
    assert loss[100] == pytest.approx(40.0)
    assert loss[70] == pytest.approx(100 * (70_000 - 60_000) / 70_000)
    assert loss[60] == 0 and loss[50] == 0
    every = rfc2544.loss_rates(fake_dut(60_000), line_fps=100_000, every_step=True)
    assert [p for p, _ in every.steps] == list(rfc2544.LOSS_STEPS_PCT) and not every.not_run


def test_back_to_back_finds_the_buffer() -> None:
    def burst(frames: int) -> rfc2544.Offer:
        return rfc2544.Offer(100_000, frames, min(frames, 3_000), frames / 100_000)

    found = rfc2544.back_to_back(
        burst, low_frames=100, high_frames=50_000, resolution_pct=2, max_trials=30
    )
    assert found.outcome == "found"
    assert found.value is not None and 3_000 / 1.02 <= found.value <= 3_000


def record(throughput: rfc2544.Offer | None = None) -> dict[str, object]:
    found = rfc2544.throughput(
        fake_dut(50_000), line_fps=148_810, low_fps=1_488, resolution_pct=2, max_trials=20
    )
    censored = rfc2544.back_to_back(
        lambda n: rfc2544.Offer(148_810, n, n, n / 148_810),
        low_frames=100,
        high_frames=74_405,
        resolution_pct=2,
        max_trials=10,
    )
    return {
        "type": "result",
        "kind": "rfc2544",
        "frame": 64,
        "line_rate_fps": 148_810.0,
        "throughput": {"search": found.as_dict(), "fps": found.value},
        "loss": rfc2544.loss_rates(fake_dut(60_000), line_fps=148_810).as_dict(),
        "back_to_back": {"search": censored.as_dict(), "frames": censored.value},
    }


def test_record_metrics_and_nested_searches() -> None:
    rec = record()
    values = extract(rec)
    assert 50_000 / 1.02 <= values["rfc2544_throughput_fps"] <= 50_000
    assert values["rfc2544_loss_100_pct"] == pytest.approx(
        100 * (148_810 - 60_000) / 148_810, rel=1e-3
    )
    assert "rfc2544_loss_10_pct" not in values  # not run: no number
    assert "rfc2544_back_to_back_frames" not in values  # censored: no number
    found = searches(rec)
    assert found["rfc2544_throughput_fps"].outcome == "found"
    assert found["rfc2544_back_to_back_frames"].outcome == "at_least"


def _summary_rows() -> list[dict[str, object]]:
    base = {
        "workload": "rfc2544",
        "point_id": "rfc2544#0",
        "label": "frame=64",
        "point": {"frame": 64},
        "kind": "rfc2544",
        "higher_is_better": True,
        "primary": False,
        "n": 2,
        "censored_n": 0,
        "ci_target_met": True,
    }
    return [
        {**base, "variant": "baseline", "metric": "rfc2544_line_rate_fps", "mean": 148_810.0},
        {
            **base,
            "variant": "baseline",
            "metric": "rfc2544_throughput_fps",
            "n": 0,
            "mean": None,
            "censored_n": 2,
            "search": {
                "at_least_n": 2,
                "at_least_bound": 104_000.0,
                "at_least_asked": 148_810.0,
                "measure": "achieved",
                "below_n": 0,
            },
        },
        {
            **base,
            "variant": "acl",
            "metric": "rfc2544_throughput_fps",
            "mean": 30_000.0,
            "ci_low": 28_000.0,
            "ci_high": 32_000.0,
            "search": {
                "found_n": 2,
                "bracket_low": 29_000.0,
                "bracket_high": 31_000.0,
                "measure": "achieved",
                "at_least_n": 0,
                "below_n": 0,
            },
        },
        {**base, "variant": "acl", "metric": "rfc2544_loss_100_pct", "mean": 79.8},
        {**base, "variant": "acl", "metric": "rfc2544_offered_100_pct", "mean": 70.0},
    ]


def test_report_words_a_bound_and_never_prints_it_as_a_value() -> None:
    tables = build_tables({"rows": _summary_rows(), "confidence": 0.95})
    titles = [t.title for t in tables]
    assert titles[0] == "rfc2544 — RFC 2544 26.1 Throughput"
    thr = tables[0]
    row = [c.text for c in thr.rows[0]]
    assert row[0] == "64" and row[1] == "148,810"
    assert row[2] == "at least 104,000 achieved (148,810 asked)"
    assert row[3] == "≥ 69.9 %"
    assert row[4].startswith("30,000 [")
    loss = next(t for t in tables if "26.3" in t.title)
    acl = next(r for r in loss.rows if r[1].text == "acl")
    assert acl[2].text == f"79.80 {report.SHORT}70"  # the sender reached 70 % only
    assert acl[3].text == "–"  # not run


def test_schema_sweeps_the_seven_frame_sizes() -> None:
    w = Rfc2544Workload.model_validate({"kind": "rfc2544"})
    points = expand(w)
    assert [p.record()["frame"] for p in points] == list(rfc2544.FRAME_SIZES)
    assert points[0].record()["tests"] == list(rfc2544.TESTS)
    assert all(isinstance(p.spec, Rfc2544Workload) for p in points)
    with pytest.raises(ValueError, match="frame size must be at least 64"):
        Rfc2544Workload.model_validate({"kind": "rfc2544", "frame": 60})
    with pytest.raises(ValueError, match="names a test twice"):
        Rfc2544Workload.model_validate({"kind": "rfc2544", "tests": ["loss", "loss"]})


def test_scenario_refuses_ipv6_and_a_missing_line_rate() -> None:
    base = {"name": "x", "variants": {"v": {"mechanisms": [{"kind": "acl", "rules": 1}]}}}
    work = [{"kind": "rfc2544", "frame": 64}]
    with pytest.raises(ValueError, match="no link has a rate"):
        Scenario.model_validate({**base, "workloads": work})
    with pytest.raises(ValueError, match="IPv4 frames only"):
        Scenario.model_validate(
            {**base, "testbed": {"family": "ipv6", "link_rate": "1gbit"}, "workloads": work}
        )
    ok = Scenario.model_validate({**base, "testbed": {"link_rate": "1gbit"}, "workloads": work})
    assert ok.workloads[0].kind == "rfc2544"


class _StubHost:
    """A DUT whose interfaces have names a shell would read as commands."""

    name = "dut"

    def __init__(self, ifnames: list[str], management: tuple[str, ...] = ()) -> None:
        self.ifnames = ifnames
        self.management = management
        self.calls: list[list[str]] = []
        self.settings: list[tuple[str, str]] = []

    def track_setting(self, path: str, value: str) -> None:
        self.calls.append(["track", path, value])
        self.settings.append((path, value))

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        out = ""
        if argv[:3] == ["sh", "-c", MANAGEMENT]:
            out = "".join(f"{n}\n" for n in self.management)
        elif argv[:3] == ["ip", "-j", "link"]:
            out = json.dumps([{"ifname": n} for n in self.ifnames])
        elif argv[0] == "cat":
            out = "0\n"
        return subprocess.CompletedProcess(argv, 0, out, "")


def test_steering_passes_interface_paths_as_arguments_never_in_a_script(tmp_path: Path) -> None:
    """Finding 9 of issue 22: an interface name is data, never shell text."""
    evil = "x;touch${IFS}pwned;#"
    host = _StubHost(["lo", "eth0", evil])
    ctx = SimpleNamespace(testbed=SimpleNamespace(host=lambda name: host))
    steering = Steering(ctx, "1")  # type: ignore[arg-type]
    steering.apply()
    steering.restore()
    writes = [c for c in host.calls if c[0] == "sh" and c[2] != MANAGEMENT]
    assert len(writes) == 4  # two interfaces (not lo), set and restored
    for argv in writes:
        script = argv[2]
        assert evil not in script and "/sys/class/net" not in script, argv
        path = argv[-1]
        assert path.startswith("/sys/class/net/") and path.endswith("/queues/rx-0/rps_cpus")
    assert f"/sys/class/net/{evil}/queues/rx-0/rps_cpus" in [a[-1] for a in writes]
    # The script as it runs: the value lands in a file of that very name, nothing runs.
    target = tmp_path / evil
    argv = [*writes[0][:-1], str(target)]
    subprocess.run(argv, check=True, cwd=tmp_path)
    assert target.read_text().strip() == "2"
    assert not (tmp_path / "pwned").exists()


def test_steering_records_every_mask_in_the_ledger_before_it_writes_it() -> None:
    """issue 41: a crashed controller's lab DUT gets its rps masks back from the ledger
    (remote_teardown.SETTINGS), so each is recorded, with its value, before it changes."""
    host = _StubHost(["lo", "eth1", "eth2"])
    ctx = SimpleNamespace(testbed=SimpleNamespace(host=lambda name: host))
    Steering(ctx, "1").apply()  # type: ignore[arg-type]
    paths = [f"/sys/class/net/{d}/queues/rx-0/rps_cpus" for d in ("eth1", "eth2")]
    assert host.settings == [(p, "0") for p in paths]
    for path in paths:
        tracked = host.calls.index(["track", path, "0"])
        written = next(i for i, c in enumerate(host.calls) if c[0] == "sh" and c[-1] == path)
        assert tracked < written


def test_steering_refuses_to_touch_the_management_interface() -> None:
    host = _StubHost(["lo", "eth0", "eth1"], management=("eth0",))
    ctx = SimpleNamespace(testbed=SimpleNamespace(host=lambda name: host))
    with pytest.raises(EngineError, match=r"eth0.*never steers"):
        Steering(ctx, "1").apply()  # type: ignore[arg-type]
    assert host.settings == []
    assert not [c for c in host.calls if c[0] == "sh" and c[2] != MANAGEMENT]


def test_the_management_script_names_the_interface_of_the_session() -> None:
    """MANAGEMENT as the host runs it: the interface holding $SSH_CONNECTION's local
    address (here loopback's), nothing without a session."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SSH_CONNECTION": "127.0.0.9 5 127.0.0.1 22"}
    got = subprocess.run(["sh", "-c", MANAGEMENT], env=env, capture_output=True, text=True)
    assert got.stdout.split() == ["lo"]
    env.pop("SSH_CONNECTION")
    got = subprocess.run(["sh", "-c", MANAGEMENT], env=env, capture_output=True, text=True)
    assert got.stdout == ""


def test_a_latency_test_that_fails_is_kept_as_an_error_the_report_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The latency test refused (too many probes without a timestamp): the record keeps
    the reason and an error record names it, so the table's "–" has its why."""
    from secperf.errors import EngineError
    from secperf.workloads.base import MeasureContext
    from secperf.workloads.latency import LatencyExecutor
    from secperf.workloads.rfc2544.executor import _latency

    def refuse(_self: object, _ctx: object, _point: object) -> dict[str, Any]:
        raise EngineError("9258 of 54733 probes (16.9 %) had no kernel timestamp")

    monkeypatch.setattr(LatencyExecutor, "measure", refuse)
    kept: list[dict[str, Any]] = []
    ctx = MeasureContext(
        testbed=None,  # type: ignore[arg-type]
        topology=None,  # type: ignore[arg-type]
        plan=None,  # type: ignore[arg-type]
        family=4,
        variant="baseline",
        direct=False,
        target="198.18.2.2:5000",
        keep=kept.append,
    )
    point = expand(Rfc2544Workload.model_validate({"kind": "rfc2544", "frame": 64}))[0]
    out = _latency(ctx, point, 64, 148_778.0)
    assert "delay_us" not in out and "16.9 %" in out["error"]
    errors = [r for r in kept if r.get("type") == "error"]
    assert len(errors) == 1 and errors[0]["kind"] == "latency"
    assert errors[0]["message"].startswith("64 B: ") and "16.9 %" in errors[0]["message"]


def test_mlrsearch_throughput_with_a_pdr_goal_and_a_short_sender() -> None:
    # a DUT that drops beyond 50k: NDR just below, a 1 % PDR above it
    trial = fake_dut(50_000)
    keys = Rfc2544Workload.model_validate({"kind": "rfc2544", "line_rate": "100mbit"})
    found = rfc2544.throughput_search(
        lambda fps, _s: trial(fps),
        keys,
        line_fps=148_810,
        low_fps=1_488,
        duration=1.0,
        resolution_pct=2,
        max_trials=12,
        pdr_loss_pct=[1.0],
    )
    d = found.as_dict()
    assert (found.method, found.outcome) == ("mlrsearch", "found")
    assert found.value is not None and 50_000 / 1.02 <= found.value <= 50_000
    ndr, pdr = d["goals"]
    assert pdr["relevant_lower_bound"] > 50_000 >= ndr["relevant_lower_bound"]
    assert pdr["conditional_throughput"] <= pdr["relevant_lower_bound"]
    assert {t["duration"] for t in d["trials"]} == {0.25, 0.5, 1.0}
    # a sender that reaches 100k of the line rate: nothing above 100k passes by what
    # was asked, so the answer is below 100k, never the line rate
    short = rfc2544.throughput_search(
        lambda fps, _s: fake_dut(1e9, sender_max=100_000)(fps),
        keys,
        line_fps=148_810,
        low_fps=1_488,
        duration=1.0,
        resolution_pct=2,
        max_trials=12,
    )
    assert short.outcome == "found" and short.value is not None
    assert 0.95 * 100_000 / 1.02 <= short.value <= 100_000 / 0.95
