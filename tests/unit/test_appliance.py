"""The appliance's rendered rules, its schema, the failclosed kind and the seed-000 scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from secperf.errors import ToolMissingError
from secperf.mechanisms.appliance import Appliance, ApplianceSpec, render_iptables, render_nft
from secperf.mechanisms.base import MechanismContext, TrafficPlan
from secperf.mechanisms.daemons import DaemonMechanism
from secperf.mechanisms.registry import MECHANISMS
from secperf.report.checks import check_tables
from secperf.results.metrics import extract, metrics_for_kind
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.run.preflight import tools_for
from secperf.scenario.loader import load_scenario
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import expand_scenario
from secperf.tools import nfq_path
from secperf.workloads.failclosed import FailclosedExecutor, FailclosedWorkload
from secperf.workloads.registry import WORKLOADS

ROOT = Path(__file__).resolve().parents[2]
V4 = TrafficPlan(4, "198.18.1.2/32", "198.18.2.2/32", "198.18.1.2", "198.18.2.2")
V6 = TrafficPlan(6, "2001:2:0:1::2/128", "2001:2:0:2::2/128", "2001:2:0:1::2", "2001:2:0:2::2")


def test_nft_is_a_stateful_filter_with_pat_from_the_inside() -> None:
    text = render_nft(ApplianceSpec(), V4, "secperf_x_appl")
    forward = text[text.index("chain forward") : text.index("chain input")]
    assert "policy drop;" in forward
    assert "priority filter - 10" in forward  # before the iptables-nft NFQUEUE chain
    assert "ct state established,related accept" in forward
    assert "ip saddr 198.18.1.2/32 ct state new accept" in forward
    assert "masquerade" in text and "ip saddr 198.18.1.2/32 ip daddr != 198.18.1.2/32" in text
    assert "masquerade" not in render_nft(ApplianceSpec(nat=False), V4, "t")


def test_nft_ipv6_matches_ip6_and_lets_neighbour_discovery_in() -> None:
    text = render_nft(ApplianceSpec(), V6, "t")
    assert "ip6 saddr 2001:2:0:1::2/128 ct state new accept" in text
    assert "nd-neighbor-solicit" in text
    assert " ip saddr" not in text


def test_nfqueue_rule_is_fail_closed_unless_asked() -> None:
    closed = render_iptables(ApplianceSpec(queue=7), V4)
    assert "-A FORWARD -m conntrack --ctstate NEW -j NFQUEUE --queue-num 7\n" in closed
    assert "--queue-bypass" not in closed
    opened = render_iptables(ApplianceSpec(queue=7, fail_open=True), V4)
    assert "--queue-num 7 --queue-bypass" in opened


def test_the_engines_control_connection_passes_beside_the_queue() -> None:
    text = render_iptables(ApplianceSpec(queue=7), V4)
    lines = text.splitlines()
    queue = next(i for i, line in enumerate(lines) if "NFQUEUE" in line)
    before = lines[:queue]
    assert f"-A FORWARD -p tcp --dport {V4.control_port} -j ACCEPT" in before
    assert f"-A FORWARD -p tcp --sport {V4.control_port} -j ACCEPT" in before
    # nothing else skips the queue: the data ports are queued like all traffic
    assert sum("-j ACCEPT" in line for line in lines) == 2


def test_render_writes_both_files_in_load_order(tmp_path: Path) -> None:
    appl = Appliance(ApplianceSpec())
    ctx = MechanismContext(plan=V4, files_dir=tmp_path / "files", name="appliance.0", table="t")
    files = appl.render(ctx)
    assert [(f.path.name, f.tool) for f in files] == [
        ("appliance.0.nft", "nft"),
        ("appliance.0.iptables", "iptables-restore"),
    ]
    assert all(f.path.is_file() for f in files)
    assert Appliance.log_path(ctx) == tmp_path / "files" / "appliance.0.connections.jsonl"
    assert appl.backends() == {"nft", "iptables-nft"}


def test_the_kind_builds_an_appliance_with_daemons() -> None:
    spec = ApplianceSpec(kind="appliance", queue=3, fail_open=True)
    mech = MECHANISMS.of(spec).build(spec)
    assert isinstance(mech, Appliance)
    assert (mech.spec.queue, mech.spec.nat, mech.spec.fail_open) == (3, True, True)
    assert isinstance(mech, DaemonMechanism)
    assert mech.daemons() == []  # nothing runs before apply()


def test_nfq_path_names_a_missing_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECPERF_NFQ", "/nonexistent/secperf-nfq")
    with pytest.raises(ToolMissingError) as info:
        nfq_path()
    assert "/nonexistent/secperf-nfq" in str(info.value)


def test_failclosed_schema_defaults_and_refuses_the_control_port() -> None:
    w = FailclosedWorkload(kind="failclosed")
    assert (w.name, w.port, w.timeout) == ("failclosed", 5399, 0.5)
    with pytest.raises(ValidationError, match="control port"):
        FailclosedWorkload(kind="failclosed", port=5201)
    with pytest.raises(ValidationError):
        FailclosedWorkload.model_validate({"kind": "failclosed", "timeout": "20s"})


def test_failclosed_metric_is_one_only_when_every_check_passed() -> None:
    (metric,) = metrics_for_kind("failclosed")
    assert (metric.name, metric.primary, metric.higher_is_better) == ("passed", True, True)
    assert extract({"type": "result", "kind": "failclosed", "passed": True}) == {"passed": 1.0}
    assert extract({"type": "result", "kind": "failclosed", "passed": False}) == {"passed": 0.0}
    assert extract({"type": "result", "kind": "failclosed"}) == {"passed": 0.0}
    assert isinstance(WORKLOADS.get("failclosed").executor, FailclosedExecutor)


def test_seed000_scenario_is_the_papers_tables() -> None:
    sc = load_scenario(ROOT / "scenarios" / "seed000-virtual-appliance.toml")
    assert isinstance(sc, Scenario)
    assert sc.testbed.link_rate == 100_000_000 and sc.testbed.baseline == "direct"
    # the paper's own target: 99 %, +-0.5 %, asked of every value and every degradation
    assert sc.repeat.confidence == 0.99 and sc.repeat.halfwidth_pct == 0.5
    assert sc.repeat.degradation_pp == 0.5
    points = expand_scenario(sc)
    by = {p.point_id: p.record() for p in points}
    kib = 1024
    sizes = [(56 * kib, 4 * kib), (32 * kib, 4 * kib), (32 * kib, 1 * kib)]
    for name in ("tcp-stream", "udp-stream"):
        got = [(by[f"{name}#{i}"]["socket_buffer"], by[f"{name}#{i}"]["message"]) for i in range(3)]
        assert got == sizes
    # UDP_STREAM as netperf ran it (unpaced, the 32/1 KB point included) beside the paced
    assert all(by[f"udp-stream#{i}"].get("rate") is None for i in range(3))
    assert all(by[f"udp-stream-paced#{i}"]["rate"] == 95_000_000 for i in range(2))
    pairs = [(1, 1), (32, 256), (32, 512), (32, 1024), (516, 4)]
    for proto, n in (("tcp", 4), ("udp", 5)):  # 516/4 is Table 4's (UDP) only
        got = [
            (by[f"{proto}-rr#{i}"]["request"], by[f"{proto}-rr#{i}"]["response"]) for i in range(n)
        ]
        assert got == pairs[:n]
    # section 6's "2000 connections/s": the closed-loop maximum and 2000/s offered
    assert "tcp-crr#0" in by and by["tcp-crr-2000#0"]["rate"] == 2000
    assert by["failclosed#0"]["port"] == 5399
    assert len(points) == 20
    tools = {t.program for t in tools_for(sc)}
    assert {"nft", "iptables-nft-restore", "qemu-system-x86_64"} <= tools
    # the direct path, the appliance in a namespace (alone and with the IDS), the VM alone,
    # the appliance in the VM
    assert {n: v.backend for n, v in sc.variants.items()} == {
        "appliance": "namespace",
        "appliance-ids": "namespace",
        "vm-forward": "vm",
        "vm-appliance": "vm",
    }
    assert not sc.variants["vm-forward"].mechanisms
    assert (sc.testbed.vm.cpus, sc.testbed.vm.memory_mb, sc.testbed.vm.accel) == (1, 256, "auto")


# -- failclosed records in the summary and the report ----------------------------------------


def _fc_record(variant_ok: dict[str, bool], applicable: bool = True) -> dict[str, Any]:
    checks = [
        {"name": n, "passed": ok, "applicable": applicable or n != "daemon-killed", "detail": d}
        for n, (ok, d) in {
            "outside-in": (variant_ok["outside-in"], "outside-in detail"),
            "daemon-killed": (variant_ok["daemon-killed"], "no daemon to kill (not applicable)"),
        }.items()
    ]
    return {
        "type": "result",
        "kind": "failclosed",
        "passed": all(c["passed"] for c in checks),
        "checks": checks,
    }


def test_checks_are_summarised_per_variant_and_rendered(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "t")
    run.write_run_json({"scenario": {"name": "t", "variants": {"appliance": {}}}, "stops": []})
    rounds = [
        ("baseline", {"outside-in": False, "daemon-killed": False}, False),
        ("appliance", {"outside-in": True, "daemon-killed": True}, True),
        ("baseline", {"outside-in": False, "daemon-killed": False}, False),
        ("appliance", {"outside-in": True, "daemon-killed": False}, True),
    ]
    for rep, (variant, oks, applicable) in enumerate(rounds):
        tags = {"variant": variant, "workload": "failclosed", "point_id": "failclosed#0"}
        run.append_record({**tags, "rep": rep // 2}, _fc_record(oks, applicable))
    summary = build_summary(run, 0.95)
    entries = {e["variant"]: e for e in summary["checks"]}
    assert (entries["baseline"]["rounds"], entries["baseline"]["passed_rounds"]) == (2, 0)
    assert (entries["appliance"]["rounds"], entries["appliance"]["passed_rounds"]) == (2, 1)
    daemon = {c["name"]: c for c in entries["baseline"]["checks"]}["daemon-killed"]
    assert daemon["applicable"] is False and daemon["passed"] == 0
    (table,) = check_tables(summary)
    assert table.columns == ["check", "baseline", "appliance"]
    cells = {row[0].text: [c.text for c in row[1:]] for row in table.rows}
    assert cells["outside-in"] == ["FAIL 0/2", "pass 2/2"]
    assert cells["daemon-killed"] == ["n/a · FAIL 0/2", "FAIL 1/2"]
    assert cells["all checks"] == ["FAIL 0/2", "FAIL 1/2"]
    assert "baseline · outside-in: outside-in detail" in table.footnotes
    # the numeric row: 1 only for the round where every check passed
    (row,) = [r for r in summary["rows"] if r["variant"] == "appliance"]
    assert row["metric"] == "passed" and row["mean"] == 0.5
