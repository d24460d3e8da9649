"""The flows workload without a testbed: the engine specs it builds from placed flows
(clients and servers per host, probes on their own rate, the masquerade's sources
allowed), how several client hosts' results merge, and the policy checks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from secperf.rulesets.model import Flow, PlacedFlow
from secperf.scenario.sweep import one_point
from secperf.testbed.topology import Topology
from secperf.workloads import flows


def _pf(name: str, proto: str = "tcp", **kw: Any) -> PlacedFlow:
    expect = kw.pop("expect", "accept")
    client = kw.pop("client", "client")
    server = kw.pop("server", "server")
    src = kw.pop("src", "198.18.1.2")
    listen_port = kw.pop("listen_port", 80)
    flow = Flow(
        name=name,
        protocol=proto,  # type: ignore[arg-type]
        src="10.0.0.1",
        dst="10.1.0.1",
        dport=kw.pop("dport", 80),
        ingress=None,
        egress=None,
        expect=expect,
        **kw,
    )
    return PlacedFlow(flow, client, server, src, "198.18.2.2", "198.18.2.2", listen_port)


def _specs(
    placed: list[PlacedFlow], denied: frozenset[str] = frozenset(), **keys: Any
) -> flows.Specs:
    p = one_point({"kind": "flows", **keys}).spec
    live, _ = flows._live(placed)
    ctx = SimpleNamespace(topology=Topology.standard(), denied=denied)
    return flows.engine_specs(ctx, p, live)  # type: ignore[arg-type]


def test_a_flow_the_variant_denies_goes_on_the_probes_schedule() -> None:
    # in a review, a flow the current set accepts and the proposed one drops: weighted,
    # each attempt would hold a loop for its timeout and starve the host's other flows
    placed = [_pf("web", weight=3.0), _pf("smtp", dport=25, listen_port=25, weight=1.0)]
    by = {f["name"]: f for f in _specs(placed, parallel=8, rate=100).clients["client"]["flows"]}
    assert by["smtp"]["weight"] == 1.0
    denied = _specs(placed, frozenset({"smtp"}), parallel=8, rate=100)
    by = {f["name"]: f for f in denied.clients["client"]["flows"]}
    assert by["smtp"]["rate"] == flows.PROBE_RATE and "weight" not in by["smtp"]
    assert by["web"]["weight"] == 3.0
    # the server still listens for it (a denied flow that got through is answered)
    assert 25 in {f["port"] for f in denied.servers["server"]["flows"]}


def test_specs_per_host_with_probes_on_their_own_rate() -> None:
    placed = [
        _pf("web", weight=3.0),
        _pf("dns", "udp", dport=53, listen_port=53, weight=1.0),
        _pf("ssh", dport=22, listen_port=22, expect="deny"),
        _pf("ping", "icmp", dport=None, listen_port=None),
        _pf("portless", dport=None, listen_port=None),
        _pf("in", client="server", server="client", src="198.18.2.2", listen_port=8080),
    ]
    live, skipped = flows._live(placed)
    assert [pf.flow.name for _, pf in live] == ["web", "dns", "ssh", "ping", "in"]
    assert skipped == [{"name": "portless", "why": "no destination port"}]
    s = _specs(placed, parallel=10, rate=1000)
    client = s.clients["client"]
    by = {f["name"]: f for f in client["flows"]}
    assert by["web"]["weight"] == 3.0 and "rate" not in by["web"]
    assert by["ssh"]["rate"] == flows.PROBE_RATE and "weight" not in by["ssh"]
    assert [f["id"] for f in client["flows"]] == [0, 1, 2, 3]  # ids: places in the plan
    # an echo: no port, no response size, and no server (the kernel answers it)
    assert "dport" not in by["ping"] and "response" not in by["ping"]
    assert "ping" not in {f["name"] for f in s.servers["server"]["flows"]}
    # parallel and rate split by the client hosts' weights (5 : 1)
    assert client["parallel"] == 8 and s.clients["server"]["parallel"] == 2
    assert client["rate"] == 1000 * 5 / 6 and s.clients["server"]["rate"] == 1000 / 6
    server = s.servers["server"]
    assert server["role"] == "server"
    assert {f["port"] for f in server["flows"]} == {80, 53, 22}
    # the flows' source, then the DUT's addresses (what a masquerade makes the source)
    assert server["allow"][0] == "198.18.1.2" and "198.18.2.1" in server["allow"]
    assert "198.18.1.1" in server["allow"]
    assert server["parallel"] == 8 + 1  # its senders' loops and the probe
    # the inbound flow's server is the client host, listening on the DNAT's port
    assert s.servers["client"]["flows"][0]["port"] == 8080


def test_merge_sums_hosts_and_takes_shares_over_every_weighted_attempt() -> None:
    def result(name: str, attempts: int, ok: int, weight: float | None) -> dict[str, Any]:
        return {
            "duration_s": 2.0,
            "attempts": attempts,
            "ok": ok,
            "failed": attempts - ok,
            "late": 0,
            "bytes": 100 * ok,
            "failures": {"timeout": attempts - ok},
            "latency_us": {"count": ok, "min": 1, "mean": 10.0, "stddev": 1.0, "max": 20},
            "cpu": {"client": {"user_s": 0.5, "system_s": 0.5}},
            "flows": [
                {
                    "name": name,
                    "attempts": attempts,
                    "ok": ok,
                    "failed": attempts - ok,
                    "weight": weight,
                }
            ],
        }

    rec = flows.merge(
        [("a", result("web", 300, 300, 3.0)), ("b", result("ssh", 2, 0, None))],
        [("server", {"answered": 300, "refused_sources": 0})],
    )
    assert rec["attempts"] == 302 and rec["ok"] == 300
    assert rec["failures"] == {"timeout": 2}
    assert rec["flow_rate"] == 150.0  # weighted successes over the window
    web, ssh = rec["flows"]
    assert web["share"] == 1.0 and web["weight_share"] == 1.0
    assert ssh["share"] is None
    assert rec["cpu"]["client"] == {"user_s": 1.0, "system_s": 1.0}
    assert rec["failure_ratio"] == 0.0


def test_policy_checks_name_each_violation() -> None:
    placed = {pf.flow.name: pf for pf in (_pf("web"), _pf("ssh", expect="deny"), _pf("own"))}
    placed["own"] = _pf("own", expect=None)
    got = [
        {"name": "web", "ok": 0, "attempts": 5, "failures": {"timeout": 5}},
        {"name": "ssh", "ok": 1, "attempts": 2},
        {"name": "own", "ok": 0, "attempts": 3},
    ]
    checks, violations = flows.policy_checks(got, placed, applicable=True)
    assert [(v["flow"], v["expect"]) for v in violations] == [("web", "accept"), ("ssh", "deny")]
    assert [c["passed"] for c in checks] == [False, False]
    assert "ssh: 1 of 2 attempts got through" in checks[0]["detail"]
    checks, _ = flows.policy_checks(got, placed, applicable=False)
    assert not any(c["applicable"] for c in checks)


def test_a_flow_never_attempted_is_not_run_and_a_test_that_attempted_nothing_is_an_error() -> None:
    import pytest

    from secperf.errors import EngineError

    placed = {pf.flow.name: pf for pf in (_pf("web"), _pf("ssh", expect="deny"), _pf("db"))}
    got = [
        {"name": "web", "ok": 5, "attempts": 5},
        {"name": "ssh", "ok": 0, "attempts": 0},
        {"name": "db", "ok": 0, "attempts": 0, "failures": {}},
    ]
    checks, violations = flows.policy_checks(got, placed, applicable=True)
    assert violations == []  # 0 attempts got nothing through, but it was never tried
    denied, expected = checks
    assert not denied["applicable"] and "not run (0 attempts): ssh" in denied["detail"]
    assert expected["passed"] and "not run (0 attempts): db" in expected["detail"]
    spec = flows.FlowsWorkload.model_validate({"kind": "flows", "duration": 1})
    with pytest.raises(EngineError, match="attempted none of its 2 flows in 1 s"):
        flows.require_attempted([{"name": "ssh", "attempts": 0}, {"name": "db"}], spec)
    flows.require_attempted(got, spec)  # one flow tried: the test ran
