"""RFC 9411 §7.9 finds the DUT's limit: through a DUT whose connection table holds
LIMIT entries (nf_conntrack_max), the `http_capacity` search over kept-alive HTTPS
connections to nginx finds LIMIT within its resolution (connection LIMIT + 1 is never
let through, so its fetches fail); without a limit below its range it says "at
least" its top, never a number standing in for one.

nf_conntrack_max is machine-wide on this kernel (each namespace's table held to it):
the test sets it for its own duration and puts the old value back, also when it
fails.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.engine import CONTROL_PORT, Record
from secperf.scenario.sweep import one_point
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.http_capacity import HttpCapacityExecutor
from secperf.workloads.parts import http
from tests.netns.conntrack import TRACKING, limited_conntrack

pytestmark = pytest.mark.netns

SERVER = "198.18.2.2"
LIMIT = 400


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, Path]]:
    files = tmp_path_factory.mktemp("files")
    topo = Topology.standard(emulated_hosts=1)
    with Testbed.build(topo, state_dir=tmp_path_factory.mktemp("state")) as tb:
        tb.host("dut").run(["nft", "-f", "-"], input=TRACKING)
        try:
            yield tb, files
        finally:
            http.forget(tb.prefix)


@pytest.fixture
def conntrack_max() -> Iterator[None]:
    """nf_conntrack_max at LIMIT for the test, the old value back after it."""
    with limited_conntrack(LIMIT):
        yield


def search(tb: Testbed, files: Path, **keys: Any) -> tuple[Record, list[Record]]:
    records: list[Record] = []
    ctx = MeasureContext.on(tb, f"{SERVER}:{CONTROL_PORT}", keep=records.append)
    ctx.extra["files_dir"] = files
    table = {
        "kind": "http_capacity",
        "search": "bisect",  # these check the bisection's trials (MLRsearch's: unit tests)
        "fetch_every": 0.5,
        "warmup": 1.5,
        "duration": 2.0,
        "timeout": 1.0,
        **keys,
    }
    rec = HttpCapacityExecutor().measure(ctx, one_point(table))
    assert records[-1] is rec
    return rec, [r for r in records if r.get("type") == "trial"]


@pytest.mark.serial
def test_a_conntrack_limit_is_found_for_https_connections(
    bed: tuple[Testbed, Path], conntrack_max: None
) -> None:
    tb, files = bed
    rec, trials = search(tb, files, tls=True, low=100, high=800, resolution_pct=5, max_steps=10)
    found = rec["search"]
    assert found["outcome"] == "found", found
    # the most that passed is at most the table, and within the resolution of it
    assert LIMIT / 1.06 <= found["value"] <= LIMIT, found
    passed = [t for t in trials if t["passed"]]
    failed = [t for t in trials if not t["passed"]]
    assert passed and failed and max(t["asked"] for t in passed) == found["value"]
    # a trial beyond the table failed on its transactions, and said so
    over = next(t for t in failed if t["asked"] == 800)
    assert over["failed"] > 0 and any("failed transactions" in m for m in over["missed"]), over
    # a trial that passed held its connections, all TLS, every fetch done
    best = next(t for t in passed if t["asked"] == found["value"])
    assert best["failed"] == 0 and best["achieved"] >= 0.99 * best["asked"], best


def test_without_a_limit_in_its_range_the_search_says_at_least(
    bed: tuple[Testbed, Path],
) -> None:
    tb, files = bed
    rec, trials = search(tb, files, low=50, high=200)
    found = rec["search"]
    assert found["outcome"] == "at_least" and found["bound"] == 200, found
    assert found.get("value") is None  # a bound, never a number standing in for one
    # the top passed: nothing below it to try
    assert [t["asked"] for t in trials] == [200] and trials[0]["passed"], trials


SOURCES_TABLE = "srccount"


@pytest.mark.serial
def test_connections_spread_over_the_clients_addresses_and_open_at_the_open_rate(
    bed: tuple[Testbed, Path],
) -> None:
    tb, files = bed
    client = [
        tb.topology.primary_address("client", 4),
        *tb.topology.emulated_addresses("client", 4),
    ]
    assert len(client) == 2
    dut = tb.host("dut")
    rules = "".join(
        f"        ip saddr {a} tcp dport {http.HTTPS_PORT} tcp flags syn / syn,ack counter\n"
        for a in client
    )
    dut.run(
        ["nft", "-f", "-"],
        input=f"table ip {SOURCES_TABLE} {{\n    chain opened {{\n"
        f"        type filter hook forward priority -10; policy accept;\n{rules}    }}\n}}\n",
    )
    try:
        rec, trials = search(tb, files, tls=True, low=50, high=200, sources=2, open_rate=400)
        listing = dut.run(["nft", "list", "table", "ip", SOURCES_TABLE]).stdout
    finally:
        dut.run(["nft", "delete", "table", "ip", SOURCES_TABLE])
    found = rec["search"]
    assert found["outcome"] == "at_least" and found["bound"] == 200, (found, trials)
    # every connection of the trial opened from one of the two, round-robin
    opened = {
        a: int(re.search(rf"ip saddr {re.escape(a)} .*packets (\d+)", listing).group(1))  # type: ignore[union-attr]
        for a in client
    }
    assert all(n >= 100 for n in opened.values()), (opened, listing)
