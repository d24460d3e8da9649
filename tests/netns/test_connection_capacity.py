"""RFC 3511 §5.2 finds the DUT's limit: a DUT whose connection table holds 50,000
entries (nf_conntrack_max) lets about 50,000 connections through, and the
connections workload says so, a count found, from connections spread over two
client addresses; without a limit below what it asks, it says "at least".

nf_conntrack_max is machine-wide on this kernel (read-only in a namespace, each
namespace's table held to it): the test sets it for its own duration and puts the
old value back, also when it fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from secperf.engine import CONTROL_PORT, EngineServer
from secperf.scenario.sweep import one_point
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.connections import ConnectionsExecutor
from tests.netns.beds import engine_bed
from tests.netns.conntrack import TRACKING, limited_conntrack

pytestmark = pytest.mark.netns

SERVER = "198.18.2.2"
LIMIT = 50_000


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, EngineServer]]:
    # One emulated host beside the client: two source addresses.
    with engine_bed(tmp_path_factory, Topology.standard(emulated_hosts=1)) as pair:
        yield pair


@pytest.fixture
def conntrack_max() -> Iterator[None]:
    """nf_conntrack_max at LIMIT for the test, the old value back after it."""
    with limited_conntrack(LIMIT):
        yield


def capacity_test(tb: Testbed, connections: int, sources: int) -> dict[str, Any]:
    records: list[dict[str, Any]] = []
    ctx = MeasureContext.on(tb, f"{SERVER}:{CONTROL_PORT}", keep=records.append)
    point = one_point(
        {
            "kind": "connections",
            "connections": connections,
            "sources": sources,
            "timeout": 2.0,
            "hold": 0.2,
            "duration": 120.0,
        }
    )
    rec = ConnectionsExecutor().measure(ctx, point)
    assert records[-1] is rec and records[0]["type"] == "start"
    return rec


@pytest.mark.serial
def test_a_conntrack_limit_of_50000_is_found_within_one_percent(
    bed: tuple[Testbed, EngineServer], conntrack_max: None
) -> None:
    tb, _ = bed
    dut = tb.host("dut")
    dut.run(["nft", "-f", "-"], input=TRACKING)
    try:
        dut.run(["conntrack", "-F"], check=False)
        rec = capacity_test(tb, 60_000, 2)
        table = int(dut.run(["conntrack", "-C"]).stdout.strip() or 0)
    finally:
        dut.run(["nft", "delete", "table", "inet", "capacity"], check=False)
        dut.run(["conntrack", "-F"], check=False)
    assert rec["stopped_by"] == "failures" and rec["limit_found"] is True, rec
    capacity = rec["capacity"]
    assert abs(capacity - LIMIT) <= LIMIT // 100, rec
    assert rec["search"] == {
        "outcome": "found",
        "measure": "count",
        "value": capacity,
        "interval": [capacity, capacity],
        "stopped_by": "failures",
    }
    # the connections that failed timed out at the full table (their SYNs dropped)
    assert rec["open_errors"].get("connect_timeout", 0) >= 1, rec["open_errors"]
    assert rec["sources"] == 2
    assert table <= LIMIT
    # the engine's own memory per held connection is stated, and small
    assert 0 < rec["memory"]["client_bytes_per_connection"] < 4096, rec["memory"]


def test_without_a_limit_below_the_count_it_is_at_least(
    bed: tuple[Testbed, EngineServer],
) -> None:
    tb, _ = bed
    rec = capacity_test(tb, 3000, 1)
    assert rec["stopped_by"] == "target" and rec["limit_found"] is False, rec
    assert rec["capacity"] == 3000
    assert rec["search"]["outcome"] == "at_least" and rec["search"]["bound"] == 3000
