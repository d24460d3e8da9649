"""Before every test the runner empties the DUT's conntrack table: no test inherits
another variant's (or its own previous test's) connections and NAT bindings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rich.console import Console

from secperf.mechanisms.base import conntrack_entries
from secperf.plan import Plan, Variant, prepare_variants
from secperf.results.rundir import RunDir
from secperf.run.runner import Runner
from secperf.scenario.scenario import Scenario
from secperf.testbed.testbed import Testbed
from secperf.workloads.parts.probe import EchoServer, probe, start_echo

pytestmark = pytest.mark.netns

PORT = 5201


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Runner, Testbed, list[Variant], EchoServer]]:
    tmp = tmp_path_factory.mktemp("flow")
    sc = Scenario.model_validate(
        {
            "name": "flow",
            "variants": {"pat": {"mechanisms": [{"kind": "nat", "mode": "pat"}]}},
            "workloads": [{"kind": "rr"}],
        }
    )
    plan = Plan.of(sc)
    runner = Runner(plan, RunDir.create(tmp / "results", "flow"), Console(quiet=True))
    with Testbed.build(plan.topology, state_dir=tmp / "state") as tb:
        variants = prepare_variants(sc, plan.traffic, tmp, f"secperf_{tb.prefix}", plan.topology)
        runner.mechanism_hosts = ["dut"]
        echo = start_echo(tb.host("server"), "0.0.0.0", [PORT])
        try:
            yield runner, tb, variants, echo
        finally:
            echo.stop()


def connect_through_dut(tb: Testbed, server: str) -> None:
    for proto in ("tcp", "udp"):
        assert probe(tb.host("client"), server, PORT, proto) is not None


def test_switching_variants_leaves_the_dut_conntrack_table_empty(
    setup: tuple[Runner, Testbed, list[Variant], EchoServer],
) -> None:
    runner, tb, (baseline, pat), _ = setup
    dut = tb.host("dut")
    server = runner.plan.traffic.server_addr
    runner._apply(tb, pat)
    connect_through_dut(tb, server)
    # PAT tracked both connections (TIME_WAIT and the UDP binding outlive the probes)
    assert conntrack_entries(dut) >= 2
    runner._apply(tb, baseline)
    assert conntrack_entries(dut) == 0
    # and back: the NAT variant starts with no binding from its earlier test
    runner._apply(tb, pat)
    assert conntrack_entries(dut) == 0


def test_the_same_variant_again_starts_empty_too(
    setup: tuple[Runner, Testbed, list[Variant], EchoServer],
) -> None:
    runner, tb, (_, pat), _ = setup
    dut = tb.host("dut")
    runner._apply(tb, pat)
    connect_through_dut(tb, runner.plan.traffic.server_addr)
    assert conntrack_entries(dut) >= 2
    runner._apply(tb, pat)  # a shuffled order may run one variant twice in a row
    assert conntrack_entries(dut) == 0
