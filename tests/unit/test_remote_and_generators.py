"""Remote hosts and several generators without root: the inventory's schema and
checks, the remote ledger's reading, generator placement and the merge of records."""

from __future__ import annotations

from pathlib import Path

import pytest

from secperf.errors import ScenarioError, SecperfError
from secperf.plan.inventory import ssh_specs
from secperf.plan.placement import generator_hosts
from secperf.report.header import header_lines
from secperf.scenario.loader import parse_scenario
from secperf.scenario.sweep import expand_scenario
from secperf.testbed.hosts.remote_teardown import live_entries
from secperf.testbed.topology import Topology
from secperf.workloads.generators import merge_latency, merge_results

BASE = """
name = "lab"
[variants.acl]
mechanisms = [{ kind = "acl", rules = 10 }]
[[workloads]]
kind = "rr"
"""


def inv(name: str, addresses: str, interfaces: str, extra: str = "") -> str:
    return (
        f'[testbed.hosts.{name}]\nbackend = "ssh"\nansible_host = "10.0.0.1"\n'
        f"addresses = {addresses}\ninterfaces = {interfaces}\n{extra}"
    )


GOOD = (
    inv("client", '["198.18.1.2"]', '{ dut = "eth1" }', 'ansible_ssh_private_key_file = "k"\n')
    + inv("dut", '["198.18.1.1", "198.18.2.1"]', '{ client = "eth1", server = "eth2" }')
    + inv("server", '["198.18.2.2"]', '{ dut = "eth1" }')
)


def load(text: str, tmp_path: Path) -> object:
    return parse_scenario(BASE + text, tmp_path / "lab.toml")


def test_inventory_becomes_ssh_destinations_with_paths_next_to_the_scenario(
    tmp_path: Path,
) -> None:
    sc = parse_scenario(BASE + GOOD, tmp_path / "lab.toml")
    specs = ssh_specs(sc, Topology.standard())
    assert set(specs) == {"client", "dut", "server"}
    assert specs["client"].key_file == str(tmp_path / "k")
    assert specs["dut"].key_file is None  # the agent
    assert specs["dut"].interfaces == {"client": "eth1", "server": "eth2"}
    assert specs["server"].destination == "root@10.0.0.1:22"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[testbed.hosts.client]\nbackend = "ssh"\naddresses = ["198.18.1.2"]\n', "ansible_host"),
        (inv("client", '["10.1.2.3"]', "{}"), "outside the testbed ranges"),
        (inv("client", '["198.19.0.5"]', "{}"), "outside the testbed ranges"),
        (inv("client", '["198.18.1.2"]', "{}", 'password = "x"\n'), "password"),
        (inv("client", '["198.18.1.2"]', "{}", 'workdir = "/tmp"\n'), "workdir"),
        ('[testbed.hosts.client]\nbackend = "external"\n', "needs addresses"),
    ],
)
def test_inventory_schema_refuses_what_cannot_work(text: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(SecperfError) as err:
        load(text, tmp_path)
    assert says in str(err.value)


def test_the_target_guard_wants_every_plan_address_declared(tmp_path: Path) -> None:
    text = GOOD.replace('["198.18.2.2"]', '["198.18.2.3"]')
    sc = parse_scenario(BASE + text, tmp_path / "lab.toml")
    with pytest.raises(ScenarioError) as err:
        ssh_specs(sc, Topology.standard())
    assert "198.18.2.2 on host server" in str(err.value)
    assert "declared addresses only" in str(err.value)


def test_every_link_needs_its_interface(tmp_path: Path) -> None:
    text = GOOD.replace('{ client = "eth1", server = "eth2" }', '{ client = "eth1" }')
    sc = parse_scenario(BASE + text, tmp_path / "lab.toml")
    with pytest.raises(ScenarioError, match="link to server and no interface"):
        ssh_specs(sc, Topology.standard())


def test_remote_ledger_live_entries_cancel_removes_and_skip_a_cut_line() -> None:
    lines = [
        '{"op": "run", "prefix": "spabc"}',
        '{"op": "add", "type": "file", "path": "/w/spabc"}',
        '{"op": "add", "type": "process", "pid": 10, "starttime": 5, "label": "a"}',
        '{"op": "add", "type": "process", "pid": 11, "starttime": 6, "label": "b"}',
        '{"op": "remove", "type": "process", "pid": 10, "starttime": 5}',
        '{"op": "add", "type": "pro',  # cut short by a lost connection
    ]
    live = live_entries(lines)
    assert [e.get("pid") or e.get("path") for e in live] == ["/w/spabc", 11]


def test_generators_are_the_first_n_clients_of_the_zone_else_a_clear_error(
    tmp_path: Path,
) -> None:
    topo = Topology.zoned({"inside": (3, 0), "outside": (0, 1)})

    def point(extra: str) -> object:
        text = BASE.replace('kind = "rr"', f'kind = "rr"\n{extra}')
        zones = "[topology.zones.inside]\nclients = 3\n[topology.zones.outside]\nservers = 1\n"
        return expand_scenario(parse_scenario(text + zones, tmp_path / "g.toml"))[0]

    p = point('clients = ["inside"]\nservers = ["outside"]\ngenerators = 2')
    assert generator_hosts(topo, p) == ("inside-c1", "inside-c2")  # type: ignore[arg-type]
    one = point('clients = ["inside"]\nservers = ["outside"]')
    assert generator_hosts(topo, one) == ("inside-c1",)  # type: ignore[arg-type]
    many = point('clients = ["inside"]\nservers = ["outside"]\ngenerators = 4')
    with pytest.raises(ScenarioError, match="has 3 client host"):
        generator_hosts(topo, many)  # type: ignore[arg-type]
    host = point('clients = ["inside-c1"]\nservers = ["outside"]\ngenerators = 2')
    with pytest.raises(ScenarioError, match="one host is one generator"):
        generator_hosts(topo, host)  # type: ignore[arg-type]
    with pytest.raises(SecperfError, match="several generators drive stream, rr, crr only"):
        parse_scenario(
            BASE.replace('kind = "rr"', 'kind = "http"\ngenerators = 2'), tmp_path / "h.toml"
        )


def test_merged_generators_sum_rates_and_pool_latency_exactly() -> None:
    def rr(tps: float, n: int, mean: float, sd: float, lo: float, hi: float) -> dict[str, object]:
        lat = {"count": n, "min": lo, "mean": mean, "stddev": sd, "p50": mean, "p99": hi, "max": hi}
        return {
            "type": "result",
            "kind": "rr",
            "transactions": n,
            "transactions_per_second": tps,
            "bytes": 2 * n,
            "bits_per_second": 16.0 * n,
            "duration_s": 1.0 + n / 1e6,
            "latency_us": lat,
            "loss": None,
            "retransmits": None,
            "cpu": {"client": {"user_s": 0.1, "system_s": 0.2}, "server": {"user_s": 0.3}},
            "host_cpu": {"a": 0.5},
        }

    a, b = rr(1000.0, 1000, 50.0, 5.0, 40.0, 90.0), rr(3000.0, 3000, 30.0, 2.0, 20.0, 60.0)
    starts = [{"clock": {"realtime_ns": 10**18}}, {"clock": {"realtime_ns": 10**18 + 2 * 10**6}}]
    merged = merge_results([("a", a), ("b", b)], starts)
    assert merged["transactions_per_second"] == 4000.0
    assert merged["transactions"] == 4000 and merged["bytes"] == 8000
    assert merged["retransmits"] is None  # not measured is not 0
    assert merged["duration_s"] == pytest.approx(1.003)
    lat = merged["latency_us"]
    assert lat["count"] == 4000 and lat["min"] == 20.0 and lat["max"] == 90.0
    assert lat["mean"] == pytest.approx(35.0)
    # pooled: E[x^2] - mean^2 over all 4000 samples
    ex2 = (1000 * (25 + 2500) + 3000 * (4 + 900)) / 4000
    assert lat["stddev"] == pytest.approx((ex2 - 35.0**2) ** 0.5)
    assert lat["p99"] is None and lat["p50"] is None  # not mergeable from summaries
    assert merged["cpu"]["client"] == {"user_s": pytest.approx(0.2), "system_s": 0.4}
    gen = merged["generators"]
    assert gen["count"] == 2 and gen["hosts"] == ["a", "b"]
    assert gen["start_skew_s"] == pytest.approx(0.002)
    assert [e["transactions_per_second"] for e in gen["each"]] == [1000.0, 3000.0]
    assert merge_latency([{"count": 0}]) == {"count": 0}


def test_udp_stream_loss_is_lost_over_sent_of_all_generators() -> None:
    def stream(sent: int, lost: int) -> dict[str, object]:
        ratio = lost / sent
        return {
            "kind": "stream",
            "bits_per_second": 1e6,
            "sender": {"messages": sent, "bytes": sent * 1000},
            "loss": {"lost": lost, "ratio": ratio},
        }

    merged = merge_results([("a", stream(1000, 10)), ("b", stream(3000, 0))], [])
    assert merged["loss"] == {"lost": 10, "ratio": pytest.approx(10 / 4000)}
    assert merged["sender"] == {"messages": 4000, "bytes": 4_000_000}
    assert merged["generators"]["start_skew_s"] is None  # no start records: not measured


def test_report_header_says_how_many_generators_ran_and_which_hosts_are_remote() -> None:
    meta = {
        "generators": {"udp-stream#0": ["inside-c1", "inside-c2"]},
        "remote_hosts": {"dut": "external", "client": "ssh://root@10.0.0.1:22"},
        "scenario": {"name": "lab"},
    }
    text = "\n".join(header_lines({}, meta))
    assert "udp-stream#0 ran from 2 client hosts at once (inside-c1, inside-c2)" in text
    assert "client (ssh://root@10.0.0.1:22), dut (external)" in text
    assert "share this machine's CPUs" not in text


def test_an_inventory_file_is_shared_with_paths_relative_to_it(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    lab.mkdir()
    hosts = GOOD.replace("[testbed.hosts.", "[hosts.")
    (lab / "inventory.toml").write_text(hosts)
    text = BASE + '[testbed]\ninventory = "lab/inventory.toml"\n'
    sc = parse_scenario(text, tmp_path / "s.toml")
    specs = ssh_specs(sc, Topology.standard())  # type: ignore[arg-type]
    assert specs["client"].key_file == str(lab / "k")  # next to the inventory
    assert specs["server"].interfaces == {"dut": "eth1"}
    # run.json's copy rebuilds without reading the file again
    again = type(sc).from_json_dict(sc.to_json_dict())
    assert set(again.testbed.hosts) == {"client", "dut", "server"}
    dup = BASE + (
        '[testbed]\ninventory = "lab/inventory.toml"\n[testbed.hosts.client]\nbackend = "local"\n'
    )
    with pytest.raises(SecperfError, match="in both"):
        parse_scenario(dup, tmp_path / "s.toml")
    with pytest.raises(SecperfError, match="cannot read"):
        parse_scenario(BASE + '[testbed]\ninventory = "nope.toml"\n', tmp_path / "s.toml")


def test_rules_let_every_generator_of_the_zone_by() -> None:
    from secperf.errors import MechanismError
    from secperf.mechanisms.base import traffic_plan

    topo = Topology.zoned({"inside": (2, 0), "outside": (0, 1)})
    one = traffic_plan(topo, 4, "inside-c1", "outside-s1")
    assert one.client_net.endswith("/32")
    both = traffic_plan(topo, 4, "inside-c1", "outside-s1", generators=["inside-c1", "inside-c2"])
    lan = topo.primary_interface("inside-c1").network
    assert both.client_net == str(lan)
    assert set(both.client_hosts) == {
        topo.primary_address("inside-c1"),
        topo.primary_address("inside-c2"),
    }
    two_zones = Topology.zoned({"a": (1, 0), "b": (1, 0), "c": (0, 1)})
    with pytest.raises(MechanismError, match="not on a-c1's LAN"):
        traffic_plan(two_zones, 4, "a-c1", "c-s1", generators=["a-c1", "b-c1"])
