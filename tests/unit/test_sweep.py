"""Sweeps expand into typed points: counts, order, values, records and labels."""

from __future__ import annotations

from typing import Any

from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import expand, expand_scenario
from secperf.workloads.rr import RrWorkload
from secperf.workloads.stream import StreamWorkload


def scenario(*workloads: dict[str, Any]) -> Scenario:
    return Scenario.model_validate(
        {"name": "s", "variants": {"v": {}}, "workloads": list(workloads)}
    )


def test_nothing_swept_is_one_point_with_empty_label() -> None:
    (point,) = expand(scenario({"kind": "rr", "request": 32}).workloads[0])
    assert point.point_id == "tcp-rr#0"
    assert point.label == "" and point.swept == ()
    assert point.kind == "rr" and point.name == "tcp-rr"
    assert isinstance(point.spec, RrWorkload) and point.spec.request == 32
    # what every record of its tests carries as `point` (docs/data-format.md)
    assert point.record() == {
        "duration": 5.0,
        "warmup": 1.0,
        "protocol": "tcp",
        "request": 32,
        "response": 1,
        "inflight": 1,
        "payload": "random",
    }


def test_product_first_list_varies_slowest() -> None:
    sc = scenario(
        {
            "kind": "stream",
            "message": ["4KiB", "1MiB"],
            "socket_buffer": ["56KiB", "32KiB", "default"],
            "rate": "10mbit",
        }
    )
    points = expand(sc.workloads[0], 3)
    assert len(points) == 6
    assert all(isinstance(p.spec, StreamWorkload) for p in points)
    assert [(p.record()["message"], p.record()["socket_buffer"]) for p in points] == [
        (4096, 57344),
        (4096, 32768),
        (4096, None),
        (1048576, 57344),
        (1048576, 32768),
        (1048576, None),
    ]
    assert [p.label for p in points[:3]] == [
        "message=4KiB socket_buffer=56KiB",
        "message=4KiB socket_buffer=32KiB",
        "message=4KiB socket_buffer=default",
    ]
    assert [p.point_id for p in points] == [f"tcp-stream#{i}" for i in range(6)]
    assert all(p.workload_index == 3 and p.swept == ("message", "socket_buffer") for p in points)
    assert all(p.record()["rate"] == 10_000_000 for p in points)
    # the typed point holds the same values as its record; the workload keeps its lists
    streams = [p.spec for p in points if isinstance(p.spec, StreamWorkload)]
    assert [(s.message, s.socket_buffer) for s in streams] == [
        (p.record()["message"], p.record()["socket_buffer"]) for p in points
    ]
    workload = sc.workloads[0]
    assert isinstance(workload, StreamWorkload) and workload.message == [4096, 1048576]


def test_zip_pairs_lists() -> None:
    sc = scenario(
        {
            "kind": "rr",
            "request": [1, 32, 32, 32, 516],
            "response": [1, 256, 512, 1024, 4],
            "sweep": "zip",
        }
    )
    points = expand(sc.workloads[0])
    assert [(p.record()["request"], p.record()["response"]) for p in points] == [
        (1, 1),
        (32, 256),
        (32, 512),
        (32, 1024),
        (516, 4),
    ]
    assert points[3].label == "request=32 response=1KiB"


def test_rate_and_count_labels() -> None:
    sc = scenario({"kind": "stream", "rate": ["33.6kbit", "unlimited"], "parallel": [1, 4]})
    labels = [p.label for p in expand(sc.workloads[0])]
    assert labels == [
        "parallel=1 rate=33.6kbit",
        "parallel=1 rate=unlimited",
        "parallel=4 rate=33.6kbit",
        "parallel=4 rate=unlimited",
    ]


def test_expand_scenario_numbers_workloads_in_file_order() -> None:
    sc = scenario({"kind": "crr", "parallel": [1, 2]}, {"kind": "rr"}, {"kind": "rr"})
    points = expand_scenario(sc)
    assert [(p.workload_index, p.point_id) for p in points] == [
        (0, "tcp-crr#0"),
        (0, "tcp-crr#1"),
        (1, "tcp-rr#0"),
        (2, "tcp-rr-2#0"),
    ]


def test_points_are_scalars() -> None:
    sc = scenario({"kind": "stream", "message": ["1KiB", "2KiB"], "parallel": [1, 2]})
    for point in expand(sc.workloads[0]):
        assert not any(isinstance(v, list) for v in point.record().values())
        assert not any(isinstance(getattr(point.spec, k), list) for k in point.spec.sweepable)


def test_no_flood_no_flood_keys_in_the_record() -> None:
    sc = scenario({"kind": "rr"}, {"kind": "rr", "flood": "udp", "flood_rate": 1000})
    quiet, flooded = expand_scenario(sc)
    assert not {"flood", "flood_rate", "flood_target", "flood_payload"} & set(quiet.record())
    assert flooded.record()["flood"] == "udp" and flooded.record()["flood_rate"] == 1000
