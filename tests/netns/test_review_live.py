"""`secperf review --current-from HOST`: a lab host's live rule set, read over SSH from a
real OpenSSH server in a namespace (tests/netns/sshlab.py), is the review's current
variant (an nft-json file), and the host is left as it was."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.rulesets.load import load
from tests.netns.sshlab import Lab, sh, sshd_usable

pytestmark = pytest.mark.netns

_WHY = sshd_usable()
LIVE = """table inet filter {
	set admins { type ipv4_addr; elements = { 10.1.9.7 } }
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "lan0" oifname "wan0" ip saddr @admins tcp dport 22 accept
		iifname "wan0" drop
	}
}
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    if _WHY is not None or os.geteuid() != 0:
        pytest.skip(_WHY or "needs root")
    lab = Lab(tmp_path / "lab").build()
    try:
        yield lab
    finally:
        lab.close()


def test_the_current_rule_set_is_read_from_a_lab_host(lab: Lab, tmp_path: Path) -> None:
    (tmp_path / "live.nft").write_text(LIVE)
    dut = ("ip", "netns", "exec", lab.ns("dut"))
    sh(*dut, "nft", "-f", str(tmp_path / "live.nft"))
    before = sh(*dut, "nft", "list", "ruleset")
    inventory = tmp_path / "lab.toml"  # an inventory file: [hosts.NAME] tables
    inventory.write_text(lab.inventory(("dut",)).replace("[testbed.hosts.", "[hosts."))
    proposed = tmp_path / "proposed.nft"
    proposed.write_text(LIVE.replace("ip saddr @admins ", ""))

    proc = lab.secperf(
        "review", "--current-from", "dut", "--inventory", str(inventory), str(proposed),
        "--print-scenario",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "current: dut's live rule set" in proc.stderr
    scenario = tomllib.loads(proc.stdout)
    [current] = scenario["variants"]["current"]["mechanisms"]
    assert current["format"] == "nft-json" and current["file"].endswith("dut.live.json")
    assert current["interfaces"] == {"lan0": "client", "wan0": "server"}
    assert scenario["variants"]["proposed"]["mechanisms"][0]["file"] == str(proposed)
    # it is the host's rule set, and it loads as the review will load it
    rs = load(Path(current["file"]), "nft-json")
    forward = rs.chain("inet", "filter", "forward")
    assert forward is not None and len(forward.rules) == 3
    assert any("@admins" in json.dumps(r.expr) for r in forward.rules)
    # read-only: the host's rule set and its work directory are as they were
    assert sh(*dut, "nft", "list", "ruleset") == before
    assert list(lab.workdir("dut").iterdir()) == []


def test_a_host_not_in_the_inventory_is_named(lab: Lab, tmp_path: Path) -> None:
    inventory = tmp_path / "lab.toml"
    inventory.write_text(lab.inventory(("dut",)))  # a scenario's [testbed.hosts] tables
    proposed = tmp_path / "proposed.nft"
    proposed.write_text(LIVE)
    proc = lab.secperf(
        "review", "--current-from", "router", "--inventory", str(inventory), str(proposed),
        "--print-scenario",
    )  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "no host 'router'" in proc.stderr and "name one of: dut" in proc.stderr
