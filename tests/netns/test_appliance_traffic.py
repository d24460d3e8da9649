"""Document 000's appliance on the DUT, and the fail-closed check, with real traffic."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.engine import Record
from secperf.mechanisms.acl import Acl, AclSpec
from secperf.mechanisms.appliance import Appliance, ApplianceSpec
from secperf.mechanisms.base import Mechanism, MechanismContext, reset_dut, traffic_plan
from secperf.scenario.sweep import one_point
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.failclosed import FailclosedExecutor
from secperf.workloads.parts.probe import EchoServer, probe, start_echo

pytestmark = pytest.mark.netns

CLIENT = "198.18.1.2"
SERVER = "198.18.2.2"
DUT_OUTSIDE = "198.18.2.1"
PORT = 5399  # the module's own echo servers
PROBE_PORT = 5398  # the executor's: inside the engine data ports an ACL permits


@pytest.fixture(scope="module")
def bed(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Testbed, EchoServer, EchoServer]]:
    state = tmp_path_factory.mktemp("state")
    # direct=True: the seed-000 scenario's topology, with the baseline's wire beside the dut
    with Testbed.build(Topology.standard(direct=True), state_dir=state) as tb:
        server_echo = start_echo(tb.host("server"), "0.0.0.0", [PORT])
        client_echo = start_echo(tb.host("client"), "0.0.0.0", [PORT])
        yield tb, server_echo, client_echo
        server_echo.stop()
        client_echo.stop()


def _ctx(tb: Testbed, tmp_path: Path, name: str = "appl.0", family: int = 4) -> MechanismContext:
    plan = traffic_plan(tb.topology, family)
    return MechanismContext(plan=plan, files_dir=tmp_path, name=name, table=f"secperf_{tb.prefix}")


@pytest.fixture
def applied(
    bed: tuple[Testbed, EchoServer, EchoServer], tmp_path: Path
) -> Iterator[tuple[Appliance, MechanismContext]]:
    tb = bed[0]
    appl = Appliance(ApplianceSpec())
    ctx = _ctx(tb, tmp_path)
    ctx.rendered = appl.render(ctx)
    try:
        appl.apply(tb.host("dut"), ctx)
        yield appl, ctx
    finally:
        appl.release(tb.host("dut"), ctx)
        reset_dut(tb.host("dut"), appl.backends())


def _log(ctx: MechanismContext) -> list[dict[str, Any]]:
    path = Appliance.log_path(ctx)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_client_reaches_server_and_server_sees_the_dut(
    bed: tuple[Testbed, EchoServer, EchoServer],
    applied: tuple[Appliance, MechanismContext],
    proto: str,
) -> None:
    tb = bed[0]
    assert probe(tb.host("client"), SERVER, PORT, proto) == DUT_OUTSIDE


@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_outside_cannot_open_a_connection_to_the_client(
    bed: tuple[Testbed, EchoServer, EchoServer],
    applied: tuple[Appliance, MechanismContext],
    proto: str,
) -> None:
    tb, _, client_echo = bed
    before = len(client_echo.seen())
    assert probe(tb.host("server"), CLIENT, PORT, proto, timeout=0.5) is None
    assert len(client_echo.seen()) == before  # nothing arrived, not just no answer
    # and without the appliance the same probe gets through: the probe can succeed
    appl, ctx = applied
    appl.release(tb.host("dut"), ctx)
    reset_dut(tb.host("dut"), appl.backends())
    assert probe(tb.host("server"), CLIENT, PORT, proto) == SERVER


def test_each_new_connection_is_logged_once_with_its_inside_5_tuple(
    bed: tuple[Testbed, EchoServer, EchoServer], applied: tuple[Appliance, MechanismContext]
) -> None:
    tb = bed[0]
    _, ctx = applied
    for proto in ("tcp", "tcp", "udp"):
        assert probe(tb.host("client"), SERVER, PORT, proto) == DUT_OUTSIDE
    assert probe(tb.host("server"), CLIENT, PORT, "tcp", timeout=0.3) is None  # dropped first
    lines = _log(ctx)
    assert [line["proto"] for line in lines] == ["tcp", "tcp", "udp"]
    for line in lines:
        # the forward hook runs before masquerade: the log names the inside host
        assert (line["src"], line["dst"], line["dport"], line["family"]) == (
            CLIENT,
            SERVER,
            PORT,
            4,
        )
        assert isinstance(line["sport"], int) and line["sport"] > 1024
        assert line["time"].endswith("Z")
    assert lines[0]["sport"] != lines[1]["sport"]


def test_with_the_daemon_killed_nothing_new_passes_and_a_restart_reopens(
    bed: tuple[Testbed, EchoServer, EchoServer], applied: tuple[Appliance, MechanismContext]
) -> None:
    tb, server_echo, _ = bed
    appl, ctx = applied
    assert len(appl.daemons()) == 1
    killed = appl.kill_daemons()
    assert len(killed) == 1 and appl.daemons() == []
    before = len(server_echo.seen())
    for proto in ("tcp", "udp"):
        assert probe(tb.host("client"), SERVER, PORT, proto, timeout=0.5) is None
    assert len(server_echo.seen()) == before
    appl.restart_daemons(tb.host("dut"), ctx)
    assert probe(tb.host("client"), SERVER, PORT, "tcp") == DUT_OUTSIDE


def test_sigterm_ends_the_daemon_cleanly(
    bed: tuple[Testbed, EchoServer, EchoServer], applied: tuple[Appliance, MechanismContext]
) -> None:
    appl, _ = applied
    (proc,) = appl.daemons()
    assert proc.stop(timeout=5.0) == 0  # exit 0 after SIGTERM, not killed at the deadline
    assert proc.stdout is not None
    events = [json.loads(line) for line in proc.stdout.read().splitlines()]
    assert events and events[-1]["event"] == "stopped"
    assert events[-1]["signal"] == 15


# -- the fail-closed executor ------------------------------------------------------------


def _measure(
    tb: Testbed, variant: str, mechanisms: list[Mechanism], tmp_path: Path, family: int = 4
) -> Record:
    mechs: list[tuple[Mechanism, MechanismContext]] = []
    dut = tb.host("dut")
    for i, mech in enumerate(mechanisms):
        ctx = _ctx(tb, tmp_path, f"{variant}.{i}", family)
        ctx.rendered = mech.render(ctx)
        mechs.append((mech, ctx))
    kept: list[Record] = []
    ctx_m = MeasureContext.on(
        tb, f"{SERVER}:5201", family=family, variant=variant, mechanisms=mechs, keep=kept.append
    )
    point = one_point({"kind": "failclosed", "port": PROBE_PORT, "timeout": 0.5})
    try:
        for mech, ctx in mechs:
            mech.apply(dut, ctx)
        record = FailclosedExecutor().measure(ctx_m, point)
    finally:
        for mech, ctx in mechs:
            mech.release(dut, ctx)
        backends: set[str] = set().union(*(m.backends() for m, _ in mechs))
        if backends:
            reset_dut(dut, backends)
    assert kept == [record]
    return record


def _checks(record: Record) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in record["checks"]}


def test_failclosed_passes_for_the_appliance(
    bed: tuple[Testbed, EchoServer, EchoServer], tmp_path: Path
) -> None:
    tb = bed[0]
    record = _measure(tb, "appliance", [Appliance(ApplianceSpec())], tmp_path)
    checks = _checks(record)
    assert record["type"] == "result" and record["kind"] == "failclosed"
    assert list(checks) == [
        "routes",
        "inside-out",
        "outside-in",
        "forwarding-off",
        "daemon-killed",
        "restored",
    ]
    assert record["passed"] is True, record["failed"]
    assert checks["daemon-killed"]["applicable"] is True
    assert "SIGKILL" in checks["daemon-killed"]["detail"]
    assert DUT_OUTSIDE in checks["inside-out"]["detail"]  # the server saw the DUT (PAT)
    assert "direct" in checks["routes"]["detail"]  # the baseline's wire is named
    # forwarding came back on
    assert tb.host("dut").run(["sysctl", "-n", "net.ipv4.ip_forward"]).stdout.strip() == "1"


def test_failclosed_fails_for_a_fail_open_appliance(
    bed: tuple[Testbed, EchoServer, EchoServer], tmp_path: Path
) -> None:
    record = _measure(bed[0], "fail-open", [Appliance(ApplianceSpec(fail_open=True))], tmp_path)
    checks = _checks(record)
    assert record["passed"] is False
    assert record["failed"] == ["daemon-killed"]
    assert "fail-open" in checks["daemon-killed"]["detail"]
    leaked = [p for p in checks["daemon-killed"]["probes"] if p["answered"]]
    assert {(p["from"], p["proto"]) for p in leaked} == {("client", "tcp"), ("client", "udp")}


def test_failclosed_fails_the_daemon_check_for_a_plain_acl(
    bed: tuple[Testbed, EchoServer, EchoServer], tmp_path: Path
) -> None:
    acl = Acl(AclSpec(rules=10))  # stateless, permits the engine's ports, the probe's among them
    record = _measure(bed[0], "acl", [acl], tmp_path)
    checks = _checks(record)
    # the ACL lets the inside out and keeps the outside from opening connections in …
    assert checks["inside-out"]["passed"] and checks["outside-in"]["passed"]
    # … but has no daemon whose death would close the path: fail-open, reported as such
    assert record["failed"] == ["daemon-killed"]
    assert checks["daemon-killed"]["applicable"] is False
    assert "fail-open" in checks["daemon-killed"]["detail"]


def test_failclosed_baseline_fails_honestly(
    bed: tuple[Testbed, EchoServer, EchoServer], tmp_path: Path
) -> None:
    record = _measure(bed[0], "baseline", [], tmp_path)
    checks = _checks(record)
    assert record["passed"] is False
    assert checks["forwarding-off"]["passed"] is True
    assert checks["outside-in"]["passed"] is False
    assert checks["daemon-killed"]["passed"] is False
    assert checks["daemon-killed"]["applicable"] is False
    assert checks["daemon-killed"]["detail"].startswith("no daemon to kill")
    assert checks["inside-out"]["passed"] and checks["restored"]["passed"]


def test_failclosed_passes_for_the_appliance_over_ipv6(
    bed: tuple[Testbed, EchoServer, EchoServer], tmp_path: Path
) -> None:
    tb = bed[0]
    record = _measure(tb, "appliance", [Appliance(ApplianceSpec())], tmp_path, family=6)
    checks = _checks(record)
    assert record["passed"] is True, record["failed"]
    # PAT over IPv6 too: the server saw the DUT's outside address
    assert "2001:2:0:2::1" in checks["inside-out"]["detail"]
    assert all(p["to"].startswith("2001:2:") for c in record["checks"] for p in c["probes"])
    forwarding = "net.ipv6.conf.all.forwarding"
    assert tb.host("dut").run(["sysctl", "-n", forwarding]).stdout.strip() == "1"
