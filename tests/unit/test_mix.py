"""The mix workload's record, metrics and scenario keys (no namespaces)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from secperf.errors import ScenarioError
from secperf.results.metrics import extract, metrics_for_kind
from secperf.run.preflight import check_static
from secperf.scenario.loader import load_scenario
from secperf.workloads.mix import MixError, MixWorkload, _per_server, summarize


def test_summary_counts_tpm_failures_and_rates() -> None:
    rows = [
        ["http", None, 1000, 0.0, 1.0],
        ["ftp", None, 3000, 10.0, 30.0],
        ["ftp", "timeout", 0, 20.0, 25.0],
        ["http", "refused", 0, 5.0, 6.0],
    ]
    rec = summarize(rows, 2)
    assert rec["attempted"] == 4 and rec["transactions"] == 2
    assert rec["tpm"] == pytest.approx(2 / 30 * 60)
    assert rec["bits_per_second"] == pytest.approx(4000 * 8 / 30)
    values = extract(rec)
    assert values["mix_failure_pct"] == 50.0
    assert values["mix_failure_timeout_pct"] == 25.0
    assert values["mix_failure_connect_pct"] == 0.0
    assert values["http_fetch_p95_ms"] == pytest.approx(1000.0)
    assert values["ftp_fetch_p95_ms"] == pytest.approx(20000.0)
    assert metrics_for_kind("mix")[0].name == "tpm"


def test_nothing_measured_is_no_number() -> None:
    rec = summarize([], 1)
    assert rec["tpm"] is None and rec["failure_ratio"] is None
    assert extract(rec).get("tpm") is None
    # Every fetch failed: the p95 of a protocol is absent, not 0.
    rec = summarize([["ftp", "connect", 0, 0.0, 1.0]], 1)
    assert extract(rec).get("ftp_fetch_p95_ms") is None
    assert rec["tpm"] == 0


def test_schema_sweeps_virtual_clients_and_checks_shares() -> None:
    w = MixWorkload.model_validate({"kind": "mix", "virtual_clients": [1, 12, 24]})
    assert w.swept_values() == {"virtual_clients": [1, 12, 24]} and w.requests == 100
    assert w.ftp_files == [32768, 65536, 131072, 262144]
    with pytest.raises(ValidationError):
        MixWorkload.model_validate({"kind": "mix", "http_share": [1.5]})
    with pytest.raises(ValidationError, match="virtual clients"):
        MixWorkload.model_validate({"kind": "mix", "virtual_clients": 0})


def test_per_server_values_broadcast_or_match() -> None:
    assert _per_server([0.5], ["a", "b"], "hits", [1, 1]) == [0.5, 0.5]
    assert _per_server([], ["a", "b"], "hits", [1.0, 1.0]) == [1.0, 1.0]
    with pytest.raises(MixError, match="one value per server host"):
        _per_server([1, 2, 3], ["a", "b"], "hits", [])


def test_hit_table_per_zone_or_cross_zone_by_default() -> None:
    from secperf.testbed.topology import GraphHost, GraphLink, Topology
    from secperf.workloads.mix import hit_weights

    hosts = [GraphHost("dut", "dut")]
    links = []
    for zone in ("inside", "dmz"):
        members = [GraphHost(f"{zone}-c1", "client", zone), GraphHost(f"{zone}-s1", "server", zone)]
        hosts += [*members, GraphHost(f"{zone}-sw", "switch", zone)]
        links.append(GraphLink("dut", f"{zone}-sw"))
        links += [GraphLink(f"{zone}-sw", m.name) for m in members]
    topo = Topology.graph(hosts, links)
    servers = ["inside-s1", "dmz-s1"]
    assert hit_weights(topo, "inside-c1", servers, []) == [0.0, 1.0]
    assert hit_weights(topo, "dmz-c1", servers, []) == [1.0, 0.0]
    table = {"inside": [2.4, 23.8], "dmz": [40.0, 5.0]}
    assert hit_weights(topo, "dmz-c1", servers, table) == [40.0, 5.0]
    with pytest.raises(MixError, match="no list for zone 'dmz'"):
        hit_weights(topo, "dmz-c1", servers, {"inside": [1, 1]})


def test_check_refuses_a_hit_table_of_the_wrong_length(tmp_path: Path) -> None:
    """`secperf check` (check_static) names the file, its line and the key."""
    scenarios = Path(__file__).parents[2] / "scenarios"
    text = (scenarios / "seed001-proxy-nstl-quick.toml").read_text()
    (tmp_path / "seed001-packet-filter.nft").write_text(
        (scenarios / "seed001-packet-filter.nft").read_text()
    )
    ok = tmp_path / "ok.toml"
    ok.write_text(text)
    check_static(load_scenario(ok))
    short = tmp_path / "short.toml"
    short.write_text(text.replace("[2.4, 2.4, 23.8, 23.8, 23.8, 23.8]", "[2.4, 2.4, 23.8]"))
    with pytest.raises(ScenarioError) as err:
        check_static(load_scenario(short))
    msg = str(err.value)
    assert "workloads[0].hits.inside" in msg and "3 values" in msg and "6 server" in msg
    assert err.value.where is not None and err.value.where.startswith(f"{short}:")
    nozone = tmp_path / "nozone.toml"
    nozone.write_text(text.replace(", dmz = [40, 40, 5, 5, 5, 5]", ""))
    with pytest.raises(ScenarioError, match="no hit list for zone 'dmz'"):
        check_static(load_scenario(nozone))
