"""secperf review: the scenario it writes from two rule files."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from secperf.errors import ScenarioError
from secperf.review import guess_interfaces, parse_interfaces, review_scenario, rule_format

DATA = Path(__file__).parent.parent / "data" / "rulesets"


def test_the_router_faces_out_of_the_interface_it_masquerades_through() -> None:
    assert guess_interfaces([DATA / "router.nft"]) == {"lan0": "client", "wan0": "server"}


def test_an_iptables_save_file_is_told_from_its_tables(tmp_path: Path) -> None:
    f = tmp_path / "fw.rules"
    f.write_text(
        "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -i eth1 -o eth0 -j ACCEPT\nCOMMIT\n"
        "*nat\n-A POSTROUTING -o eth0 -j MASQUERADE\nCOMMIT\n"
    )
    assert rule_format(f) == "iptables"
    assert guess_interfaces([f]) == {"eth1": "client", "eth0": "server"}
    assert rule_format(DATA / "router.nft") == "nft"


def test_three_interfaces_need_to_be_named(tmp_path: Path) -> None:
    f = tmp_path / "three.nft"
    f.write_text(
        "table inet t { chain f { type filter hook forward priority 0;\n"
        'iifname "a" accept\n iifname "b" accept\n iifname "c" accept\n } }\n'
    )
    with pytest.raises(ScenarioError, match="--interfaces"):
        guess_interfaces([f])


def test_interfaces_flag() -> None:
    assert parse_interfaces("lan0=client, wan0=server") == {"lan0": "client", "wan0": "server"}
    with pytest.raises(ScenarioError, match="NAME=HOST"):
        parse_interfaces("lan0")


def test_the_scenario_measures_both_files_with_their_traffic() -> None:
    data = review_scenario(DATA / "router.nft", DATA / "router-proposed.nft")
    assert list(data["variants"]) == ["current", "proposed"]
    entry = data["variants"]["proposed"]["mechanisms"][0]
    assert entry["kind"] == "ruleset" and entry["file"].endswith("router-proposed.nft")
    assert entry["interfaces"] == {"lan0": "client", "wan0": "server"}
    assert data["workloads"] == [
        {"kind": "flows", "name": "flows", "traffic": "coverage", "duration": "1s"}
    ]
    import tomli_w

    assert tomllib.loads(tomli_w.dumps(data)) == data


def test_a_missing_file_is_named() -> None:
    with pytest.raises(ScenarioError) as err:
        review_scenario(DATA / "nope.nft", DATA / "router.nft")
    assert err.value.where is not None and err.value.where.endswith("nope.nft")
    with pytest.raises(ScenarioError, match="traffic file not found"):
        review_scenario(DATA / "router.nft", DATA / "router.nft", traffic="flows.csv")
