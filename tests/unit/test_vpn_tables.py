"""Document 003's tables as scenario parameters: a fixed transfer (`bytes`), payload,
link rate and the tunnel's cipher/compression as sweeps, and what the runner does with
them (engine spec, metrics, estimates, the links it reshapes)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from secperf.plan import expanded_variants, path_links
from secperf.results.metrics import extract
from secperf.run.estimate import point_seconds
from secperf.scenario.scenario import Scenario
from secperf.scenario.sweep import expand_scenario
from secperf.testbed.topology import GraphHost, GraphLink, Topology
from secperf.workloads import stream
from secperf.workloads.base import EngineExecutor
from secperf.workloads.parts.flood_beside import Beside


def stream_engine() -> EngineExecutor:
    """The stream kind's engine test (inside its flood-beside wrapper)."""
    beside = stream.KIND.executor
    assert isinstance(beside, Beside) and isinstance(beside.inner, EngineExecutor)
    return beside.inner


def scenario(workload: dict[str, Any], **variants: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "t",
            "variants": variants or {"v": {"mechanisms": []}},
            "workloads": [{"kind": "stream", **workload}],
        }
    )


def test_fixed_transfer_spec_sets_its_own_limit_and_no_warmup() -> None:
    sc = scenario({"bytes": "64MiB", "payload": "text", "duration": "3s", "warmup": "1s"})
    (point,) = expand_scenario(sc)
    assert point.record()["bytes"] == 64 * 2**20
    spec = stream_engine().spec(point.spec, "198.18.2.2:5201")
    assert spec["bytes"] == 64 * 2**20 and spec["payload"] == "text"
    assert spec["duration"] == 300.0 and spec["warmup"] == 0.0  # the limit, not [timing]'s
    sc = scenario({"bytes": "1MiB", "time_limit": "20s"})
    spec = stream_engine().spec(expand_scenario(sc)[0].spec, "198.18.2.2:5201")
    assert spec["duration"] == 20.0
    # a timed stream is as before: no bytes key, duration from the workload
    timed = stream_engine().spec(
        expand_scenario(scenario({"duration": "3s"}))[0].spec, "198.18.2.2:5201"
    )
    assert "bytes" not in timed and timed["duration"] == 3.0


@pytest.mark.parametrize(
    ("workload", "needle"),
    [
        ({"bytes": "1MiB", "protocol": "udp"}, "TCP only"),
        ({"bytes": "1MiB", "direction": "both"}, "one way"),
        ({"bytes": "1MiB", "parallel": 2}, "one connection"),
        ({"bytes": 0}, "transfer size"),
        ({"payload": "lorem"}, '"random", "zeros" or "text"'),
        ({"link_rate": ["10mbit", "10mbit"]}, "repeats"),
    ],
)
def test_bad_fixed_transfer_or_sweep_is_refused(workload: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        scenario(workload)


def test_payload_and_link_rate_sweep_into_labelled_points() -> None:
    sc = scenario(
        {"payload": ["random", "text"], "link_rate": ["100mbit", "10mbit", "33.6kbit"]},
    )
    points = expand_scenario(sc)
    assert len(points) == 6
    labels = [p.label for p in points]
    assert labels[0] == "payload=random link_rate=100mbit"
    assert labels[-1] == "payload=text link_rate=33.6kbit"
    assert points[-1].record()["link_rate"] == 33_600
    unl = expand_scenario(scenario({"link_rate": ["unlimited", "10mbit"]}))
    assert unl[0].record()["link_rate"] == 0 and unl[0].label == "link_rate=unlimited"
    # unset stays unset (the links as built) and survives a JSON round trip
    plain = scenario({})
    assert expand_scenario(plain)[0].record()["link_rate"] is None
    again = Scenario.model_validate(plain.to_json_dict())
    assert expand_scenario(again)[0].record()["link_rate"] is None


def test_vpn_cipher_and_compression_sweep_into_variants() -> None:
    sc = scenario(
        {},
        ovpn={
            "mechanisms": [
                {
                    "kind": "vpn",
                    "implementation": "openvpn",
                    "cipher": ["none", "aes-128-gcm", "aes-256-gcm"],
                    "compression": ["none", "lz4"],
                }
            ]
        },
        ipsec={"mechanisms": [{"kind": "vpn", "implementation": "ipsec", "cipher": ["none"]}]},
    )
    names = [n for n, _m, _s in expanded_variants(sc)]
    assert "ovpn[cipher=none compression=none]" in names
    assert "ovpn[cipher=aes-256-gcm compression=lz4]" in names
    assert len(names) == 7
    for _name, mechs, swept in expanded_variants(sc):
        params = mechs[0].implementation_params()
        assert params["cipher"] == swept["cipher"]
    # every point of a sweep is checked against the implementation
    with pytest.raises(ValidationError, match="ipsec has no compression"):
        scenario({}, v={"mechanisms": [{"kind": "vpn", "implementation": "ipsec",
                                         "compression": ["none", "lz4"]}]})  # fmt: skip
    with pytest.raises(ValidationError, match="vtun cipher 'blowfish' is refused"):
        scenario({}, v={"mechanisms": [{"kind": "vpn", "implementation": "vtun",
                                         "cipher": ["none", "blowfish"]}]})  # fmt: skip


def test_transfer_metrics_only_for_a_fixed_transfer() -> None:
    rec = {
        "type": "result",
        "kind": "stream",
        "bits_per_second": 8e7,
        "bytes": 67108864,
        "transfer": {"bytes": 67108864, "seconds": 6.4, "kib_per_second": 10240.0},
    }
    got = extract(rec)
    assert got["transfer_kib_s"] == 10240.0 and got["transfer_s"] == 6.4
    del rec["transfer"]
    got = extract(rec)
    assert "transfer_kib_s" not in got and "transfer_s" not in got


def test_estimate_of_a_fixed_transfer_uses_the_link_rate() -> None:
    sc = scenario({"bytes": "12500000B", "link_rate": ["100mbit", "10mbit"]})
    fast, slow = expand_scenario(sc)
    assert point_seconds(fast, 1, 1) == pytest.approx(1.0 + 0.3)
    assert point_seconds(slow, 1, 1) == pytest.approx(10.0 + 0.3)
    (plain,) = expand_scenario(scenario({"bytes": "12500000B", "time_limit": "5s"}))
    assert point_seconds(plain, 1, 1, 100_000_000) == pytest.approx(1.3)
    assert point_seconds(plain, 1, 1, 1_000_000) == pytest.approx(5.3)  # the limit


def test_path_links_cross_routers_and_switches() -> None:
    std = Topology.standard()
    assert [lk.name for lk in path_links(std, "client", "server")] == ["client-dut", "dut-server"]
    topo = Topology.graph(
        [
            GraphHost("c1", "client", "inside"),
            GraphHost("sw", "switch", "inside"),
            GraphHost("r", "dut"),
            GraphHost("s1", "server", "outside"),
        ],
        [GraphLink("c1", "sw"), GraphLink("sw", "r"), GraphLink("r", "s1")],
    )
    names = [set(lk.ends()) for lk in path_links(topo, "c1", "s1")]
    assert names == [{"c1", "sw"}, {"sw", "r"}, {"r", "s1"}]


def test_a_workload_measures_only_the_variants_it_names() -> None:
    sc = Scenario.model_validate(
        {
            "name": "t",
            "variants": {
                "a": {"mechanisms": []},
                "ovpn": {
                    "mechanisms": [
                        {"kind": "vpn", "implementation": "openvpn",
                         "cipher": ["none", "aes-128-gcm"]}
                    ]
                },
            },
            "workloads": [
                {"kind": "stream", "name": "all", "duration": "1s", "warmup": 0},
                {"kind": "stream", "name": "some", "duration": "1s", "warmup": 0,
                 "variants": ["ovpn"]},
            ],
        }
    )  # fmt: skip
    every, some = expand_scenario(sc)
    names = [n for n, _m, _s in expanded_variants(sc)]
    assert [n for n in names if every.measures(n)] == names
    assert [n for n in names if some.measures(n)] == [
        "ovpn[cipher=none]",
        "ovpn[cipher=aes-128-gcm]",
    ]
    from secperf.mechanisms.vpn.tunnel import KIND as VPN
    from secperf.run.estimate import TESTBED_S, estimate_seconds

    # 4 tests of "all" and 3 of "some", 3 rounds, the traced one and the attribution
    # round's two (profiled, counted), 1.3 s each; each round loads both tunnels at
    # either point (the baseline and "a" load none), and the testbed is built once
    lo, _hi = estimate_seconds(sc)
    rounds = 3 + 1 + 2
    assert lo == pytest.approx(TESTBED_S + rounds * ((4 + 3) * 1.3 + 2 * 2 * VPN.apply_s))
    with pytest.raises(ValidationError, match="does not have"):
        Scenario.model_validate(
            {
                "name": "t",
                "variants": {"a": {"mechanisms": []}},
                "workloads": [{"kind": "stream", "variants": ["b"]}],
            }
        )


def _one_value_scenario(rows: list[dict[str, object]], chosen: list[str]) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "t",
            "variants": {
                "ovpn": {
                    "mechanisms": [
                        {"kind": "vpn", "implementation": "openvpn",
                         "cipher": ["none", "aes-128-gcm", "aes-256-gcm"]}
                    ]
                },
            },
            "workloads": [
                {"kind": "stream", "name": "keys", "duration": "1s", "warmup": 0,
                 "variants": chosen},
            ],
            "paper": rows,
            "paper_table": [{"figure": "Table 1", "tolerance": "5pp", "reason": "test"}],
        }
    )  # fmt: skip


def test_a_workload_may_measure_one_value_of_a_sweep() -> None:
    sc = _one_value_scenario([], ["ovpn[cipher=aes-128-gcm]", "ovpn[cipher=aes-256-gcm]"])
    (keys,) = expand_scenario(sc)
    names = [n for n, _m, _s in expanded_variants(sc)]
    assert [n for n in names if keys.measures(n)] == [
        "ovpn[cipher=aes-128-gcm]",
        "ovpn[cipher=aes-256-gcm]",
    ]
    with pytest.raises(ValidationError, match=r"ovpn\[cipher=bf-cbc\], which \[variants\]"):
        _one_value_scenario([], ["ovpn[cipher=bf-cbc]"])


def test_a_paper_row_may_not_name_a_variant_its_workload_skips() -> None:
    row = {
        "figure": "Table 1",
        "row": "key length",
        "variant": "ovpn[cipher=aes-256-gcm]",
        "against": "ovpn[cipher=none]",
        "workload": "keys",
        "metric": "throughput",
        "change": "-0.065%",
    }
    chosen = ["ovpn[cipher=aes-128-gcm]", "ovpn[cipher=aes-256-gcm]"]
    with pytest.raises(ValidationError, match=r"paper\[0\] names 'ovpn\[cipher=none\]' at"):
        _one_value_scenario([row], chosen)
    assert _one_value_scenario([{**row, "against": "ovpn[cipher=aes-128-gcm]"}], chosen)
    # a row that names the family reads the values the workload measures
    assert _one_value_scenario([{**row, "variant": "ovpn", "against": None}], chosen)


def test_tunnel_memory_is_a_metric_of_its_mechanism_record() -> None:
    rec = {
        "type": "mechanism",
        "kind": "vpn",
        "hosts": ["client", "server"],
        "memory_bytes": {"client": 8 * 2**20, "server": 12 * 2**20},
        "device_bytes": {"client": 1, "server": 1},
    }
    assert extract(rec) == {"tunnel_rss_client_mib": 8.0, "tunnel_rss_server_mib": 12.0}
    # a daemon that was not running at the end reports nothing, never 0
    rec["memory_bytes"] = {"server": 12 * 2**20}
    assert extract(rec) == {"tunnel_rss_server_mib": 12.0}


def test_tunnel_cpu_per_kb_is_a_metric_of_its_mechanism_record() -> None:
    """Each end's daemon CPU over the test per kB (1000 B) through its own device."""
    rec = {
        "type": "mechanism",
        "kind": "vpn",
        "hosts": ["gw-a", "gw-b"],
        "device_bytes": {"gw-a": 2_000_000, "gw-b": 4_000_000},
        "cpu_seconds": {"gw-a": 0.03, "gw-b": 0.02},
    }
    got = extract(rec)
    assert got["tunnel_cpu_client_us_per_kb"] == pytest.approx(15.0)
    assert got["tunnel_cpu_server_us_per_kb"] == pytest.approx(5.0)
    # an end whose daemon was not read, or whose device moved nothing, has no figure
    rec["cpu_seconds"] = {"gw-b": 0.02}
    rec["device_bytes"] = {"gw-a": 2_000_000, "gw-b": 0}
    assert not any(k.startswith("tunnel_cpu") for k in extract(rec))


def test_the_estimate_takes_the_slowest_link_of_a_topology() -> None:
    from secperf.run.estimate import slowest_link

    sc = Scenario.model_validate(
        {
            "name": "t",
            "testbed": {"link_rate": "100mbit"},
            "topology": {
                "hosts": [
                    {"name": "client", "role": "client", "zone": "inside"},
                    {"name": "dut", "role": "dut"},
                    {"name": "server", "role": "server", "zone": "outside"},
                ],
                "links": [
                    {"between": ["client", "dut"], "rate": "33.6kbit"},
                    {"between": ["dut", "server"]},
                ],
            },
            "variants": {"v": {"mechanisms": []}},
            "workloads": [{"kind": "stream", "bytes": "33600B"}],
        }
    )
    assert slowest_link(sc) == 33_600
    (point,) = expand_scenario(sc)
    assert point_seconds(point, 1, 1, slowest_link(sc)) == pytest.approx(8.0 + 0.3)


class _FlakyVpn:
    """Fails its first `fails` starts, as vtund did once on a loaded machine."""

    def __init__(self, fails: int) -> None:
        self.fails, self.starts = fails, 0

    def render(self, *args: Any) -> list[Any]:
        return []

    def host_files(self) -> list[Any]:
        return []

    def start(self, a: Any, b: Any) -> None:
        from secperf.errors import MechanismError

        self.starts += 1
        if self.starts <= self.fails:
            raise MechanismError(f"vtund on client exited (start {self.starts})")

    def devices(self) -> dict[str, str]:
        return {}

    def pids(self) -> dict[str, list[int]]:
        return {}

    def describe(self) -> dict[str, Any]:
        return {"implementation": "fake"}


@pytest.mark.parametrize("fails", [0, 1, 2])
def test_a_tunnel_gets_one_more_start_and_says_so(
    fails: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from secperf.errors import MechanismError
    from secperf.mechanisms.base import MechanismContext
    from secperf.mechanisms.vpn import Tunnel, VpnSpec

    tunnel = Tunnel(VpnSpec.model_validate({"kind": "vpn", "implementation": "vtun"}))
    fake = _FlakyVpn(fails)
    tunnel.vpn = fake  # type: ignore[assignment]
    monkeypatch.setattr(tunnel, "_tunnel_ends", lambda hosts, ctx: ("a", "b"))
    ctx = MechanismContext.__new__(MechanismContext)
    object.__setattr__(ctx, "table", "secperf_sp1a2b3")
    object.__setattr__(ctx, "files_dir", tmp_path)
    object.__setattr__(ctx, "name", "v.0")
    if fails < 2:
        tunnel.apply_group([], ctx)
        assert fake.starts == fails + 1
        assert tunnel.observe()["start_attempts"] == fails + 1
    else:
        with pytest.raises(MechanismError, match="the first start failed too"):
            tunnel.apply_group([], ctx)
        assert fake.starts == 2
