"""The scenario models: defaults, sweeps, names, limits and the JSON round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from secperf.mechanisms.acl import AclSpec
from secperf.mechanisms.custom import CustomSpec
from secperf.scenario.scenario import (
    Scenario,
)
from secperf.scenario.sweep import expand
from secperf.workloads.base import engine_spec
from secperf.workloads.crr import CrrWorkload
from secperf.workloads.rr import RrWorkload
from secperf.workloads.stream import StreamWorkload


def minimal(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "t",
        "variants": {"acl": {"mechanisms": [{"kind": "acl", "rules": 10}]}},
        "workloads": [{"kind": "rr"}],
    }
    data.update(extra)
    return data


def errors(data: dict[str, Any]) -> list[dict[str, Any]]:
    with pytest.raises(ValidationError) as info:
        Scenario.model_validate(data)
    return [dict(e) for e in info.value.errors()]


def test_defaults() -> None:
    sc = Scenario.model_validate(minimal())
    assert sc.testbed.link_rate is None and sc.testbed.rate_bps is None
    assert (sc.testbed.baseline, sc.testbed.family) == ("forward", "ipv4")
    assert (sc.repeat.min, sc.repeat.max, sc.repeat.confidence) == (3, 50, 0.95)
    assert sc.repeat.halfwidth_pct == 2.0
    acl = sc.variants["acl"].mechanisms[0]
    assert isinstance(acl, AclSpec)
    assert (acl.layout, acl.entries, acl.match, acl.backend, acl.stateful) == (
        "linear",
        "extended",
        "last",
        "nft",
        False,
    )
    rr = sc.workloads[0]
    assert isinstance(rr, RrWorkload)
    assert (rr.name, rr.request, rr.response, rr.inflight) == ("tcp-rr", 1, 1, 1)
    assert (rr.duration, rr.warmup) == (5.0, 1.0)


def test_offloads_default_on_and_off_reaches_the_topology_and_preflight() -> None:
    from secperf.plan import topology_for
    from secperf.run.preflight import tools_for

    on = Scenario.model_validate(minimal())
    assert on.testbed.offloads == "on"
    assert topology_for(on, []).offloads == "on"
    assert "ethtool" not in {t.program for t in tools_for(on)}
    off = Scenario.model_validate(minimal(testbed={"offloads": "off"}))
    assert topology_for(off, []).offloads == "off"
    assert "ethtool" in {t.program for t in tools_for(off)}


def test_per_packet_scenarios_turn_offloads_off() -> None:
    from secperf.scenario.loader import load_scenario

    root = Path(__file__).resolve().parents[2] / "scenarios"
    for name in ("seed002-flood-tolerance", "seed004-router-delay", "seed004-rule-sweep"):
        assert load_scenario(root / f"{name}.toml").testbed.offloads == "off", name


def test_workload_timing_comes_from_timing_table_unless_given() -> None:
    sc = Scenario.model_validate(
        minimal(
            timing={"duration": "30s", "warmup": "2s"},
            workloads=[{"kind": "rr"}, {"kind": "rr", "name": "short", "duration": "500ms"}],
        )
    )
    assert (sc.workloads[0].duration, sc.workloads[0].warmup) == (30.0, 2.0)
    assert (sc.workloads[1].duration, sc.workloads[1].warmup) == (0.5, 2.0)


def test_link_rate_parses_to_bits_per_second() -> None:
    sc = Scenario.model_validate(minimal(testbed={"link_rate": "33.6kbit"}))
    assert sc.testbed.rate_bps == 33600


def test_stream_defaults_depend_on_protocol() -> None:
    sc = Scenario.model_validate(
        minimal(workloads=[{"kind": "stream"}, {"kind": "stream", "protocol": "udp"}])
    )
    tcp, udp = sc.workloads
    assert isinstance(tcp, StreamWorkload) and isinstance(udp, StreamWorkload)
    assert (tcp.name, tcp.message, tcp.direction, tcp.payload) == (
        "tcp-stream",
        131072,
        "send",
        "random",
    )
    assert (udp.name, udp.message) == ("udp-stream", 1024)
    assert tcp.socket_buffer is None and tcp.rate is None and tcp.rcvlowat is None


def test_stream_rcvlowat_reaches_the_engine_spec_only_when_given() -> None:
    sc = Scenario.model_validate(
        minimal(workloads=[{"kind": "stream"}, {"kind": "stream", "rcvlowat": "1B"}])
    )
    default, given = (engine_spec(w) for w in sc.workloads)
    assert "rcvlowat" not in default
    assert given["rcvlowat"] == 1


def test_busy_poll_reaches_crr_and_http_engine_specs_only_when_given() -> None:
    sc = Scenario.model_validate(
        minimal(
            workloads=[
                {"kind": "crr"},
                {"kind": "crr", "busy_poll_us": 50},
                {"kind": "http", "busy_poll_us": 20},
            ]
        )
    )
    default, crr, http = (engine_spec(w) for w in sc.workloads)
    assert "busy_poll_us" not in default
    assert crr["busy_poll_us"] == 50 and http["busy_poll_us"] == 20
    bad = errors(minimal(workloads=[{"kind": "crr", "busy_poll_us": 20_000}]))
    assert any(e["loc"][-1] == "busy_poll_us" for e in bad), bad
    stream = errors(minimal(workloads=[{"kind": "stream", "busy_poll_us": 50}]))
    assert any("busy_poll_us" in str(e["loc"]) for e in stream), stream


def test_engine_spec_is_the_models_engine_fields_under_the_engines_names() -> None:
    sc = Scenario.model_validate(
        minimal(
            workloads=[
                {"kind": "stream", "message": ["4KiB", "8KiB"], "rate": "10mbit"},
                {"kind": "rr", "request": 32, "response": "1KiB"},
            ]
        )
    )
    first = expand(sc.workloads[0])[0]
    spec = engine_spec(first.spec, server="198.18.2.2:5201")
    assert spec == {
        "kind": "stream",
        "protocol": "tcp",
        "direction": "send",
        "message": 4096,
        "parallel": 1,
        "payload": "random",
        "rate_bps": 10_000_000,
        "duration": 5.0,
        "warmup": 1.0,
        "server": "198.18.2.2:5201",
    }
    rr = engine_spec(sc.workloads[1])
    assert (rr["request"], rr["response"]) == (32, 1024)
    assert "request_size" not in rr and "name" not in rr and "variants" not in rr
    with pytest.raises(ValueError, match="expand it first"):
        engine_spec(sc.workloads[0])  # a sweep is not one engine test


def test_crr_closes_server_first_by_default_and_reaches_every_connection_workload() -> None:
    sc = Scenario.model_validate(
        minimal(
            workloads=[
                {"kind": "crr"},
                {"kind": "crr", "close": "reset"},
                {"kind": "crr", "close": "fin"},
                {"kind": "conn_rate", "close": "client-first"},
                {"kind": "conn_rate"},
                {"kind": "connections"},
            ]
        )
    )
    crr, reset, fin, rate, rate_default, conns = sc.workloads
    assert engine_spec(crr)["close"] == "server-first"
    assert engine_spec(reset)["close"] == "reset"
    # `fin`, the client's orderly close before the order had names, is client-first
    assert engine_spec(fin)["close"] == "client-first"
    paced = engine_spec(rate, server="198.18.2.2:5201", rate=100.0)  # one conn_rate trial
    assert (paced["kind"], paced["close"], paced["rate"]) == ("crr", "client-first", 100.0)
    assert engine_spec(rate_default, server="198.18.2.2:5201")["close"] == "server-first"
    # connections' close is how the server answers a FIN: no order to give
    assert engine_spec(conns, server="198.18.2.2:5201")["close"] == "fin"
    (e,) = errors(minimal(workloads=[{"kind": "crr", "close": "linger"}]))
    assert e["loc"][-1] == "close" and "server-first" in e["msg"]
    (e,) = errors(minimal(workloads=[{"kind": "connections", "close": "server-first"}]))
    assert e["loc"][-1] == "close"


def test_sweepable_fields_take_lists_of_units() -> None:
    sc = Scenario.model_validate(
        minimal(
            workloads=[
                {
                    "kind": "stream",
                    "message": ["4KB", "16KiB"],
                    "socket_buffer": ["56KiB", "default"],
                    "parallel": [1, 2],
                    "rate": ["10mbit", "unlimited"],
                },
                {"kind": "crr", "parallel": [1, 8], "request": "1KiB"},
            ]
        )
    )
    stream, crr = sc.workloads
    assert isinstance(stream, StreamWorkload) and isinstance(crr, CrrWorkload)
    assert stream.message == [4000, 16384]
    assert stream.socket_buffer == [57344, None]
    assert stream.rate == [10_000_000, None]
    assert crr.parallel == [1, 8] and crr.request == 1024 and crr.name == "tcp-crr"


def test_derived_names_are_made_unique_explicit_duplicates_are_errors() -> None:
    sc = Scenario.model_validate(
        minimal(workloads=[{"kind": "rr"}, {"kind": "rr"}, {"kind": "rr", "name": "tcp-rr-2"}])
    )
    assert [w.name for w in sc.workloads] == ["tcp-rr", "tcp-rr-3", "tcp-rr-2"]
    errs = errors(minimal(workloads=[{"kind": "rr", "name": "a"}, {"kind": "crr", "name": "a"}]))
    assert errs[0]["loc"] == ("workloads",)
    assert "both named 'a'" in errs[0]["msg"]


@pytest.mark.parametrize(
    ("data", "loc", "fragment"),
    [
        (minimal(name="Bad Name"), ("name",), "lowercase"),
        (minimal(repeat={"min": 1}), ("repeat", "min"), "greater than or equal to 2"),
        (minimal(repeat={"min": 5, "max": 3}), ("repeat", "max"), "at least min"),
        (minimal(repeat={"max": 1001}), ("repeat", "max"), "less than or equal to 1000"),
        (minimal(repeat={"confidence": 0.9999}), ("repeat", "confidence"), "0.999"),
        (minimal(repeat={"halfwidth_pct": 0}), ("repeat", "halfwidth_pct"), "greater than 0"),
        (minimal(repeat={"min": "3"}), ("repeat", "min"), "valid integer"),
        (minimal(timing={"duration": "-5s"}), ("timing", "duration"), "negative"),
        (minimal(timing={"duration": 0}), ("timing", "duration"), "at least"),
        (minimal(testbed={"link_rate": "fast"}), ("testbed", "link_rate"), "rate"),
        (minimal(testbed={"baseline": "none"}), ("testbed", "baseline"), "'forward' or 'direct'"),
        (minimal(testbed={"offloads": "auto"}), ("testbed", "offloads"), "'on' or 'off'"),
        (minimal(testbed={"offloads": False}), ("testbed", "offloads"), "'on' or 'off'"),
        (minimal(variants={}), ("variants",), "at least one variant"),
        (minimal(workloads=[]), ("workloads",), "at least one workload"),
        (minimal(variants={"baseline": {}}), ("variants", "baseline", "[key]"), "reserved"),
        (minimal(variants={"Upper": {}}), ("variants", "Upper", "[key]"), "lowercase"),
        (
            minimal(variants={"x": {"mechanisms": [{"kind": "acl", "rules": -1}]}}),
            ("variants", "x", "mechanisms", 0, "acl", "rules"),
            "a rule count must be at least 0",
        ),
        (
            minimal(variants={"x": {"mechanisms": [{"kind": "waf"}]}}),
            ("variants", "x", "mechanisms", 0),
            "'acl', 'custom'",
        ),
        (
            minimal(workloads=[{"kind": "stream", "protocol": "udp", "message": "64KiB"}]),
            ("workloads", 0, "stream", "message"),
            "at most 65507",
        ),
        (
            minimal(workloads=[{"kind": "stream", "protocol": "udp", "rcvlowat": "64KiB"}]),
            ("workloads", 0, "stream", "rcvlowat"),
            "TCP streams only",
        ),
        (
            minimal(workloads=[{"kind": "stream", "rcvlowat": 0}]),
            ("workloads", 0, "stream", "rcvlowat"),
            "at least 1",
        ),
        (
            minimal(workloads=[{"kind": "rr", "request": [1, 1]}]),
            ("workloads", 0, "rr", "request"),
            "repeats a value",
        ),
        (
            minimal(workloads=[{"kind": "rr", "request": []}]),
            ("workloads", 0, "rr", "request"),
            "at least one value",
        ),
        (
            minimal(workloads=[{"kind": "rr", "inflight": [1, 65]}]),
            ("workloads", 0, "rr", "inflight"),
            "item 1: inflight must be at most 64",
        ),
        (
            minimal(workloads=[{"kind": "stream", "parallel": 1.5}]),
            ("workloads", 0, "stream", "parallel"),
            "whole number",
        ),
        (
            minimal(workloads=[{"kind": "rr", "request": [1, 2], "response": [1], "sweep": "zip"}]),
            ("workloads", 0, "rr"),
            "equal length",
        ),
        (
            minimal(
                workloads=[
                    {"kind": "rr", "request": list(range(1, 41)), "response": list(range(1, 41))}
                ]
            ),
            ("workloads", 0, "rr"),
            "1600 points",
        ),
        (minimal(extra=1), ("extra",), "Extra inputs"),
    ],
)
def test_rejects(data: dict[str, Any], loc: tuple[Any, ...], fragment: str) -> None:
    errs = errors(data)
    matching = [e for e in errs if tuple(e["loc"]) == loc]
    assert matching, f"no error at {loc}: {errs}"
    assert fragment in matching[0]["msg"]


def test_zip_sweep_may_repeat_values_in_one_list() -> None:
    sc = Scenario.model_validate(
        minimal(
            workloads=[{"kind": "rr", "request": [32, 32], "response": [256, 512], "sweep": "zip"}]
        )
    )
    assert sc.workloads[0].swept_values() == {"request": [32, 32], "response": [256, 512]}
    errs = errors(
        minimal(workloads=[{"kind": "rr", "request": [32, 32], "response": [1, 1], "sweep": "zip"}])
    )
    assert "same point twice" in errs[0]["msg"]


def test_custom_file_resolves_relative_to_base_dir(tmp_path: Path) -> None:
    (tmp_path / "rules.nft").write_text("table inet t {}\n")
    data = minimal(
        variants={
            "mine": {"mechanisms": [{"kind": "custom", "file": "rules.nft", "format": "nft"}]}
        }
    )
    sc = Scenario.model_validate(data, context={"base_dir": tmp_path})
    custom = sc.variants["mine"].mechanisms[0]
    assert isinstance(custom, CustomSpec)
    assert custom.file == tmp_path / "rules.nft"
    assert custom.backend == "iptables-nft"
    with pytest.raises(ValidationError, match="not found"):
        Scenario.model_validate(data, context={"base_dir": tmp_path / "elsewhere"})
    # A run directory's copy may outlive the rule file.
    gone = Scenario.from_json_dict(sc.to_json_dict() | {}, check_files=False)
    assert gone.variants["mine"].mechanisms[0] == custom


def test_json_round_trip_and_source_not_dumped() -> None:
    sc = Scenario.model_validate(
        minimal(
            testbed={"link_rate": "100mbit"},
            workloads=[{"kind": "stream", "message": ["1KiB", "4KiB"], "duration": "2s"}],
        )
    )
    sc.source = Path("/tmp/x.toml")
    data = sc.to_json_dict()
    assert "source" not in data
    assert data["testbed"]["link_rate"] == 100_000_000
    assert data["workloads"][0]["message"] == [1024, 4096]
    assert data["workloads"][0]["duration"] == 2.0
    again = Scenario.from_json_dict(data)
    assert again.to_json_dict() == data


def test_a_rule_count_list_expands_a_variant_into_one_per_value() -> None:
    from secperf.scenario.scenario import Variant

    v = Variant.model_validate(
        {"mechanisms": [{"kind": "acl", "rules": [1, 100, 10000], "layout": "set"}]}
    )
    expanded = v.expand("acl-set")
    assert [name for name, _, _ in expanded] == [
        "acl-set[rules=1]",
        "acl-set[rules=100]",
        "acl-set[rules=10000]",
    ]
    assert [m[0].rules for _, m, _ in expanded] == [1, 100, 10000]
    assert all(m[0].layout == "set" for _, m, _ in expanded)
    assert expanded[1][2] == {"rules": 100}
    # a plain variant is itself
    plain = Variant.model_validate({"mechanisms": [{"kind": "acl", "rules": 5}]})
    assert plain.expand("acl") == [("acl", plain.mechanisms, {})]
    with pytest.raises(ValueError, match="repeats a value"):
        Variant.model_validate({"mechanisms": [{"kind": "acl", "rules": [1, 1]}]})
