"""The deciding rule of each flow, read from a real trace of its first packet."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from secperf.mechanisms.base import reset_dut
from secperf.rulesets.model import Flow, PlacedFlow
from secperf.rulesets.verdicts import probe
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology

pytestmark = pytest.mark.netns

CLIENT, SERVER, DUT_IN = "198.18.1.2", "198.18.2.2", "198.18.1.1"
RULES = """
table inet site {
  chain input {
    type filter hook input priority filter; policy drop;
    tcp dport 22 accept
  }
  chain forward {
    type filter hook forward priority filter; policy drop;
    ct state established,related accept
    tcp dport 80 accept
    tcp dport 25 drop
    udp dport 53 accept
  }
}
"""


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with Testbed.build(Topology.standard(), state_dir=tmp_path_factory.mktemp("s")) as tb:
        tb.host("dut").run(["nft", "-f", "-"], input=RULES)
        yield tb
        reset_dut(tb.host("dut"), set())


def placed(name: str, proto: str, dst: str, port: int, server: str = "server") -> PlacedFlow:
    flow = Flow(name, proto, CLIENT, dst, port, "lan0", None)  # type: ignore[arg-type]
    return PlacedFlow(flow, "client", server, CLIENT, dst, dst, port)


def handles(tb: Testbed) -> dict[str, int]:
    """Rule text fragment -> its handle in the loaded rule set."""
    out = tb.host("dut").run(["nft", "-j", "-a", "list", "table", "inet", "site"]).stdout
    found: dict[str, int] = {}
    for obj in json.loads(out)["nftables"]:
        rule = obj.get("rule")
        if rule:
            text = json.dumps(rule["expr"])
            for port in ("22", "80", "25", "53"):
                if f'"right": {port}' in text:
                    found[port] = rule["handle"]
    return found


def test_each_flow_is_decided_by_the_rule_that_matches_it(bed: Testbed) -> None:
    flows = [
        placed("web", "tcp", SERVER, 80),
        placed("smtp", "tcp", SERVER, 25),
        placed("dns", "udp", SERVER, 53),
        placed("other", "tcp", SERVER, 8080),
        placed("ssh", "tcp", DUT_IN, 22, server="dut"),
        PlacedFlow(
            Flow("ping6", "icmp", "2001:2:0:1::2", "2001:2:0:2::2", None, "lan0", None),
            "client",
            "server",
            "2001:2:0:1::2",
            "2001:2:0:2::2",
            "2001:2:0:2::2",
            None,
        ),
    ]
    got = probe(
        bed.host("dut"),
        {"client": bed.host("client")},
        flows,
        table=f"secperf_{bed.prefix}_trace",
    )
    h = handles(bed)
    assert (got["web"].verdict, got["web"].chain, got["web"].handle) == (
        "accept",
        "forward",
        h["80"],
    )
    assert (got["smtp"].verdict, got["smtp"].handle) == ("deny", h["25"])
    assert (got["dns"].verdict, got["dns"].handle) == ("accept", h["53"])
    # no rule matched: the forward chain's policy decided
    assert (got["other"].verdict, got["other"].chain, got["other"].handle) == (
        "deny",
        "forward",
        None,
    )
    assert (got["ssh"].verdict, got["ssh"].chain, got["ssh"].handle) == ("accept", "input", h["22"])
    # the tracing table is gone again
    # no ICMPv6 echo probe is sent: said so, never read as "never reached the DUT"
    assert got["ping6"].verdict == "not probed"
    tables = bed.host("dut").run(["nft", "list", "tables"]).stdout
    assert "_trace" not in tables
