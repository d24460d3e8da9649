"""RFC 3511 §5.2 capacity without root: the connections executor against a fake
engine, its records summarized and printed as the report does.

Each test here failed on the code before the capacity was a search: a run that
opened every connection it asked for printed that count as the DUT's capacity,
a count that needs more client addresses than the testbed has ran into the
client's ports instead of being refused, and the connections all came from one
address.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from secperf.report.terminal import build_tables
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.scenario.sweep import one_point
from secperf.schema.sections import Testbed as TestbedSection
from secperf.testbed.topology import Topology
from secperf.workloads import connections
from secperf.workloads.base import MeasureContext, Refused
from secperf.workloads.connections import (
    ConnectionsExecutor,
    ConnectionsWorkload,
    capacity_search,
    legacy_capacity,
)
from secperf.workloads.parts.sources import enough_sources


class _Bed:
    prefix = "fake"

    def host(self, _name: str) -> None:
        return None


def engine_result(capacity: int, stopped_by: str, target: int) -> dict[str, Any]:
    return {
        "type": "result",
        "kind": "connections",
        "target": target,
        "established": capacity,
        "validated": capacity,
        "capacity": capacity,
        "failed": 100 if stopped_by == "failures" else 0,
        "failure_ratio": 0.0,
        "stopped_by": stopped_by,
        "limit_found": stopped_by == "failures",
        "open_rate": 10_000.0,
        "teardown_rate": 20_000.0,
    }


def fake_engine(
    outcomes: list[tuple[int, str]], specs: list[dict[str, Any]]
) -> Callable[..., dict[str, Any]]:
    """Stands in for run_on_client: each call the next (capacity, stopped_by)."""

    def run_on_client(
        _ctx: Any, spec: dict[str, Any], keep_all: bool, *, keep_result: bool = True
    ) -> dict[str, Any]:
        specs.append(spec)
        capacity, stopped_by = outcomes.pop(0)
        return engine_result(capacity, stopped_by, spec["connections"])

    return run_on_client


def measure_reps(
    root: Path, point_keys: dict[str, Any], per_variant: dict[str, int], topo: Topology
) -> RunDir:
    run = RunDir.create(root, "s")
    run.write_run_json({"scenario": {"name": "s", "repeat": {"halfwidth_pct": 5.0}}})
    point = one_point({"kind": "connections", **point_keys})
    for variant, reps in per_variant.items():
        for rep in range(reps):
            tags = {
                "variant": variant,
                "workload": point.name,
                "point_id": f"{point.name}#0",
                "label": "",
                "rep": rep,
            }

            def keep(rec: dict[str, Any], tags: dict[str, Any] = tags) -> None:
                run.append_record(tags, rec)

            ctx = MeasureContext(
                testbed=cast(Any, _Bed()),
                topology=topo,
                plan=cast(Any, None),
                family=4,
                variant=variant,
                direct=False,
                target="198.18.2.2:5201",
                keep=keep,
            )
            ConnectionsExecutor().measure(ctx, point)
    return run


def test_a_limit_found_is_a_count_and_a_target_reached_is_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs: list[dict[str, Any]] = []
    # baseline's two repetitions, then conntrack's
    outcomes = [
        (100_000, "target"),
        (100_000, "target"),
        (49_999, "failures"),
        (50_001, "failures"),
    ]
    monkeypatch.setattr(connections, "run_on_client", fake_engine(outcomes, specs))
    topo = Topology.standard(emulated_hosts=1)
    run = measure_reps(tmp_path, {"connections": 100_000}, {"baseline": 2, "conntrack": 2}, topo)
    rows = {str(r["variant"]): r for r in build_summary(run)["rows"] if r["metric"] == "capacity"}
    # the stateless path opened every connection asked: no limit below 100,000
    base, ct = rows["baseline"], rows["conntrack"]
    assert base["n"] == 0 and base["mean"] is None and base["censored_n"] == 2
    assert base["search"]["at_least_bound"] == 100_000
    # the stateful one failed at its table's size
    assert ct["n"] == 2 and ct["mean"] == 50_000 and ct["censored_n"] == 0
    tables = [t for t in build_tables(build_summary(run)) if t.metric == "capacity"]
    (table,) = tables
    cells = [c.text for c in table.rows[0]]
    assert cells[1] == "at least 100,000", cells
    assert cells[2].startswith("50,000"), cells
    assert any("at least x" in n for n in table.footnotes), table.footnotes
    # 100,000 connections need two addresses (~60,000 each to one server port)
    assert specs[0]["sources"] == [
        topo.primary_address("client"),
        *topo.emulated_addresses("client"),
    ]


def test_one_address_is_left_to_the_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs: list[dict[str, Any]] = []
    monkeypatch.setattr(connections, "run_on_client", fake_engine([(1000, "target")], specs))
    measure_reps(tmp_path, {"connections": 1000}, {"baseline": 1}, Topology.standard())
    assert "sources" not in specs[0]


def test_a_count_beyond_the_clients_addresses_is_refused_before_any_traffic() -> None:
    big = ConnectionsWorkload.model_validate({"kind": "connections", "connections": 1_000_000})
    assert big.source_count() == 17
    refused = enough_sources(big, TestbedSection(), None)
    assert isinstance(refused, Refused) and refused.key == "connections"
    assert "emulated_hosts = 16" in refused.message
    assert enough_sources(big, TestbedSection(emulated_hosts=16), None) is None
    asked = ConnectionsWorkload.model_validate(
        {"kind": "connections", "connections": 1000, "sources": 3}
    )
    refused = enough_sources(asked, TestbedSection(emulated_hosts=1), None)
    assert isinstance(refused, Refused) and refused.key == "sources"
    with pytest.raises(ValueError, match="sources"):
        ConnectionsWorkload.model_validate({"kind": "connections", "sources": 0})


def test_records_from_before_the_search_read_as_bounds_unless_they_failed() -> None:
    old = {"kind": "connections", "capacity": 15_000, "stopped_by": None, "target": 15_000}
    reading = legacy_capacity(old)
    assert reading is not None and reading.outcome == "at_least" and reading.bound == 15_000
    failed = {**old, "capacity": 9_000, "stopped_by": "failures"}
    reading = legacy_capacity(failed)
    assert reading is not None and reading.outcome == "found" and reading.value == 9_000


def test_an_engine_bound_short_of_the_count_is_named_not_the_range() -> None:
    short = {
        "kind": "connections",
        "capacity": 174_592,
        "stopped_by": "duration",
        "limit_found": False,
        "target": 300_000,
        "open_rate": 1476.2,
    }
    found = capacity_search(short)
    assert found is not None and found["outcome"] == "at_least"
    assert found["ceiling"]["error"] == (
        "the engine stopped at its duration bound at 1,476 opens/s: the opening phase "
        "ended first; raise the workload's duration or spread the connections over more "
        "sources"
    )
    reached = capacity_search({**short, "capacity": 300_000, "stopped_by": "target"})
    assert reached is not None and "ceiling" not in reached


def test_auto_spreads_wider_where_the_client_has_the_addresses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs: list[dict[str, Any]] = []
    monkeypatch.setattr(connections, "run_on_client", fake_engine([(100_000, "target")], specs))
    topo = Topology.standard(emulated_hosts=9)
    measure_reps(tmp_path, {"connections": 100_000}, {"baseline": 1}, topo)
    # two addresses would do (~60,000 each); five keep each at 20,000, where the
    # kernel's source-port search stays fast
    assert len(specs[0]["sources"]) == 5
