"""How a workload point is measured once: the executor interface.

Most kinds are one secperf-engine test from the client to the server
(`EngineExecutor`). A kind that needs more (a flood beside the measured flow, a
check that stops the DUT, a service started in the server) brings its own
executor; the runner only asks it for one result record per round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from secperf.engine import Record, run_test
from secperf.mechanisms.base import Mechanism, MechanismContext, TrafficPlan, traffic_plan
from secperf.scenario.sweep import WorkloadPoint
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.common import Spec


@dataclass
class MeasureContext:
    """Everything an executor may use for one measurement of one variant."""

    testbed: Testbed
    topology: Topology
    plan: TrafficPlan
    family: int
    variant: str  # "baseline" or the variant's name
    direct: bool  # this variant bypasses the DUT (a `direct` baseline)
    target: str  # the engine server's control address (ADDR:PORT) for this variant
    mechanisms: list[tuple[Mechanism, MechanismContext]] = field(default_factory=list)
    # The hosts the workload runs from and to (names in the testbed graph).
    client: str = "client"
    server: str = "server"
    # The client hosts that drive the point at once (several generators); empty: client.
    generators: list[str] = field(default_factory=list)
    # Append one record to records.jsonl, tagged with variant, point and round.
    keep: Callable[[Record], None] = lambda _rec: None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def on(
        cls,
        testbed: Testbed,
        target: str,
        *,
        family: int = 4,
        variant: str = "test",
        mechanisms: list[tuple[Mechanism, MechanismContext]] | None = None,
        keep: Callable[[Record], None] | None = None,
        client: str = "client",
        server: str = "server",
    ) -> MeasureContext:
        """A context for measuring on `testbed` outside a run (tools and tests):
        topology and traffic plan come from the testbed itself."""
        return cls(
            testbed=testbed,
            topology=testbed.topology,
            plan=traffic_plan(testbed.topology, family, client, server),
            family=family,
            variant=variant,
            direct=False,
            target=target,
            mechanisms=mechanisms or [],
            keep=keep or (lambda _rec: None),
            client=client,
            server=server,
        )


class Executor(Protocol):
    @property
    def hosts(self) -> frozenset[str]:
        """Hosts beyond client, dut and server that this kind needs (e.g. "attacker")."""
        ...

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        """Measure the point once; return its `result` record (also passed to ctx.keep)."""
        ...


@dataclass(frozen=True)
class EngineExecutor:
    """One engine test from the client to the server."""

    build: Callable[[dict[str, Any]], Spec]
    hosts: frozenset[str] = frozenset()

    def spec(self, params: dict[str, Any], server: str) -> Spec:
        """The engine spec for one point's parameters, aimed at `server` (ADDR:PORT)."""
        spec = self.build(params)
        spec["server"] = server
        for key in ("duration", "warmup"):
            value = params.get(key)
            if value is not None and key not in spec:  # a fixed transfer sets its own
                spec[key] = float(str(value))
        return spec

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        spec = self.spec(dict(point.params), ctx.target)
        if len(ctx.generators) > 1:
            from secperf.workloads.generators import run_generators

            hosts = [(name, ctx.testbed.host(name)) for name in ctx.generators]
            return run_generators(hosts, spec, ctx.keep)
        return run_test(ctx.testbed.host(ctx.client), spec, on_record=ctx.keep).result
