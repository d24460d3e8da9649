"""The workload kinds' declarations, read as data: each is whole and consistent, the
registry finds them, and importing one kind imports neither the others nor the schema."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.results.metrics import METRICS, censored_words, is_search_metric
from secperf.scenario.scenario import Scenario
from secperf.workloads.base import ATTACKER, WorkloadKind
from secperf.workloads.registry import WORKLOADS

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [
    "stream",
    "rr",
    "crr",
    "flood",
    "min_flood_rate",
    "latency",
    "http",
    "http_capacity",
    "mix",
    "connections",
    "conn_rate",
    "teardown_rate",
    "failclosed",
    "dos",
    "illegal",
    "rfc2544",
    "attack_mix",
    "flows",
]


def kinds() -> Iterator[WorkloadKind[object]]:  # type: ignore[type-var]
    yield from WORKLOADS


def test_every_shipped_kind_is_registered_in_order() -> None:
    assert WORKLOADS.names() == SHIPPED
    with pytest.raises(KeyError, match="the known kinds are stream, rr"):
        WORKLOADS.get("nope")


@pytest.mark.parametrize("name", SHIPPED)
def test_a_kinds_declaration_is_consistent(name: str) -> None:
    kind = WORKLOADS.get(name)
    fields = kind.model.model_fields
    assert set(kind.model.sweepable) <= set(fields), "a sweepable key the model lacks"
    assert set(kind.model.engine_fields) <= set(fields), "an engine field the model lacks"
    assert set(kind.model.engine_names) <= set(kind.model.engine_fields)
    rows = [m.name for m, _ in kind.metrics]
    assert len(rows) == len(set(rows)), "a metric twice"
    assert all(s.metric.name in rows for s in kind.searches), "a search without its row"
    assert all(is_search_metric(s.metric.name) for s in kind.searches)
    if kind.metrics:
        assert any(m.primary for m, _ in kind.metrics), "no primary metric to stop rounds on"
    # the defaults make a valid workload that names itself
    spec = kind.model.model_validate({"kind": name})
    assert WORKLOADS.of(spec) is kind and spec.derived_name and spec.name


def test_a_metric_name_means_one_metric_across_kinds() -> None:
    seen: dict[str, object] = {}
    for kind in WORKLOADS:
        for metric, _ in kind.metrics:
            assert seen.setdefault(metric.name, metric) == metric, metric.name
    assert set(seen) <= set(METRICS)


def test_searches_word_their_censored_values() -> None:
    assert censored_words("min_flood_rate")["below"] == "denied already at {bound}"
    assert censored_words("max_conn_rate") == {"below": "< {bound}", "at_least": "≥ {bound}"}
    assert not is_search_metric("throughput")


def test_hosts_and_floods_come_from_the_kind() -> None:
    sc = Scenario.model_validate(
        {
            "name": "t",
            "variants": {"v": {}},
            "workloads": [
                {"kind": "stream"},
                {"kind": "stream", "flood": "udp", "flood_rate": 1000},
                {"kind": "dos"},
                {"kind": "rfc2544", "line_rate": "1gbit"},
            ],
        }
    )
    plain, beside, dos, rfc = sc.workloads
    assert [WORKLOADS.of(w).floods(w) for w in sc.workloads] == [False, True, True, False]
    assert [ATTACKER in WORKLOADS.of(w).hosts(w) for w in (plain, beside, dos, rfc)] == [
        False,
        True,
        True,
        False,
    ]
    assert WORKLOADS.of(rfc).layout is not None and WORKLOADS.of(plain).layout is None
    assert [k.name for k in WORKLOADS if k.generators] == ["stream", "rr", "crr"]
    assert [k.name for k in WORKLOADS if k.checks] == ["failclosed", "illegal", "flows"]


def test_importing_one_kind_imports_no_other_and_not_the_schema() -> None:
    code = (
        "import sys, secperf.workloads.stream as s; "
        "print(s.KIND.name, sorted(m for m in sys.modules if m.startswith('secperf.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.startswith("stream ")
    loaded = set(ast.literal_eval(out.split(" ", 1)[1]))
    others = {f"secperf.workloads.{m}" for m in ("http", "mix", "latency", "dos", "rfc2544")}
    assert not others & loaded, others & loaded
    assert "secperf.workloads.registry" not in loaded
    assert "secperf.scenario.scenario" not in loaded
