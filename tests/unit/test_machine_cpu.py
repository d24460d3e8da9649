"""The CPU table's machine total comes from the exact counters around each test (the
`machine` record) and is never below the testbed's own CPU."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from secperf.results.cpu import cpu_row
from secperf.results.metrics import CpuBreakdown


def group(machine: dict[int, dict[str, Any]]) -> Any:
    # the measured window: 1 s, the testbed busy 0.9 s of it; the engine's tick-sampled
    # machine total (0.8 s) undercounts the softirq-heavy work
    cpu = {
        rep: CpuBreakdown(
            unit="kB",
            units=1e6,
            window_s=1.0,
            hosts={"client": 0.3, "dut": 0.0, "server": 0.6},
            softirq=0.4,
            testbed=0.9,
            machine=0.8,
        )
        for rep in (0, 1)
    }
    return SimpleNamespace(
        workload="w", point_id="w#0", label="w", variant="baseline", kind="stream",
        cpu=cpu, machine=machine,
    )  # fmt: skip


def record(busy: float, span: float, accounted: float | None) -> dict[str, Any]:
    return {"type": "machine", "source": "cpuidle", "busy_s": busy, "span_s": span,
            "accounted_pct": accounted}  # fmt: skip


def test_the_machine_total_is_the_exact_share_and_never_below_the_testbed() -> None:
    # the test's span (1.6 s: start-up and teardown around the window) was busy 1.1 s,
    # all of it the testbed's (accounted 100 %): scaling that to the window (1.1 / 1.6 s
    # = 0.69 s) would put the machine below the testbed's 0.9 s
    row = cpu_row(group({0: record(1.1, 1.6, 100.0), 1: record(1.1, 1.6, 100.0)}), 0.95, False)
    testbed, machine = row["per_unit_us"]["testbed"]["mean"], row["per_unit_us"]["machine"]["mean"]
    assert row["machine_source"] == "exact"
    assert machine == pytest.approx(testbed) and machine >= testbed
    assert row["accounted_pct"] == pytest.approx(100.0)
    # other work took a tenth of the testbed's CPUs: the machine is that much above it
    row = cpu_row(group({0: record(1.1, 1.6, 90.0), 1: record(1.1, 1.6, 90.0)}), 0.95, False)
    assert row["per_unit_us"]["machine"]["mean"] == pytest.approx(0.9e6 / 1e6 / 0.9)
    assert row["accounted_pct"] == pytest.approx(90.0)
    # counters that disagree (a share over 100 %) are flagged, and still not below
    row = cpu_row(group({0: record(1.0, 1.6, 110.0), 1: record(1.0, 1.6, 110.0)}), 0.95, False)
    assert row["per_unit_us"]["machine"]["mean"] >= row["per_unit_us"]["testbed"]["mean"]
    assert row["reconciliation_flag"]


def test_without_exact_counters_the_ticks_stand() -> None:
    row = cpu_row(group({}), 0.95, False)
    assert row["machine_source"] == "ticks"
    assert row["per_unit_us"]["machine"]["mean"] == pytest.approx(0.8)
