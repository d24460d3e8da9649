"""The metric table: which numbers each engine record yields, and their direction."""

from __future__ import annotations

from typing import Any

import pytest

from secperf.results.metrics import METRICS, extract, metric, metrics_for_kind


def stream_record(protocol: str = "tcp", **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": "result",
        "kind": "stream",
        "protocol": protocol,
        "bytes": 1000 * 1000,  # 1000 kB (1 kB = 1000 B)
        "bits_per_second": 9.5e9,
        "loss": None if protocol == "tcp" else {"lost": 5, "ratio": 0.025},
        "machine_cpu": {"busy_s": 2.0, "total_s": 20.0, "cpus": 2},
        "latency_us": {"count": 0, "mean": 0, "p99": 0},
    }
    record.update(extra)
    return record


def rr_record(kind: str = "rr") -> dict[str, Any]:
    return {
        "type": "result",
        "kind": kind,
        "protocol": "tcp",
        "bytes": 40000,
        "transactions": 20000,
        "transactions_per_second": 4000.0,
        "latency_us": {"count": 20000, "mean": 48.5, "p50": 45, "p99": 120.0},
        "machine_cpu": {"busy_s": 3.0, "total_s": 10.0, "cpus": 2},
    }


def test_stream_tcp_yields_throughput_and_service_demand_not_loss() -> None:
    values = extract(stream_record())
    assert values["throughput"] == pytest.approx(9500.0)  # Mbit/s
    # 2 s busy over 1000 KB = 2000 µs per KB
    assert values["sd_cpu_us_per_kb"] == pytest.approx(2000.0)
    assert "loss_pct" not in values  # null loss for TCP: no row, not a 0
    assert "latency_mean_us" not in values


def test_stream_udp_yields_loss_in_percent() -> None:
    assert extract(stream_record("udp"))["loss_pct"] == pytest.approx(2.5)


def test_a_null_loss_ratio_is_no_row_not_zero() -> None:
    # the engine writes ratio null when nothing was sent (latency, rr that tried nothing)
    values = extract(stream_record("udp", loss={"lost": 0, "ratio": None}))
    assert "loss_pct" not in values and values["throughput"] == pytest.approx(9500.0)
    latency = {"type": "result", "kind": "latency", "loss": {"lost": 0, "ratio": None}}
    assert "loss_pct" not in extract(latency)


def test_rr_metrics() -> None:
    values = extract(rr_record())
    assert values == pytest.approx(
        {
            "tps": 4000.0,
            "sd_cpu_us_per_tx": 3.0e6 / 20000,
            "latency_mean_us": 48.5,
            "latency_p99_us": 120.0,
        }
    )


def test_crr_metrics_are_per_connection() -> None:
    values = extract(rr_record("crr"))
    assert values["cps"] == pytest.approx(4000.0)
    assert values["sd_cpu_us_per_conn"] == pytest.approx(150.0)
    assert "tps" not in values


def test_missing_or_zero_denominators_leave_a_metric_out() -> None:
    no_cpu = stream_record()
    del no_cpu["machine_cpu"]
    assert "sd_cpu_us_per_kb" not in extract(no_cpu)
    assert "sd_cpu_us_per_kb" not in extract(stream_record(bytes=0))
    no_samples = rr_record()
    no_samples["latency_us"] = {"count": 0, "mean": 0, "p99": 0}
    assert "latency_mean_us" not in extract(no_samples)


def test_unknown_kind_yields_nothing() -> None:
    assert extract({"type": "result", "kind": "quantum", "bits_per_second": 1.0}) == {}
    assert metrics_for_kind("quantum") == []


def test_directions_and_primaries() -> None:
    for m in METRICS.values():
        if m.name.startswith("sd_") or m.name.startswith("latency") or m.name == "loss_pct":
            assert not m.higher_is_better, m.name
            assert not m.primary, m.name
    assert metric("throughput").higher_is_better and metric("throughput").primary
    assert metric("sd_cpu_us_per_kb").service_demand
    assert metrics_for_kind("rr")[0].name == "tps"
    assert metrics_for_kind("crr")[0].name == "cps"


def test_kb_is_1000_bytes_and_says_so() -> None:
    values = extract(stream_record(bytes=1_000_000))
    assert values["sd_cpu_us_per_kb"] == pytest.approx(2000.0)  # 2 s / 1000 kB
    assert "1000 B" in metric("sd_cpu_us_per_kb").unit


def with_hosts(record: dict[str, Any], **hosts: float) -> dict[str, Any]:
    record = dict(record)
    record["host_cpu"] = hosts
    record["machine_cpu"] = {
        **record["machine_cpu"],
        "softirq_s": 0.5,
        "irq_s": 0.1,
    }
    return record


def test_service_demand_is_the_testbed_hosts_cpu_not_the_machines() -> None:
    # the machine was 3 s busy, but the testbed's hosts used 2 s: other work is not ours
    rec = with_hosts(rr_record(), client=1.2, dut=0.0, server=0.8)
    assert extract(rec)["sd_cpu_us_per_tx"] == pytest.approx(2.0 * 1e6 / 20000)
    # a kernel that keeps softirq out of the processes: the softirq time is added
    irq = extract(rec, irq_time_accounting=True)["sd_cpu_us_per_tx"]
    assert irq == pytest.approx(2.6 * 1e6 / 20000)


def test_stream_service_demand_uses_the_bytes_inside_the_cpu_window() -> None:
    rec = with_hosts(stream_record(bytes=1_000_000, window_bytes=500_000), client=1.0)
    assert extract(rec)["sd_cpu_us_per_kb"] == pytest.approx(1.0 * 1e6 / 500)


def test_cpu_breakdown_by_host_with_reconciliation() -> None:
    from secperf.results.metrics import cpu_breakdown

    rec = with_hosts(rr_record(), client=1.2, dut=0.1, server=0.8)
    b = cpu_breakdown(rec)
    assert b is not None
    assert b.unit == "trans" and b.units == 20000
    assert b.window_s == pytest.approx(5.0)  # 10 s of CPU time over 2 CPUs
    assert b.hosts == {"client": 1.2, "dut": 0.1, "server": 0.8}
    assert b.testbed == pytest.approx(2.1)
    assert b.softirq == pytest.approx(0.6)
    assert b.accounted_pct == pytest.approx(70.0)  # 2.1 of the machine's 3.0 s
    assert cpu_breakdown(rr_record()) is None  # no host_cpu: nothing to break down


def test_a_host_whose_cpu_is_missing_gives_no_service_demand() -> None:
    rec = with_hosts(rr_record(), client=1.2)
    rec["host_cpu"] = {"client": 1.2, "server": None}
    assert "sd_cpu_us_per_tx" not in extract(rec)
