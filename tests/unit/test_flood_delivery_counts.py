"""Delivered flood counts and coverage of the measured window, without root: the
windows from engine records, the coverage verdict and its error, the counter rules,
and the flood metric rows (delivered rate primary, drop share beside the sent rate)."""

from __future__ import annotations

from typing import Any

import pytest

from secperf.errors import EngineError
from secperf.results.metrics import extract, metric, metrics_for_kind
from secperf.workloads.parts.delivery import (
    FloodMatch,
    counter_rules,
    coverage,
    flood_window,
    measured_window,
    require_covered,
)
from secperf.workloads.parts.flood import Measured


def start(mono_s: float) -> dict[str, Any]:
    return {"type": "start", "clock": {"realtime_ns": 1, "monotonic_ns": int(mono_s * 1e9)}}


def test_windows_come_from_the_start_clock_and_the_result_times() -> None:
    flood = flood_window([start(100.0)], {"duration_s": 3.0})
    assert flood == pytest.approx((100.0, 103.0))
    measured = measured_window([start(100.2)], {"warmup_s": 0.5, "duration_s": 1.5})
    assert measured == pytest.approx((100.7, 102.2))
    assert flood_window([], {"duration_s": 3.0}) is None  # no start record: unknown
    assert measured_window([start(1.0)], {"duration_s": 1.0}) is None


def test_coverage_needs_the_flood_on_both_sides_of_the_window() -> None:
    inside = coverage((100.0, 103.0), (100.7, 102.2))
    assert inside["covered"] is True
    assert inside["lead_s"] == pytest.approx(0.7) and inside["tail_s"] == pytest.approx(0.8)
    require_covered(inside, "stream test")  # no error
    late = coverage((101.0, 103.0), (100.7, 102.2))
    early_end = coverage((100.0, 102.0), (100.7, 102.2))
    assert late["covered"] is False and early_end["covered"] is False
    with pytest.raises(EngineError, match=r"started 0\.300 s after the measured window began"):
        require_covered(late, "stream test")
    with pytest.raises(EngineError, match=r"ended 0\.200 s before the measured window ended"):
        require_covered(early_end, "stream test")
    unknown = coverage(None, (100.7, 102.2))
    assert unknown["covered"] is False
    with pytest.raises(EngineError, match="start record"):
        require_covered(unknown, "stream test")


def test_measured_result_is_held_until_covered() -> None:
    kept: list[dict[str, Any]] = []
    m = Measured(kept.append)
    m(start(1.0))
    m({"type": "result", "kind": "stream", "bits_per_second": 1.0})
    assert [k["type"] for k in kept] == ["start"]  # the result waits
    m.release(False, flood={"received_pps": 10.0})
    assert kept[-1]["type"] == "side" and kept[-1]["role"] == "uncovered"
    m({"type": "result", "kind": "stream"})
    m.release(True, flood={"received_pps": 10.0})
    assert kept[-1] == {"type": "result", "kind": "stream", "flood": {"received_pps": 10.0}}


def test_counter_rules_match_each_flood_by_source_protocol_and_port() -> None:
    rules = counter_rules(
        "secperf_t_flood",
        [
            FloodMatch("udp", "198.18.4.2", "10-1023"),
            FloodMatch("tcp", "198.18.4.128/25", "5390"),
            FloodMatch("icmp", "198.18.4.2", None),
        ],
    )
    assert "delete table inet secperf_t_flood" in rules  # loading it again resets it
    assert 'ip saddr 198.18.4.2 udp dport 10-1023 counter name "flood_0"' in rules
    assert 'ip saddr 198.18.4.128/25 tcp dport 5390 counter name "flood_1"' in rules
    assert 'ip saddr 198.18.4.2 icmp type echo-request counter name "flood_2"' in rules
    assert "priority raw" in rules


def test_flood_rows_lead_with_what_reached_the_target() -> None:
    rec = {
        "type": "result",
        "kind": "flood",
        "packets": 10_000,
        "rate_pps": 10_000.0,
        "rate_error_pct": 0.0,
        "delivered": {"received_pps": 2_500.0, "dut_drop_pct": 75.0},
    }
    names = [m.name for m in metrics_for_kind("flood")]
    assert names[:3] == ["flood_received_pps", "flood_pps", "flood_dut_drop_pct"]
    assert [m.name for m in metrics_for_kind("flood") if m.primary] == ["flood_received_pps"]
    values = extract(rec)
    assert values["flood_received_pps"] == 2_500.0 and values["flood_pps"] == 10_000.0
    assert values["flood_dut_drop_pct"] == 75.0
    # an old record without delivered counts gives no delivered figure, never the sent one
    old = {k: v for k, v in rec.items() if k != "delivered"}
    assert "flood_received_pps" not in extract(old)
    # a stream measured beside a flood shows what of the flood reached the target
    stream = {
        "type": "result",
        "kind": "stream",
        "bits_per_second": 1e8,
        "flood": {"received_pps": 900.0, "dut_drop_pct": 10.0},
    }
    got = extract(stream)
    assert got["flood_beside_received_pps"] == 900.0 and got["flood_beside_drop_pct"] == 10.0
    assert not metric("flood_beside_received_pps").primary
    dos = extract(
        {
            "kind": "dos",
            "rate": 1.0,
            "flood": {
                "rate_pps": 20_000.0,
                "delivered": {"received_pps": 0.0, "dut_drop_pct": 100.0},
            },
        }
    )
    assert dos["dos_flood_pps"] == 20_000.0 and dos["dos_flood_received_pps"] == 0.0
    assert dos["dos_flood_drop_pct"] == 100.0
