"""What the engine's server accepts (docs/engine-protocol.md, "What a server accepts"):
it answers only the control connection's peer and the addresses a spec declares, so a
NAT that translates the client's emulated hosts makes the spec declare what the NAT
makes of them (`peers`); and it holds at most 1 GiB for a test, so a stream workload
past it is refused when the scenario is read."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from secperf.mechanisms.base import MechanismContext, traffic_plan
from secperf.mechanisms.nat import Nat, NatSpec
from secperf.testbed.topology import Topology
from secperf.workloads.base import MeasureContext
from secperf.workloads.latency import LatencyExecutor, LatencyWorkload
from secperf.workloads.stream import StreamWorkload


def _specs(tmp_path: Path, mode: str | None) -> dict[str, object]:
    topo = Topology.standard(emulated_hosts=2)
    plan = traffic_plan(topo, 4)
    mechanisms = []
    if mode is not None:
        nat = Nat(NatSpec(mode=mode))  # type: ignore[arg-type]
        mechanisms.append(
            (nat, MechanismContext(plan=plan, files_dir=tmp_path, name="v.0", table="t"))
        )
    ctx = MeasureContext(
        testbed=None,  # type: ignore[arg-type]
        topology=topo,
        plan=plan,
        family=4,
        variant="v",
        direct=False,
        target="198.18.2.2:5201",
        mechanisms=mechanisms,  # type: ignore[arg-type]
    )
    workload = LatencyWorkload.model_validate({"kind": "latency"})
    spec, _ = LatencyExecutor().specs(ctx, workload)
    return spec


def test_a_latency_test_through_a_static_or_pool_nat_declares_the_public_side(
    tmp_path: Path,
) -> None:
    for mode in ("static", "pool"):
        spec = _specs(tmp_path, mode)
        assert spec["sources"], spec  # the emulated hosts, which the NAT translates
        assert spec["peers"] == ["198.18.5.0/24"], spec
    # Without a translation of the sources nothing more is declared: PAT translates
    # the control connection to the same address as the probes.
    for mode in (None, "pat"):
        assert "peers" not in _specs(tmp_path, mode)


def test_a_stream_whose_server_would_hold_more_than_the_engine_allows_is_refused() -> None:
    with pytest.raises(ValidationError, match="1 GiB it allows a test"):
        StreamWorkload.model_validate({"kind": "stream", "message": "64MiB", "parallel": 32})
    with pytest.raises(ValidationError, match="lower message or parallel"):
        StreamWorkload.model_validate(
            {"kind": "stream", "message": "64MiB", "parallel": [1, 16, 32], "direction": "both"}
        )
    StreamWorkload.model_validate({"kind": "stream", "message": "64MiB", "parallel": 8})
    # The client receives: the server sends one shared message, whatever parallel is.
    StreamWorkload.model_validate(
        {"kind": "stream", "message": "64MiB", "parallel": 128, "direction": "receive"}
    )
