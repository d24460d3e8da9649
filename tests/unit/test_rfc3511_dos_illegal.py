"""Schema, rendering and metrics of the synproxy mechanism and the dos/illegal kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from secperf.mechanisms.base import MechanismContext, TrafficPlan
from secperf.mechanisms.registry import MECHANISMS
from secperf.mechanisms.synproxy import Synproxy
from secperf.results.metrics import extract
from secperf.scenario.scenario import Mechanism, Workload
from secperf.workloads.dos import DosWorkload
from secperf.workloads.illegal import IllegalWorkload

WORKLOAD: TypeAdapter[object] = TypeAdapter(Workload)
MECHANISM: TypeAdapter[object] = TypeAdapter(Mechanism)


def test_synproxy_renders_the_wiki_rules_in_its_own_table(tmp_path: Path) -> None:
    plan = TrafficPlan(4, "198.18.1.2/32", "198.18.2.2/32", "198.18.1.2", "198.18.2.2")
    spec = MECHANISM.validate_python({"kind": "synproxy"})
    mech = MECHANISMS.of(spec).build(spec)  # type: ignore[arg-type]
    assert isinstance(mech, Synproxy)
    ctx = MechanismContext(plan=plan, files_dir=tmp_path, name="s.0", table="secperf_x")
    text = mech.render(ctx)[0].path.read_text()
    assert "table inet secperf_x_syn {" in text
    assert (
        "tcp dport { 5201, 5300-5399 } tcp flags & (fin | syn | rst | ack) == syn notrack" in text
    )
    assert "ct state invalid,untracked synproxy mss 1460 wscale 7 timestamp sack-perm" in text
    assert "priority filter + 10" in text and "ct state invalid drop" in text


def test_dos_and_illegal_validate_and_reject_what_they_cannot_do() -> None:
    dos = WORKLOAD.validate_python({"kind": "dos", "flood_rate": [5000, 20000]})
    assert isinstance(dos, DosWorkload) and dos.flood_target == "measured"
    with pytest.raises(ValidationError, match="no port"):
        WORKLOAD.validate_python({"kind": "dos", "flood": "icmp"})
    ill = WORKLOAD.validate_python({"kind": "illegal", "rate": "1gbit"})
    assert isinstance(ill, IllegalWorkload) and ill.rate == 1_000_000_000
    for ports in ("1-100", "5201", "5350-6000"):
        with pytest.raises(ValidationError, match="permits"):
            WORKLOAD.validate_python({"kind": "illegal", "denied_ports": ports})
    with pytest.raises(ValidationError, match="rate paces the stream"):
        WORKLOAD.validate_python({"kind": "illegal", "measure": "rr", "rate": "1gbit"})


def test_metrics_of_dos_and_illegal_records() -> None:
    dos = extract(
        {
            "kind": "dos",
            "rate": 900.0,
            "failure_ratio": 0.1,
            "completed": 900,
            "server_half_open": 1024,
            "unflooded": {"rate": 1000.0},
            "flood": {"rate_pps": 19990.0},
        }
    )
    assert dos["dos_cps"] == 900.0 and dos["failure_pct"] == pytest.approx(10.0)
    assert dos["dos_cps_unflooded"] == 1000.0 and dos["server_half_open"] == 1024
    ill = extract(
        {
            "kind": "illegal",
            "measure": "stream",
            "bits_per_second": 1e9,
            "illegal_sent": 10,
            "illegal_reached": 3,
        }
    )
    assert ill == {"illegal_reached": 3, "allowed_throughput": 1000.0, "illegal_sent": 10}


def test_illegal_counters_are_reinstalled_when_the_denied_ports_change() -> None:
    """One counter table per server: a workload counting other ports must replace it."""
    from ipaddress import ip_interface
    from types import SimpleNamespace

    from secperf.workloads.illegal import install_counters

    loaded: list[str] = []
    server = SimpleNamespace(run=lambda argv, input: loaded.append(input))
    ctx = SimpleNamespace(
        testbed=SimpleNamespace(prefix="sptest1", host=lambda role: server),
        topology=SimpleNamespace(interface=lambda *a: ip_interface("198.19.9.1/24")),
        server="server",
    )
    for ports in ("10-1023", "10-1023", "2000-2100", "10-1023"):
        install_counters(ctx, ports)  # type: ignore[arg-type]
    assert [("dport 10-1023" in t, "dport 2000-2100" in t) for t in loaded] == [
        (True, False),
        (False, True),
        (True, False),
    ]


class _Flood:
    def __init__(self, packets: int) -> None:
        self.packets = packets

    def collect(self, on_record: Any = None) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(result={"rate_pps": 0.0, "packets": self.packets}, records=[])

    def interrupt(self) -> None:
        pass

    def stop(self) -> None:
        pass


class _Count:
    def __init__(self, ctx: Any, specs: Any) -> None:
        pass

    def start(self) -> None:
        pass

    def finish(self, results: Any) -> list[dict[str, Any]]:
        return [{"sent": r["packets"]} for r in results]


def _illegal_round(
    monkeypatch: pytest.MonkeyPatch, sent: dict[str, int], reached: dict[str, int], kind: str
) -> dict[str, Any]:
    """IllegalExecutor.measure with the engine, the floods and the server's counters faked."""
    from types import SimpleNamespace

    from secperf.scenario.sweep import WorkloadPoint
    from secperf.workloads import illegal

    monkeypatch.setattr(illegal, "install_counters", lambda ctx, ports: None)
    monkeypatch.setattr(illegal, "read_counters", lambda ctx: {"udp": 0, "tcp": 0})
    monkeypatch.setattr(illegal, "settled_counters", lambda ctx: reached)
    monkeypatch.setattr(
        illegal,
        "denied_specs",
        lambda ctx, p, ports, seconds: {
            proto: {"flood": proto, "rate_pps": 5000} for proto in ("udp", "tcp")
        },
    )
    floods = iter([_Flood(sent["udp"]), _Flood(sent["tcp"])])
    monkeypatch.setattr(illegal, "flood_beside", lambda ctx, spec, warmup: next(floods))
    monkeypatch.setattr(illegal, "DeliveryCount", _Count)
    monkeypatch.setattr(illegal, "coverage", lambda flood, window: {"covered": True})
    monkeypatch.setattr(illegal, "with_delivered", lambda run, delivered, coverage: [])
    allowed = {"kind": "stream", "bits_per_second": 1e9}
    monkeypatch.setattr(
        illegal,
        "EngineTest",
        lambda host, spec: SimpleNamespace(
            collect=lambda: SimpleNamespace(result=allowed, records=[])
        ),
    )
    kept: list[dict[str, Any]] = []
    ctx = SimpleNamespace(
        family=4,
        target="198.18.2.2:5201",
        mechanisms=[(SimpleNamespace(kind=kind), None)] if kind else [],
        testbed=SimpleNamespace(host=lambda role: None),
        keep=kept.append,
        client="client",
        server="server",
    )
    point = WorkloadPoint(0, 0, IllegalWorkload.model_validate({"kind": "illegal", "duration": 1}))
    return illegal.IllegalExecutor().measure(ctx, point)  # type: ignore[arg-type]


def test_illegal_with_nothing_sent_is_not_run_rather_than_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from secperf.errors import EngineError

    nothing = {"udp": 0, "tcp": 0}
    for kind in ("acl", ""):  # through a filter, and the baseline
        with pytest.raises(EngineError, match="udp and tcp flood sent nothing") as err:
            _illegal_round(monkeypatch, nothing, nothing, kind)
        assert "tested nothing" in err.value.message and err.value.fix
    # one flood silent: the other's 0 reached neither passes nor fails the round
    with pytest.raises(EngineError, match="the denied tcp flood sent nothing"):
        _illegal_round(monkeypatch, {"udp": 100, "tcp": 0}, nothing, "acl")


def test_illegal_passes_and_fails_on_what_reached_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = {"udp": 100, "tcp": 100}
    rec = _illegal_round(monkeypatch, sent, {"udp": 0, "tcp": 0}, "acl")
    assert rec["passed"] is True and rec["illegal_reached"] == 0
    rec = _illegal_round(monkeypatch, sent, {"udp": 3, "tcp": 0}, "acl")
    assert rec["passed"] is False and rec["illegal_reached"] == 3
    # without a filter reaching the server is the comparison, not a failure
    rec = _illegal_round(monkeypatch, sent, {"udp": 100, "tcp": 100}, "")
    assert rec["passed"] is True and rec["checks"][0]["applicable"] is False
