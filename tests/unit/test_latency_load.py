"""Latency under load (sender = "packet") in the schema and the engine spec, and the
IPS's rule-count sweep."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from secperf.results.metrics import extract
from secperf.scenario.scenario import Scenario
from secperf.workloads.parts.latency import PROBE_EVERY, LatencyWorkload, latency_spec


def scenario(workload: dict[str, Any], **variants: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "t",
            "testbed": {"link_rate": "1gbit", "emulated_hosts": 100},
            "variants": variants or {"v": {"mechanisms": []}},
            "workloads": [{"kind": "latency", **workload}],
        }
    )


def test_packet_sender_reaches_the_engine_spec_at_the_papers_rate() -> None:
    sc = scenario({"load": 0.10, "sender": "packet"})
    w = sc.workloads[0]
    assert isinstance(w, LatencyWorkload)
    spec = latency_spec(w, link_rate_bps=1_000_000_000)
    assert spec["probe_every"] == PROBE_EVERY == 100
    assert spec["rate_pps"] == pytest.approx(148_809.5, abs=1)
    assert spec["frame_size"] == 64 and "frame" not in spec and "load" not in spec
    custom = latency_spec(
        LatencyWorkload.model_validate(
            {"kind": "latency", "rate_pps": 5000, "sender": "packet", "probe_every": 10}
        )
    )
    assert custom["probe_every"] == 10 and custom["rate_pps"] == 5000
    # The socket sender (the default) sends no probe_every: every frame a probe.
    plain = LatencyWorkload.model_validate({"kind": "latency", "rate_pps": 5000})
    assert "probe_every" not in latency_spec(plain)


@pytest.mark.parametrize(
    ("workload", "fragment"),
    [
        ({"probe_every": 10}, 'sender = "packet" only'),
        ({"sender": "packet", "duplex": "half"}, "full duplex"),
        ({"sender": "packet", "probe_every": 0}, "greater than or equal to 1"),
        ({"sender": "raw"}, "'socket' or 'packet'"),
    ],
)
def test_bad_packet_sender_keys_are_refused(workload: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        scenario({"rate_pps": 1000, **workload})
    assert fragment in str(info.value)


def test_ips_rule_count_sweep_expands_into_one_variant_per_count() -> None:
    sc = scenario(
        {"rate_pps": 1000},
        nfq={"mechanisms": [{"kind": "ips", "engine": "nfq", "rules": [10, 1000]}]},
    )
    expanded = sc.variants["nfq"].expand("nfq")
    assert [name for name, _m, _s in expanded] == ["nfq[rules=10]", "nfq[rules=1000]"]
    assert [m[0].rules for _n, m, _s in expanded] == [10, 1000]
    for bad, fragment in (([10, 10], "each count once"), ([10, "x"], "numbers of rules")):
        with pytest.raises(ValidationError) as info:
            scenario({}, v={"mechanisms": [{"kind": "ips", "rules": bad}]})
        assert fragment in str(info.value)


def test_the_achieved_load_is_a_metric_only_when_measured() -> None:
    record = {
        "kind": "latency",
        "latency_us": {"count": 10, "mean": 3.0, "stddev": 1.0, "p99": 9.0},
        "loss": {"lost": 0, "ratio": 0.0},
        "combined": {
            "achieved_pps": 2976.0,
            "load": {
                "asked_pps": 297_620.0,
                "achieved_pps": 90_000.0,
                "received_pps": 89_000.0,
                "ceiling_pps": 600_000.0,
            },
        },
    }
    got = extract(record)
    assert got["load_asked_pps"] == 297_620.0, got
    assert got["load_sent_pps"] == 90_000.0 and got["load_received_pps"] == 89_000.0
    assert got["load_ceiling_pps"] == 600_000.0, got
    # A ceiling that was not measured (null) is no metric, never a 0.
    record["combined"]["load"]["ceiling_pps"] = None  # type: ignore[index]
    assert "load_ceiling_pps" not in extract(record)
    del record["combined"]["load"]  # type: ignore[attr-defined]
    got = extract(record)
    assert not {"load_asked_pps", "load_sent_pps", "load_received_pps", "load_ceiling_pps"} & set(
        got
    )


def test_a_rate_list_sweeps_the_offered_load_one_point_per_rate() -> None:
    from secperf.workloads.base import scalar

    w = scenario({"rate_pps": [20000, 148810], "sender": "packet"}).workloads[0]
    assert isinstance(w, LatencyWorkload)
    assert w.swept_values() == {"rate_pps": [20000.0, 148810.0]}
    one = w.model_copy(update={"rate_pps": 20000.0})
    assert latency_spec(one)["rate_pps"] == 20000.0
    with pytest.raises(ValueError, match="one value"):
        scalar(w.rate_pps)
    for bad, fragment in (
        ([1000, 1000], "repeats a value"),
        ([0.5], "a rate"),
        (["x"], "per second"),
    ):
        with pytest.raises(ValidationError) as info:
            scenario({"rate_pps": bad})
        assert fragment in str(info.value)


def test_an_ids_without_a_sensor_mirrors_and_detects_nothing() -> None:
    from secperf.mechanisms.ids import Ids, IdsSpec

    plain = IdsSpec.model_validate({"kind": "ids"})
    mirror_only = IdsSpec.model_validate({"kind": "ids", "sensor": False})
    assert plain.sensor is True and mirror_only.sensor is False
    assert Ids(plain).detector() is not None
    assert Ids(mirror_only).detector() is None
