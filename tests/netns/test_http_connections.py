"""Real traffic for http (nginx in the server namespace) and connections, through the DUT."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.engine import EngineServer, Record, run_test, start_server
from secperf.mechanisms.acl import Acl
from secperf.mechanisms.base import (
    CONTROL_PORT,
    DATA_PORTS,
    MechanismContext,
    reset_dut,
    traffic_plan,
)
from secperf.scenario.sweep import WorkloadPoint
from secperf.services.nginx import HTTP_PORT, Nginx, start_nginx
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.connections import ConnRateExecutor

pytestmark = pytest.mark.netns

SERVER = "198.18.2.2"
SIZES = [1024, 80 * 1024, 208 * 1024]


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, Nginx, EngineServer]]:
    state = tmp_path_factory.mktemp("state")
    files = tmp_path_factory.mktemp("nginx")
    with Testbed.build(Topology.standard(), state_dir=state) as tb:
        web = start_nginx(tb.host("server"), files, SERVER)
        web.serve(SIZES)
        engine = start_server(tb.host("server"), f"0.0.0.0:{CONTROL_PORT}", data_ports=DATA_PORTS)
        yield tb, web, engine
        engine.stop()
        web.stop()


def http(tb: Testbed, **extra: Any) -> Record:
    spec = {
        "kind": "http",
        "server": f"{SERVER}:{HTTP_PORT}",
        "urls": [f"/files/{s}.bin" for s in SIZES],
        "rate": 30,
        "parallel": 4,
        "duration": 1.0,
        "warmup": 0.0,
        "interval": 0,
        **extra,
    }
    return run_test(tb.host("client"), spec).result


def test_nginx_serves_the_file_set_through_the_dut(
    bed: tuple[Testbed, Nginx, EngineServer],
) -> None:
    tb, web, _ = bed
    assert web.alive()
    assert not list(Path("/etc/nginx").glob(f"*{tb.prefix}*"))
    r = http(tb)
    # 30 fetches round-robin over three files: ten of each, every byte.
    assert r["fetches"] == 30, r
    assert r["bytes"] == 10 * sum(SIZES)
    assert r["failed"] == 0
    missing = http(tb, urls=["/files/nope.bin"], rate=10)
    assert missing["errors"]["bad_status"] == 10


def test_http_through_an_acl_and_blocked_port(
    bed: tuple[Testbed, Nginx, EngineServer], tmp_path: Path
) -> None:
    tb, _, _ = bed
    acl = Acl(rules=100, layout="linear", entries="extended", match="last", backend="nft")
    plan = traffic_plan(tb.topology, 4)
    ctx = MechanismContext(plan=plan, files_dir=tmp_path, name="v.0", table=f"secperf_{tb.prefix}")
    ctx.rendered = acl.render(ctx)
    acl.apply(tb.host("dut"), ctx)
    try:
        r = http(tb)
        assert r["fetches"] == 30 and r["bytes"] == 10 * sum(SIZES), r
    finally:
        reset_dut(tb.host("dut"), acl.backends())


def test_connections_capacity_through_the_dut(bed: tuple[Testbed, Nginx, EngineServer]) -> None:
    tb, _, _ = bed
    spec = {
        "kind": "connections",
        "server": f"{SERVER}:{CONTROL_PORT}",
        "connections": 2000,
        "hold": 0.2,
        "close_rate": 4000,
        "duration": 10.0,
    }
    r = run_test(tb.host("client"), spec).result
    assert r["established"] == 2000 and r["validated"] == 2000, r
    assert r["server"]["accepted"] == 2000 and r["server"]["validated"] == 2000
    assert r["teardown"]["fins"] == 2000
    assert r["teardown_rate"] > 0


def test_setup_rate_search_ends_with_a_bracket(bed: tuple[Testbed, Nginx, EngineServer]) -> None:
    tb, _, _ = bed
    kept: list[Record] = []
    ctx = MeasureContext.on(tb, f"{SERVER}:{CONTROL_PORT}", variant="baseline", keep=kept.append)
    # high is far above what two cores do, so the search must bisect down to a bracket.
    params: dict[str, object] = {
        "low": 200.0,
        "high": 1_000_000.0,
        "resolution_pct": 50.0,
        "max_steps": 6,
        "parallel": 4,
        "duration": 0.5,
        "warmup": 0.1,
        "timeout": 1.0,
    }
    point = WorkloadPoint(0, 0, "conn-rate", "conn_rate", params, "", ())
    rec = ConnRateExecutor().measure(ctx, point)
    low, high = rec["bracket"]
    assert low is not None and high is not None and low < high, rec
    assert rec["rate"] == low >= 200
    assert [k["type"] for k in kept].count("result") == 1
    assert sum(1 for k in kept if k["type"] == "trial") == len(rec["steps"])
