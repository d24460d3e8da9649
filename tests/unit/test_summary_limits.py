"""The summary's bottleneck, comparison, noise, targets and traced round, from a run
directory alone (docs/data-format.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from secperf.report.header import header_lines
from secperf.report.terminal import build_tables
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary


def result(tps: float, client: float, server: float) -> dict[str, Any]:
    """An rr result over a 1 s window: the hosts' CPU seconds as given."""
    return {
        "type": "result",
        "kind": "rr",
        "protocol": "tcp",
        "duration_s": 1.0,
        "warmup_s": 0.5,
        "transactions": tps,
        "transactions_per_second": tps,
        "latency_us": {"count": 10, "mean": 1e6 / tps, "p99": 2e6 / tps},
        "host_cpu": {"client": client, "server": server, "dut": 0.0},
        "machine_cpu": {"busy_s": 1.0, "total_s": 2.0, "cpus": 2, "window_s": 1.0},
    }


def machine(others_pct: float) -> dict[str, Any]:
    return {
        "type": "machine",
        "span_s": 1.6,
        "cpus": [1],
        "source": "cpuidle",
        "busy_s": 1.6,
        "per_cpu_busy_s": {"1": 1.6},
        "testbed_s": 1.6 * (1 - others_pct / 100),
        "hosts": {},
        "ksoftirqd_s": 0.0,
        "secperf_s": 0.0,
        "others_s": 1.6 * others_pct / 100,
        "others_pct": others_pct,
        "accounted_pct": 100 - others_pct,
        "load": [0.3, 0.4],
        "disturbed_pct": 10.0,
        "disturbed": others_pct > 10,
    }


def links(use: float) -> dict[str, Any]:
    d = {"link": "dut-server", "from": "dut", "ifname": "x", "rate_bps": 1e7, "span_s": 1.5}
    return {"type": "links", "directions": [{**d, "utilization": use, "saturated": use >= 0.95}]}


def make(tmp: Path, *, link_use: float | None, rates: dict[str, list[float]]) -> RunDir:
    run = RunDir.create(tmp, "t")
    run.write_run_json(
        {
            "scenario": {
                "name": "t",
                "testbed": {"baseline": "forward"},
                "repeat": {
                    "min": 2,
                    "max": 6,
                    "confidence": 0.95,
                    "halfwidth_pct": 5.0,
                    "degradation_pp": 2.0,
                    "budget": 180.0,
                },
                "variants": {"acl": {"mechanisms": []}},
                "workloads": [{"name": "tcp-rr", "kind": "rr"}],
            },
            "host": {"kernel": "6.1.0-test", "cpus": 2},
            "status": "complete",
            "placement": {
                "mode": "one",
                "testbed_cpus": [1],
                "secperf_cpus": [0],
                "hosts": {},
                "rps": {},
                "meaning": "a rate is the CPU cost of the whole path",
            },
            "forwarding": ["dut"],
            "endpoints": {
                "tcp-rr#0": {"client": "client", "server": "server", "generators": ["client"]}
            },
            "stops": [{"point_id": "tcp-rr#0", "reason": "ci_met", "reps": 3, "order": []}],
        }
    )
    seq = 0
    for rep in range(3):
        for variant, values in rates.items():
            tags = {"variant": variant, "workload": "tcp-rr", "point_id": "tcp-rr#0", "rep": rep}
            busy = 0.6 if link_use is None else 0.2  # % of the one CPU, client and server
            for rec in (
                result(values[rep], busy, busy * 0.6),
                machine(2.0 if rep else 30.0),
                *([links(link_use)] if link_use is not None else []),
            ):
                seq += 1
                run.append_record({**tags, "seq": seq}, rec)
    # the traced round (phase): in no figure but the softirq table
    for variant, net_rx in (("baseline", 0.2), ("acl", 1.0)):
        tags = {"variant": variant, "workload": "tcp-rr", "point_id": "tcp-rr#0", "rep": -1}
        for rec in (
            result(1.0, 0.1, 0.1),  # the slow traced rates: must not reach any mean
            {"type": "softirq", "source": "bpftrace", "net_rx_s": net_rx, "total_s": net_rx},
        ):
            seq += 1
            run.append_record({**tags, "phase": "traced", "seq": seq}, rec)
    return run


def primary(summary: dict[str, Any], variant: str) -> dict[str, Any]:
    return next(r for r in summary["rows"] if r["primary"] and r["variant"] == variant)


def test_one_cpu_rows_name_their_limit_and_the_traced_round_stays_apart(tmp_path: Path) -> None:
    run = make(tmp_path, link_use=None, rates={"baseline": [100, 101, 99], "acl": [50, 51, 49]})
    s = build_summary(run)
    base, acl = primary(s, "baseline"), primary(s, "acl")
    # the traced round's rate of 1/s is in no figure: 3 rounds of ~100 and ~50
    assert base["n"] == 3 and 99 <= base["mean"] <= 101
    assert acl["degradation_target_met"] is True and acl["degradation_halfwidth_pp"] < 2
    assert base["bottleneck"]["kind"] == "one_cpu" and acl["comparison"] is None
    # the kernel's softirq per unit: 0.2 s over 1.5 s of 1 trans/s traffic, vs 1.0 s
    (b, a) = sorted(s["softirq"], key=lambda r: r["variant"] != "baseline")
    assert a["own_us"] > b["per_unit_us"]["net_rx"] > 0
    # the noise: round 0's others at 30 % disturbed, the later rounds quiet
    noise = next(n for n in s["noise"] if n["variant"] == "acl")
    assert noise["disturbed_n"] == 1 and noise["others_pct_max"] == 30.0
    text = "\n".join(header_lines(s, run.read_run_json()))
    assert "placement: one" in text and "2 of 6 tests kept although disturbed" in text
    tables = build_tables(s)
    rr = next(t for t in tables if t.metric == "tps")
    assert "limited by" in rr.columns and rr.rows[0][-2].text == "one CPU"
    assert any(t.metric == "softirq" for t in tables)


def test_a_comparison_both_sides_of_which_a_link_limits_is_flagged(tmp_path: Path) -> None:
    run = make(tmp_path, link_use=0.98, rates={"baseline": [100, 101, 99], "acl": [99, 100, 99]})
    s = build_summary(run)
    base, acl = primary(s, "baseline"), primary(s, "acl")
    assert base["bottleneck"]["kind"] == acl["bottleneck"]["kind"] == "link"
    assert "unshape the link" in acl["comparison"]
    rr = next(t for t in build_tables(s) if t.metric == "tps")
    assert "‼" in rr.rows[0][-2].text
    assert any("unshape the link" in n for n in rr.footnotes)
