"""The flows workload through a filtering DUT: hand-placed flows (two accepted, one
probe that the rules must keep denied), run by the kind's executor on a standard bed
with a forward filter loaded on the DUT by the test (accept tcp dport 5400, drop tcp
dport 5401). The accepted flows share the attempts by their weights within 1 %, the
probe gets nothing through and no violation is reported; once the filter accepts 5401
too, the probe's success is reported as a violation."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from secperf.engine import Record
from secperf.rulesets.model import Flow, PlacedFlow
from secperf.scenario.sweep import one_point
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.registry import WORKLOADS

pytestmark = pytest.mark.netns

CLIENT, SERVER = "198.18.1.2", "198.18.2.2"
EXTRA = "198.18.1.50"  # a second source on the client, added by the test
TABLE = "flowstest"


def _rules(denied_port_verdict: str) -> str:
    return f"""table inet {TABLE} {{}}
delete table inet {TABLE}
table inet {TABLE} {{
  chain forward {{
    type filter hook forward priority filter; policy accept;
    tcp dport 5400 accept
    tcp dport 5401 {denied_port_verdict}
  }}
}}
"""


def _placed(
    name: str, src: str, port: int, *, expect: Any, weight: float, sizes: int
) -> PlacedFlow:
    flow = Flow(
        name=name,
        protocol="tcp",
        src=src,
        dst=SERVER,
        dport=port,
        ingress=None,
        egress=None,
        request=sizes,
        response=2 * sizes,
        weight=weight,
        expect=expect,
    )
    return PlacedFlow(
        flow=flow,
        client="client",
        server="server",
        src=src,
        dst=SERVER,
        listen=SERVER,
        listen_port=port,
    )


FLOWS = (
    _placed("web", CLIENT, 5400, expect="accept", weight=3.0, sizes=64),
    _placed("api", EXTRA, 5400, expect="accept", weight=1.0, sizes=16),
    _placed("telnet", CLIENT, 5401, expect="deny", weight=1.0, sizes=16),
)


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    state = tmp_path_factory.mktemp("state")
    with Testbed.build(Topology.standard(), state_dir=state) as tb:
        client = tb.host("client")
        dev = client.run(["ip", "-o", "-4", "route", "get", SERVER]).stdout.split(" dev ")[1]
        client.run(["ip", "addr", "add", f"{EXTRA}/32", "dev", dev.split()[0]])
        yield tb


def _measure(tb: Testbed, verdict: str) -> tuple[Record, list[Record]]:
    tb.host("dut").run(["nft", "-f", "-"], input=_rules(verdict))
    kept: list[Record] = []
    ctx = MeasureContext.on(tb, f"{SERVER}:5201", variant="rules", keep=kept.append)
    ctx = dataclasses.replace(ctx, plan=dataclasses.replace(ctx.plan, flows=FLOWS))
    point = one_point(
        {"kind": "flows", "duration": 1, "warmup": 0.3, "parallel": 2, "timeout": 0.5}
    )
    rec = WORKLOADS.get("flows").executor.measure(ctx, point)
    return rec, kept


def _flow(rec: Record, name: str) -> dict[str, Any]:
    return next(f for f in rec["flows"] if f["name"] == name)


def test_accepted_flows_share_by_weight_and_the_probe_stays_denied(bed: Testbed) -> None:
    rec, kept = _measure(bed, "drop")
    web, api, probe = (_flow(rec, n) for n in ("web", "api", "telnet"))
    assert web["ok"] > 0 and api["ok"] > 0, rec
    assert web["failed"] == 0 and api["failed"] == 0, rec
    # the weighted flows' shares: 3/4 and 1/4, within 1 % of each
    for f, want in ((web, 0.75), (api, 0.25)):
        assert f["weight_share"] == pytest.approx(want)
        assert abs(f["share"] - want) <= 0.01 * want, f
    # the probe: on its own schedule (about one a second), nothing through the drop
    assert probe["attempts"] >= 1 and probe["ok"] == 0, probe
    assert probe["failures"]["timeout"] == probe["attempts"]
    assert probe["share"] is None
    assert rec["violations"] == [] and rec["passed"] is True
    assert all(c["passed"] and c["applicable"] for c in rec["checks"]), rec["checks"]
    # the primary rate counts the accepted flows; the server answered each of them
    assert rec["flow_rate"] == pytest.approx((web["ok"] + api["ok"]) / rec["duration_s"])
    assert rec["servers"]["server"]["answered"] >= web["ok"] + api["ok"]
    assert rec["servers"]["server"]["refused_sources"] == 0
    roles = {k["role"] for k in kept if k.get("type") == "side"}
    assert {"flows-client-client", "flows-server-server"} <= roles


def test_a_probe_that_gets_through_is_a_violation(bed: Testbed) -> None:
    rec, _ = _measure(bed, "accept")
    probe = _flow(rec, "telnet")
    assert probe["ok"] >= 1, probe
    assert [v["flow"] for v in rec["violations"]] == ["telnet"]
    assert rec["passed"] is False
    denied_check = next(c for c in rec["checks"] if "denied" in c["name"])
    assert denied_check["applicable"] and not denied_check["passed"]
    assert "telnet" in denied_check["detail"]


NAT = "flowsnat"


def test_a_dnat_flow_is_answered_where_it_lands_and_a_masquerade_source_is_allowed(
    bed: Testbed,
) -> None:
    """Sent to 198.18.2.99:5400, rewritten to the server's 5402 (the server listens
    there, not at the flow's destination), and masqueraded on the way: the server sees
    the DUT's address as the source, which the workload declares for it. An ICMP echo
    beside it is answered by the server's kernel."""
    dut = bed.host("dut")
    out_dev = dut.run(["ip", "-o", "-4", "route", "get", SERVER]).stdout.split(" dev ")[1]
    dut.run(
        ["nft", "-f", "-"],
        input=f"""table ip {NAT} {{
  chain pre {{
    type nat hook prerouting priority dstnat; policy accept;
    ip daddr 198.18.2.99 tcp dport 5400 dnat to {SERVER}:5402
  }}
  chain post {{
    type nat hook postrouting priority srcnat; policy accept;
    oifname "{out_dev.split()[0]}" masquerade
  }}
}}
""",
    )
    try:
        web = FLOWS[0]
        moved = dataclasses.replace(web, dst="198.18.2.99", listen=SERVER, listen_port=5402)
        echo = Flow("ping", "icmp", CLIENT, SERVER, None, None, None, request=56)
        ping = PlacedFlow(echo, "client", "server", CLIENT, SERVER, SERVER, None)
        kept: list[Record] = []
        ctx = MeasureContext.on(bed, f"{SERVER}:5201", variant="rules", keep=kept.append)
        ctx = dataclasses.replace(ctx, plan=dataclasses.replace(ctx.plan, flows=(moved, ping)))
        point = one_point({"kind": "flows", "duration": 0.5, "warmup": 0.2, "timeout": 0.5})
        rec = WORKLOADS.get("flows").executor.measure(ctx, point)
        tracked = dut.run(["conntrack", "-L", "-p", "tcp", "-d", "198.18.2.99"]).stdout
    finally:
        dut.run(["nft", "delete", "table", "ip", NAT], check=False)
    # the DUT rewrote both ends: replies come from the server's 5402 to its own address
    assert f"src={SERVER} dst=198.18.2.1 sport=5402" in tracked, tracked
    f = _flow(rec, "web")
    assert f["ok"] > 0 and f["failed"] == 0, rec
    # the echo: answered by the server's kernel, through the same masquerade
    assert _flow(rec, "ping")["ok"] > 0 and _flow(rec, "ping")["failed"] == 0, rec
    assert rec["servers"]["server"]["refused_sources"] == 0
    server_spec = next(
        k["record"]["spec"]
        for k in kept
        if k.get("role") == "flows-server-server" and k["record"].get("type") == "start"
    )
    assert server_spec["flows"][0]["port"] == 5402
    assert "198.18.2.1" in server_spec["allow"]  # the DUT's address, the masquerade's


def test_a_thousand_flows_fit_past_one_argument_s_length(bed: Testbed) -> None:
    """1,200 flows make specs longer than one command-line argument may be (128 KiB):
    they reach the engine through a file, and every flow runs."""
    bed.host("dut").run(["nft", "-f", "-"], input=_rules("drop"))
    many = tuple(
        dataclasses.replace(
            FLOWS[0], flow=dataclasses.replace(FLOWS[0].flow, name=f"flow-number-{i:04d}")
        )
        for i in range(1200)
    )
    ctx = MeasureContext.on(bed, f"{SERVER}:5201", variant="rules")
    ctx = dataclasses.replace(ctx, plan=dataclasses.replace(ctx.plan, flows=many))
    point = one_point({"kind": "flows", "duration": 1, "warmup": 0.2, "parallel": 4})
    rec = WORKLOADS.get("flows").executor.measure(ctx, point)
    assert len(rec["flows"]) == 1200
    assert rec["ok"] > 0 and rec["failed"] == 0, rec["failures"]
