"""Real traffic for http (nginx in the server namespace) and connections, through the DUT."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.engine import CONTROL_PORT, DATA_PORTS, EngineServer, Record, run_test, start_server
from secperf.mechanisms.acl import Acl, AclSpec
from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.scenario.sweep import one_point
from secperf.services.nginx import HTTP_PORT, Nginx, start_nginx
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.conn_rate import ConnRateExecutor

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
    acl = Acl(AclSpec(rules=100, layout="linear", entries="extended", match="last", backend="nft"))
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
        "search": "bisect",  # its steps are checked (MLRsearch's: tests/unit)
        "low": 200.0,
        "high": 1_000_000.0,
        "resolution_pct": 50.0,
        "max_steps": 6,
        "parallel": 4,
        "duration": 0.5,
        "warmup": 0.1,
        "timeout": 1.0,
    }
    point = one_point({"kind": "conn_rate", **params})
    rec = ConnRateExecutor().measure(ctx, point)
    search = rec["search"]
    assert search["outcome"] == "found", search
    low, high = search["interval"]
    assert search["value"] == low >= 200 and low < high, search
    assert search["passed_at"]["asked"] == low and search["failed_at"]["asked"] == high
    # a passing trial achieved (nearly) what it asked; the achieved rate is beside it
    assert search["passed_at"]["achieved"] >= 0.95 * low
    assert [k["type"] for k in kept].count("result") == 1
    trials = [k for k in kept if k["type"] == "trial"]
    assert len(trials) == len(search["steps"])
    assert all(t["asked"] > 0 and t["achieved"] is not None for t in trials)


def search_once(bed: tuple[Testbed, Nginx, EngineServer], **params: object) -> dict[str, Any]:
    tb, _, _ = bed
    ctx = MeasureContext.on(tb, f"{SERVER}:{CONTROL_PORT}", variant="baseline")
    base: dict[str, object] = {
        "search": "bisect",
        "max_steps": 4,
        "duration": 0.5,
        "warmup": 0.1,
        "timeout": 1.0,
    }
    point = one_point({"kind": "conn_rate", **base, **params})
    search: dict[str, Any] = ConnRateExecutor().measure(ctx, point)["search"]
    return search


def test_setup_rate_searches_outside_their_range_are_bounds_not_numbers(
    bed: tuple[Testbed, Nginx, EngineServer],
) -> None:
    # 20–50 conn/s: far below what the path does, so even the top rate passes
    up = search_once(bed, low=20.0, high=50.0, parallel=4)
    assert up["outcome"] == "at_least" and up["value"] is None, up
    assert up["bound"] == 50.0 and len(up["steps"]) == 1
    assert up["passed_at"]["achieved"] >= 0.95 * 50
    # one connect loop of 64 KiB responses cannot open 50k conn/s: even the bottom fails
    down = search_once(bed, low=50_000.0, high=100_000.0, parallel=1, response=65536)
    assert down["outcome"] == "below" and down["value"] is None, down
    assert down["bound"] == 50_000.0 and len(down["steps"]) == 2
    assert down["failed_at"]["achieved"] < 0.95 * 50_000  # what it really did, beside it
