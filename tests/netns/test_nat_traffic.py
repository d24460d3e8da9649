"""NAT rewrites what the server sees: checked with a server that reports the source address."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.mechanisms.nat import Nat, NatSpec
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.parts.probe import EchoServer, probe, start_echo

pytestmark = pytest.mark.netns

SERVER = "198.18.2.2"
PORT = 5201


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, EchoServer]]:
    state = tmp_path_factory.mktemp("state")
    with Testbed.build(Topology.standard(emulated_hosts=2), state_dir=state) as tb:
        echo = start_echo(tb.host("server"), "0.0.0.0", [PORT])
        client_echo = start_echo(tb.host("client"), "0.0.0.0", [PORT])
        yield tb, echo
        client_echo.stop()


def load(tb: Testbed, nat: Nat, tmp_path: Path) -> None:
    plan = traffic_plan(tb.topology, 4)
    ctx = MechanismContext(plan=plan, files_dir=tmp_path, name="v.0", table=f"secperf_{tb.prefix}")
    ctx.rendered = nat.render(ctx)
    nat.apply(tb.host("dut"), ctx)


BACKENDS = ["nft", "iptables-legacy", "iptables-nft"]


def test_without_nat_the_server_sees_the_client(bed: tuple[Testbed, EchoServer]) -> None:
    tb, _ = bed
    assert probe(tb.host("client"), SERVER, PORT) == "198.18.1.2"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_pat_rewrites_to_the_dut_outside_address(
    bed: tuple[Testbed, EchoServer], backend: str, proto: str, tmp_path: Path
) -> None:
    tb, _ = bed
    nat = Nat(NatSpec(mode="pat", backend=backend))  # type: ignore[arg-type]
    try:
        load(tb, nat, tmp_path)
        assert probe(tb.host("client"), SERVER, PORT, proto) == "198.18.2.1"
    finally:
        reset_dut(tb.host("dut"), nat.backends())


@pytest.mark.parametrize("backend", BACKENDS)
def test_pool_rewrites_into_the_pool(
    bed: tuple[Testbed, EchoServer], backend: str, tmp_path: Path
) -> None:
    tb, _ = bed
    nat = Nat(NatSpec(mode="pool", backend=backend, pool_size=4))  # type: ignore[arg-type]
    try:
        load(tb, nat, tmp_path)
        seen = probe(tb.host("client"), SERVER, PORT)
        assert seen in {"198.18.5.100", "198.18.5.101", "198.18.5.102", "198.18.5.103"}
        assert seen in nat.translated_source(traffic_plan(tb.topology, 4), "198.18.2.1")
    finally:
        reset_dut(tb.host("dut"), nat.backends())


@pytest.mark.parametrize("backend", BACKENDS)
def test_static_maps_each_host_both_ways(
    bed: tuple[Testbed, EchoServer], backend: str, tmp_path: Path
) -> None:
    tb, _ = bed
    nat = Nat(NatSpec(mode="static", backend=backend))  # type: ignore[arg-type]
    try:
        load(tb, nat, tmp_path)
        assert probe(tb.host("client"), SERVER, PORT) == "198.18.5.10"
        # the outside reaches the inside host at its public address, and sees the server
        assert probe(tb.host("server"), "198.18.5.10", PORT) == SERVER
    finally:
        reset_dut(tb.host("dut"), nat.backends())
    # without static NAT the public address leads nowhere
    assert probe(tb.host("server"), "198.18.5.10", PORT, timeout=0.5) is None
