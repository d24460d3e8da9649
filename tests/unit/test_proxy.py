"""The proxy mechanism's generated configs and its scenario keys (no namespaces)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from secperf.mechanisms.base import Mechanism, MechanismContext, MechanismSpec, traffic_plan
from secperf.mechanisms.proxy import (
    RULE_HELPER_SOURCE,
    Proxy,
    ProxySpec,
    render_ftp_proxy,
    render_nft,
    render_rule_file,
    render_squid,
)
from secperf.mechanisms.registry import MECHANISMS
from secperf.scenario.scenario import Variant
from secperf.testbed.topology import Topology


def build(spec: MechanismSpec) -> Mechanism:
    return MECHANISMS.of(spec).build(spec)


def ctx(tmp_path: Path) -> MechanismContext:
    topo = Topology.standard()
    return MechanismContext(
        plan=traffic_plan(topo, 4), files_dir=tmp_path, name="p.0", table="secperf_t", topology=topo
    )


def http_access(conf: str) -> list[str]:
    return [line for line in conf.splitlines() if line.startswith("http_access")]


@pytest.mark.parametrize("match", ["first", "last"])
def test_rule_base_has_n_rules_with_the_admitting_one_where_asked(
    tmp_path: Path, match: str
) -> None:
    proxy = ProxySpec(rules=100, match=match)  # type: ignore[arg-type]
    rules = http_access(render_squid(proxy, ctx(tmp_path), tmp_path))
    assert len(rules) == 101  # 100 and the final deny
    admit = rules.index("http_access allow testbed testbed_names")
    assert admit == (0 if match == "first" else 99)
    assert rules[-1] == "http_access deny all"


def test_switches_change_the_config(tmp_path: Path) -> None:
    c = ctx(tmp_path)
    base = render_squid(ProxySpec(), c, tmp_path)
    assert "srcdomain" in base and "hosts_file none" in base and "cache_mem 64 MB" in base
    assert "access_log stdio:" in base
    off = render_squid(ProxySpec(dns_lookups=False, cache=False, logging="off"), c, tmp_path)
    assert "srcdomain" not in off and "cache deny all" in off and "access_log none" in off
    assert "testbed_names" not in off
    denied = render_squid(ProxySpec(deny=["198.18.2.2"]), c, tmp_path)
    assert http_access(denied)[0] == "http_access deny denied"
    assert "LogLevel ERR" in render_ftp_proxy(ProxySpec(logging="off"), c, tmp_path)
    assert "/dev/null" not in render_ftp_proxy(ProxySpec(logging="off"), c, tmp_path)
    nft = render_nft("secperf_t_proxy")
    assert "redirect to :3129" in nft and "redirect to :2121" in nft


def test_scenario_keys_validate_and_build_the_mechanism() -> None:
    v = Variant.model_validate(
        {"mechanisms": [{"kind": "proxy", "rules": 100, "memory": "128MiB", "cpus": 1}]}
    )
    mech = build(v.mechanisms[0])
    assert isinstance(mech, Proxy) and mech.spec.memory == 128 * 2**20 and mech.spec.cpus == 1
    with pytest.raises(ValidationError, match="deny entry"):
        Variant.model_validate({"mechanisms": [{"kind": "proxy", "deny": ["nope"]}]})
    with pytest.raises(ValidationError):
        Variant.model_validate({"mechanisms": [{"kind": "proxy", "cpus": 3}]})
    with pytest.raises(ValidationError, match="memory"):
        Variant.model_validate({"mechanisms": [{"kind": "proxy", "memory": "1MiB"}]})


def test_circuit_level_renders_dante_with_the_rule_base(tmp_path: Path) -> None:
    c = ctx(tmp_path)
    c.hosts = ("dut",)
    proxy = Proxy(ProxySpec(level="circuit", dns_lookups=False, rules=5, deny=["198.18.2.2"]))
    assert proxy.render(c) == []  # no interception: nothing for nft
    conf = (Proxy.directory(c) / "danted.conf").read_text()
    socks = [line for line in conf.splitlines() if line.startswith("socks ")]
    assert len(socks) == 1 + 5 + 1  # the deny, 5 rules, the final block
    assert socks[0].startswith("socks block { from: 0.0.0.0/0 to: 198.18.2.2")
    assert "from: 198.18.0.0/16 to: 198.18.0.0/16" in socks[5]  # admitting one last
    assert socks[-1].startswith("socks block { from: 0.0.0.0/0 to: 0.0.0.0/0")
    assert "internal: 0.0.0.0 port = 1080" in conf and "external.rotation: route" in conf
    assert proxy.socks_endpoint(c) == f"{Topology.standard().primary_address('dut')}:1080"
    assert Proxy(ProxySpec()).socks_endpoint(c) is None
    with pytest.raises(ValidationError, match="dns_lookups = false"):
        Variant.model_validate({"mechanisms": [{"kind": "proxy", "level": "circuit"}]})
    v = Variant.model_validate(
        {"mechanisms": [{"kind": "proxy", "level": "circuit", "dns_lookups": False}]}
    )
    mech = build(v.mechanisms[0])
    assert isinstance(mech, Proxy) and mech.spec.level == "circuit"


@pytest.mark.parametrize("cached", [True, False])
def test_rule_cache_moves_the_rule_base_into_a_helper_whose_verdicts_are_kept_or_not(
    tmp_path: Path, cached: bool
) -> None:
    proxy = ProxySpec(rules=100, rule_cache=cached, cache=False)
    conf = render_squid(proxy, ctx(tmp_path), tmp_path)
    helper = next(line for line in conf.splitlines() if line.startswith("external_acl_type"))
    # on: Raptor's "rule base checked once a minute"; off: squid keeps no verdict at all
    assert ("ttl=60 negative_ttl=60" in helper) is cached
    assert ("cache=0" in helper) is not cached
    assert http_access(conf) == [
        "http_access allow rulebase testbed_names",
        "http_access deny all",
    ]
    rules = render_rule_file(proxy).splitlines()
    assert len(rules) == 100 and rules[-1] == "allow 198.18.0.0/16 0.0.0.0/0"
    with pytest.raises(ValidationError, match="rule cache"):
        ProxySpec(level="circuit", dns_lookups=False, rule_cache=True)


def test_the_rule_helper_answers_from_the_first_matching_rule(tmp_path: Path) -> None:
    (tmp_path / "h.py").write_text(RULE_HELPER_SOURCE)
    (tmp_path / "r.txt").write_text(render_rule_file(ProxySpec(rules=3, match="first")))
    out = subprocess.run(
        [sys.executable, "-S", str(tmp_path / "h.py"), str(tmp_path / "r.txt")],
        input="198.18.1.2 198.18.2.3\n10.1.1.1 198.18.2.3\nnot-an-address\n",
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    assert out.stdout.split() == ["OK", "ERR", "ERR"]


@pytest.mark.parametrize("match", ["first", "last"])
def test_ftp_packets_walk_the_same_rule_base(match: str) -> None:
    nft = render_nft("secperf_t_proxy", ProxySpec(rules=100, match=match))  # type: ignore[arg-type]
    chain = nft.split("chain ftp_rules {")[1].split("}")[0].strip().splitlines()
    assert len(chain) == 101 and chain[-1].strip() == "drop"
    admit = [i for i, line in enumerate(chain) if "198.18.0.0/16" in line]
    assert admit == [0 if match == "first" else 99]
    assert "tcp dport { 2121, 40000-49999 } jump ftp_rules" in nft
    assert "ftp_rules" not in render_nft("secperf_t_proxy")
