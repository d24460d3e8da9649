"""Regenerate the synthetic run directory used by the unit tests.

    python tests/data/runs/generate.py

Values are chosen so the expected statistics are easy to check by hand:
tcp-rr baseline tps 100, 102, 98, 100, 100; acl-linear 75, 76, 74, 75 (its
rep 4 failed: an engine error record), about 25 % worse; acl-set within 1 %
of the baseline (not significant). tcp-stream sweeps `message` over two
points; acl-set's 128 KiB point scatters and misses its CI target.

Every test has interval records, as the engine writes them (one a second, the
first the warm-up): its rate, ramping up during the warm-up, then steady.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RUN = HERE / "20261122T010203Z-quick"

SCENARIO_TEXT = """name = "quick"
description = "What a 1000-rule ACL costs, linear chain vs set <synthetic>"

[testbed]
baseline = "forward"

[repeat]
min = 3
max = 5
confidence = 0.95
halfwidth_pct = 2.0

[variants.acl-linear]
mechanisms = [{ kind = "acl", rules = 1000, layout = "linear" }]

[variants.acl-set]
mechanisms = [{ kind = "acl", rules = 1000, layout = "set" }]

[[workloads]]
name = "tcp-rr"
kind = "rr"
duration = "5s"

[[workloads]]
name = "tcp-stream"
kind = "stream"
message = [16384, 131072]
duration = "5s"
"""

SCENARIO = {
    "name": "quick",
    "description": "What a 1000-rule ACL costs, linear chain vs set <synthetic>",
    "testbed": {"baseline": "forward", "link_rate": "unlimited"},
    "repeat": {"min": 3, "max": 5, "confidence": 0.95, "halfwidth_pct": 2.0},
    "variants": {
        "acl-linear": {"mechanisms": [{"kind": "acl", "rules": 1000, "layout": "linear"}]},
        "acl-set": {"mechanisms": [{"kind": "acl", "rules": 1000, "layout": "set"}]},
    },
    "workloads": [
        {"name": "tcp-rr", "kind": "rr", "protocol": "tcp", "request": 1, "response": 1},
        {"name": "tcp-stream", "kind": "stream", "protocol": "tcp", "message": [16384, 131072]},
    ],
}

DURATION = 5.0

# point_id -> variant -> per-rep primary value (None = that rep failed)
RR: dict[str, list[float | None]] = {
    "baseline": [100.0, 102.0, 98.0, 100.0, 100.0],
    "acl-linear": [75.0, 76.0, 74.0, 75.0, None],
    "acl-set": [99.0, 103.0, 98.0, 101.0, 99.0],
}
STREAM: dict[str, dict[str, list[float]]] = {  # Mbit/s
    "tcp-stream#0": {
        "baseline": [8000.0, 8040.0, 7960.0],
        "acl-linear": [6000.0, 6030.0, 5970.0],
        "acl-set": [8010.0, 8020.0, 7990.0],
    },
    "tcp-stream#1": {
        "baseline": [12000.0, 12100.0, 11900.0, 12000.0, 12000.0],
        "acl-linear": [9000.0, 9100.0, 8900.0, 9000.0, 9000.0],
        "acl-set": [8000.0, 12500.0, 10000.0, 13000.0, 9000.0],
    },
}


def rr_result(tps: float) -> dict[str, Any]:
    lat = 1e6 / tps
    tx = round(tps * DURATION)
    return {
        "type": "result",
        "t": 6.01,
        "kind": "rr",
        "protocol": "tcp",
        "duration_s": DURATION,
        "warmup_s": 1.0,
        "bytes": tx,
        "bits_per_second": tx * 8 / DURATION,
        "messages": tx,
        "sender": {"bytes": tx, "messages": tx},
        "receiver": {"bytes": tx, "messages": tx},
        "loss": None,
        "retransmits": 0,
        "transactions": tx,
        "transactions_per_second": tps,
        "latency_us": {
            "count": tx,
            "min": lat * 0.5,
            "mean": lat,
            "stddev": lat * 0.1,
            "p50": lat,
            "p90": lat * 1.2,
            "p99": lat * 1.5,
            "p999": lat * 2,
            "max": lat * 3,
        },
        "cpu": {
            "client": {"user_s": 0.5, "system_s": 2.0},
            "server": {"user_s": 0.4, "system_s": 1.9},
        },
        # one CPU fully busy: service demand = 1e6 / tps µs per transaction
        "machine_cpu": {"busy_s": DURATION, "total_s": 2 * DURATION, "cpus": 2},
        "totals": {
            "client": {"bytes": tx, "messages": tx, "transactions": tx, "connections": 1},
            "server": {"bytes": tx, "messages": tx, "transactions": tx, "connections": 1},
        },
        "time_wait_avoidance": None,
        "socket": {"sndbuf": 212992, "rcvbuf": 131072},
    }


def stream_result(mbit: float, message: int) -> dict[str, Any]:
    bps = mbit * 1e6
    nbytes = round(bps * DURATION / 8)
    return {
        "type": "result",
        "t": 6.02,
        "kind": "stream",
        "protocol": "tcp",
        "duration_s": DURATION,
        "warmup_s": 1.0,
        "bytes": nbytes,
        "bits_per_second": bps,
        "messages": nbytes // message,
        "sender": {"bytes": nbytes, "messages": nbytes // message},
        "receiver": {"bytes": nbytes, "messages": nbytes // message},
        "loss": None,
        "retransmits": 3,
        "transactions": 0,
        "transactions_per_second": 0.0,
        "latency_us": {
            "count": 0,
            "min": 0,
            "mean": 0,
            "stddev": 0,
            "p50": 0,
            "p90": 0,
            "p99": 0,
            "p999": 0,
            "max": 0,
        },
        "cpu": {
            "client": {"user_s": 0.1, "system_s": 3.0},
            "server": {"user_s": 0.1, "system_s": 3.5},
        },
        "machine_cpu": {"busy_s": 8.0, "total_s": 2 * DURATION, "cpus": 2},
        "totals": {
            "client": {"bytes": nbytes, "messages": 1, "transactions": 0, "connections": 1},
            "server": {"bytes": nbytes, "messages": 1, "transactions": 0, "connections": 1},
        },
        "time_wait_avoidance": None,
        "socket": {"sndbuf": 212992, "rcvbuf": 131072},
    }


def start(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "start",
        "t": 0.0,
        "format": 1,
        "engine": "secperf-engine",
        "version": "0.1.0",
        "spec": {"kind": kind, "server": "198.18.2.2:5201", "warmup": 1.0, **params},
        "clock": {"realtime_ns": 1_795_395_723_000_000_000, "monotonic_ns": 1_000_000_000},
        "host": {"hostname": "synthetic", "kernel": "6.1.0-synthetic", "cpus": 2},
    }


def intervals(rate: float, *, rr: bool) -> list[dict[str, Any]]:
    """One interval record a second: the warm-up second at half the rate, then steady
    (rr: transactions and latency; stream: bits per second, `rate` in Mbit/s)."""
    out = []
    for i in range(int(DURATION) + 1):
        value = rate * (0.5 if i == 0 else 1.0 + 0.01 * ((i % 3) - 1))
        record: dict[str, Any] = {
            "type": "interval",
            "t": i + 1.0,
            "t_start": float(i),
            "t_end": i + 1.0,
            "warmup": i == 0,
        }
        if rr:
            lat = 1e6 / value
            record |= {
                "bytes": round(2 * value),
                "bits_per_second": 16 * value,
                "messages": round(2 * value),
                "transactions": round(value),
                "rate": value,
                "latency_us": {"mean": lat, "p50": lat, "p99": 1.5 * lat},
            }
        else:
            bps = value * 1e6
            record |= {
                "bytes": round(bps / 8),
                "bits_per_second": bps,
                "messages": round(bps / 8 / 16384),
                "transactions": 0,
                "rate": 0.0,
                "latency_us": None,
            }
        out.append(record)
    return out


def lines() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(tags: dict[str, Any], record: dict[str, Any]) -> None:
        out.append({**tags, "seq": len(out) + 1, "record": record})

    rr_point = {"protocol": "tcp", "request": 1, "response": 1, "duration": 5.0, "warmup": 1.0}
    for rep in range(5):
        for variant, values in RR.items():
            tags: dict[str, Any] = {
                "variant": variant,
                "workload": "tcp-rr",
                "point_id": "tcp-rr#0",
                "point": rr_point,
                "label": "request=1 response=1",
                "rep": rep,
            }
            add(tags, start("rr", {"request_size": 1, "response_size": 1}))
            value = values[rep]
            if value is None:
                add(
                    tags,
                    {
                        "type": "error",
                        "t": 0.2,
                        "kind": "connect",
                        "message": "connection refused: is the server running?",
                    },
                )
            else:
                for record in intervals(value, rr=True):
                    add(tags, record)
                add(tags, rr_result(value))
    for i, (point_id, per_variant) in enumerate(STREAM.items()):
        message = [16384, 131072][i]
        point = {"protocol": "tcp", "message": message, "duration": 5.0, "warmup": 1.0}
        for rep in range(len(per_variant["baseline"])):
            for variant, mbits in per_variant.items():
                stags: dict[str, Any] = {
                    "variant": variant,
                    "workload": "tcp-stream",
                    "point_id": point_id,
                    "point": point,
                    "label": f"message={message // 1024}KiB",
                    "rep": rep,
                }
                add(stags, start("stream", {"message_size": message}))
                for record in intervals(mbits[rep], rr=False):
                    add(stags, record)
                add(stags, stream_result(mbits[rep], message))
    return out


def run_json() -> dict[str, Any]:
    return {
        "format": 1,
        "secperf_version": "0.1.0",
        "scenario": SCENARIO,
        "scenario_file": "scenarios/quick.toml",
        "scenario_text": SCENARIO_TEXT,
        "host": {
            "hostname": "synthetic",
            "kernel": "6.1.0-synthetic",
            "cpus": 2,
            "cpu_model": "Synthetic CPU @ 2.0GHz",
        },
        "prefix": "sp0test",
        "started": "2026-11-22T01:02:03Z",
        "finished": "2026-11-22T01:12:03Z",
        "status": "complete",
        "notes": ["generator, server and DUT share this machine's CPUs"],
        "stops": [
            {"point_id": "tcp-rr#0", "reason": "max_reached", "reps": 5},
            {"point_id": "tcp-stream#0", "reason": "ci_met", "reps": 3},
            {"point_id": "tcp-stream#1", "reason": "max_reached", "reps": 5},
        ],
    }


def write(target: Path = RUN) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    (target / "files").mkdir(exist_ok=True)
    (target / "run.json").write_text(json.dumps(run_json(), indent=2) + "\n")
    with (target / "records.jsonl").open("w") as f:
        for line in lines():
            f.write(json.dumps(line) + "\n")
    return target


if __name__ == "__main__":
    print(write(Path(sys.argv[1]) if len(sys.argv) > 1 else RUN))
