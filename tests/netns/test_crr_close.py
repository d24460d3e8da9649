"""crr's close as the DUT sees it: the default orderly close sends FINs both ways
through the DUT and leaves conntrack entries in TIME_WAIT there; close = "reset"
sends RSTs and no FIN. Also the testbed's connection sysctls on every host."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from secperf.engine import CONTROL_PORT, EngineServer, Record, run_test
from secperf.scenario.sweep import one_point
from secperf.testbed.hosts.netns import CONNECTION_SYSCTLS
from secperf.testbed.testbed import Testbed
from secperf.workloads.base import engine_spec
from tests.netns.beds import engine_bed

pytestmark = pytest.mark.netns

SERVER = "198.18.2.2"
DATA_PORT = 5350
TABLE = "crrclose"
# Stateful (ct) so that conntrack tracks every connection through the DUT, and
# counters of the flags that end a TCP connection, for the crr's data port only.
RULES = f"""table inet {TABLE} {{
  chain forward {{
    type filter hook forward priority filter; policy accept;
    ct state established,related counter
    tcp sport {DATA_PORT} tcp flags & fin == fin counter name fin_from_server
    tcp dport {DATA_PORT} tcp flags & fin == fin counter name fin_from_client
    tcp sport {DATA_PORT} tcp flags & rst == rst counter name rst_from_server
    tcp dport {DATA_PORT} tcp flags & rst == rst counter name rst_from_client
  }}
  counter fin_from_server {{ }}
  counter fin_from_client {{ }}
  counter rst_from_server {{ }}
  counter rst_from_client {{ }}
}}
"""


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, EngineServer]]:
    with engine_bed(tmp_path_factory) as pair:
        yield pair


def _fresh_counters(tb: Testbed) -> None:
    dut = tb.host("dut")
    dut.run(["nft", "delete", "table", "inet", TABLE], check=False)
    dut.run(["nft", "-f", "-"], input=RULES)
    dut.run(["conntrack", "-F"], check=False)


def _counters(tb: Testbed) -> dict[str, int]:
    out = tb.host("dut").run(["nft", "list", "counters", "table", "inet", TABLE]).stdout
    found = re.findall(r"counter (\w+) \{\s*packets (\d+)", out)
    return {name: int(n) for name, n in found}


def _conntrack_states(tb: Testbed) -> dict[str, int]:
    """The DUT's conntrack entries to the data port, by TCP state."""
    out = tb.host("dut").run(["conntrack", "-L", "-p", "tcp", "--dport", str(DATA_PORT)]).stdout
    states: dict[str, int] = {}
    for line in out.splitlines():
        m = re.match(r"tcp\s+\d+\s+\d+\s+(\w+)", line)
        if m:
            states[m.group(1)] = states.get(m.group(1), 0) + 1
    return states


def _crr(tb: Testbed, **params: Any) -> Record:
    spec = {
        **engine_spec(one_point({"kind": "crr", "parallel": 2, **params}).spec),
        "server": f"{SERVER}:{CONTROL_PORT}",
        "data_port": DATA_PORT,
        "rate": 400,
        "timeout": 1.0,
        "duration": 1.0,
        "warmup": 0.2,
        "interval": 0,
    }
    return run_test(tb.host("client"), spec).result


def test_every_host_gets_the_connection_sysctls(bed: tuple[Testbed, EngineServer]) -> None:
    tb, _ = bed
    for role in tb.topology.roles:
        got = tb.host(role).run(["sysctl", "-n", *CONNECTION_SYSCTLS]).stdout.splitlines()
        assert [" ".join(v.split()) for v in got] == [str(v) for v in CONNECTION_SYSCTLS.values()]


@pytest.mark.parametrize(
    ("given", "recorded"),
    [
        ({}, "server-first"),
        ({"close": "client-first"}, "client-first"),
        ({"close": "fin"}, "client-first"),
    ],
)
def test_orderly_closes_go_through_the_dut(
    bed: tuple[Testbed, EngineServer], given: dict[str, str], recorded: str
) -> None:
    """The default (server-first, netperf's order), client-first and its old name
    fin: a FIN each way per connection, no RST, TIME_WAIT at the DUT."""
    tb, _ = bed
    _fresh_counters(tb)
    r = _crr(tb, **given)
    assert r["close"] == recorded
    n = r["totals"]["client"]["connections"]
    assert n >= 300 and r["loss"]["lost"] == 0, r["loss"]
    c = _counters(tb)
    # One FIN each way per connection crossed the DUT, and no RST.
    assert c["fin_from_client"] >= n and c["fin_from_server"] >= n, (c, n)
    assert c["rst_from_client"] == 0 and c["rst_from_server"] == 0, c
    # conntrack followed each teardown to its end: TIME_WAIT (120 s) in the DUT.
    states = _conntrack_states(tb)
    assert states.get("TIME_WAIT", 0) >= n, (states, n)


def test_reset_close_sends_rsts_and_no_fin(bed: tuple[Testbed, EngineServer]) -> None:
    tb, _ = bed
    # conntrack forgets a CLOSE entry after 10 s (the kernel's default): on a busy
    # machine the first connections' entries went before they were counted (469 of
    # 481 in a fresh clone's `make test`). The DUT's own namespace keeps them 120 s.
    tb.host("dut").run(["sysctl", "-qw", "net.netfilter.nf_conntrack_tcp_timeout_close=120"])
    _fresh_counters(tb)
    r = _crr(tb, close="reset")
    assert r["close"] == "reset"
    n = r["totals"]["client"]["connections"]
    assert n >= 300 and r["loss"]["lost"] == 0, r["loss"]
    c = _counters(tb)
    assert c["fin_from_client"] == 0 and c["fin_from_server"] == 0, c
    assert c["rst_from_client"] >= n, (c, n)
    states = _conntrack_states(tb)
    assert states.get("TIME_WAIT", 0) == 0, states
    assert states.get("CLOSE", 0) >= n, (states, n)
