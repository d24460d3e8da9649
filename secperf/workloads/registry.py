"""Every workload kind, by its `kind = "..."` name: one line a kind.

Adding a kind: its module (docs/architecture.md, "Adding a workload kind") and a line here.
"""

from __future__ import annotations

from typing import Any

from secperf.schema.registry import KindRegistry
from secperf.workloads import (
    attack_mix,
    conn_rate,
    connections,
    crr,
    dos,
    failclosed,
    flood,
    flows,
    http,
    http_capacity,
    illegal,
    latency,
    min_flood,
    mix,
    rfc2544,
    rr,
    stream,
    teardown_rate,
)
from secperf.workloads.base import WorkloadKind

WORKLOADS: KindRegistry[WorkloadKind[Any]] = KindRegistry(
    "workload",
    [
        stream.KIND,
        rr.KIND,
        crr.KIND,
        flood.KIND,
        min_flood.KIND,
        latency.KIND,
        http.KIND,
        http_capacity.KIND,
        mix.KIND,
        connections.KIND,
        conn_rate.KIND,
        teardown_rate.KIND,
        failclosed.KIND,
        dos.KIND,
        illegal.KIND,
        rfc2544.KIND,
        attack_mix.KIND,
        flows.KIND,
    ],
)
