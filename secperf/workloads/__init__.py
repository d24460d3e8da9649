"""Workloads: what the endpoints do, one module a kind.

Each kind maps to an executor (secperf.workloads.base): most are one engine test
built from the point's parameters (sizes in bytes, rates in bit/s, times in
seconds); kinds that need more bring their own executor.
"""

from __future__ import annotations

from typing import Any

from secperf.scenario.sweep import WorkloadPoint
from secperf.workloads import crr, rr, stream
from secperf.workloads.attack_mix import AttackMixExecutor
from secperf.workloads.base import EngineExecutor, Executor
from secperf.workloads.connections import (
    ConnectionsExecutor,
    ConnRateExecutor,
    TeardownRateExecutor,
)
from secperf.workloads.dos import DosExecutor
from secperf.workloads.failclosed import FailclosedExecutor
from secperf.workloads.flood import FloodBeside, FloodExecutor
from secperf.workloads.http import HttpExecutor
from secperf.workloads.illegal import IllegalExecutor
from secperf.workloads.latency import LatencyExecutor
from secperf.workloads.min_flood import MinFloodRateExecutor
from secperf.workloads.mix import MixExecutor

EXECUTORS: dict[str, Executor] = {
    # stream/rr/crr take an optional flood beside them (workloads/flood.py)
    "stream": FloodBeside(EngineExecutor(stream.engine_spec)),
    "rr": FloodBeside(EngineExecutor(rr.engine_spec)),
    "crr": FloodBeside(EngineExecutor(crr.engine_spec)),
    "flood": FloodExecutor(),
    "min_flood_rate": MinFloodRateExecutor(),
    "http": HttpExecutor(),
    "mix": MixExecutor(),
    "connections": ConnectionsExecutor(),
    "conn_rate": ConnRateExecutor(),
    "teardown_rate": TeardownRateExecutor(),
    "latency": LatencyExecutor(),
    "failclosed": FailclosedExecutor(),
    "dos": DosExecutor(),
    "illegal": IllegalExecutor(),
    "attack_mix": AttackMixExecutor(),
}


def hosts_for(point: WorkloadPoint) -> frozenset[str]:
    """Hosts beyond client, dut and server that this point needs (an executor may
    decide per point: a stream needs the attacker only when a flood runs beside it)."""
    executor = executor_for(point.kind)
    per_point = getattr(executor, "hosts_for", None)
    if callable(per_point):
        hosts = per_point(point)
        assert isinstance(hosts, frozenset)
        return hosts
    return executor.hosts


def executor_for(kind: str) -> Executor:
    try:
        return EXECUTORS[kind]
    except KeyError:
        raise ValueError(f"no executor for workload kind {kind!r}") from None


def engine_spec(kind: str, params: dict[str, Any], *, server: str) -> dict[str, Any]:
    """The engine spec of an engine-driven kind (for tools and tests)."""
    executor = executor_for(kind)
    if isinstance(executor, FloodBeside):
        executor = executor.inner
    if not isinstance(executor, EngineExecutor):
        raise ValueError(f"workload kind {kind!r} is not a single engine test")
    return executor.spec(params, server)
