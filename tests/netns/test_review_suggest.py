"""`secperf review --suggest` end to end: 50 per-host SSH accepts, one rule each, are
rewritten into one rule with a set, measured as the third variant `suggested`, and the
traced probe finds it decides every flow of the traffic as the proposed rule set does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns


def per_host_ssh(path: Path) -> Path:
    hosts = "".join(
        f'\t\tiifname "lan0" oifname "wan0" ip saddr 10.1.9.{i} tcp dport 22 accept\n'
        for i in range(1, 51)
    )
    path.write_text(
        "table inet filter {\n"
        "\tchain forward {\n"
        "\t\ttype filter hook forward priority filter; policy drop;\n"
        "\t\tct state established,related accept\n"
        '\t\tiifname "lan0" oifname "wan0" ip saddr 10.1.0.0/16 ip daddr 203.0.113.0/24 '
        "tcp dport 80 accept\n"
        f'{hosts}\t\tiifname "wan0" drop\n'
        "\t}\n}\n"
    )
    return path


def test_the_suggested_rewrite_is_measured_and_decides_every_flow_alike(tmp_path: Path) -> None:
    current = per_host_ssh(tmp_path / "current.nft")
    proposed = per_host_ssh(tmp_path / "proposed.nft")
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "secperf", "review", str(current), str(proposed)),
            *("--suggest", "--rounds", "2", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert f"{proposed}:6-55: inet filter forward: 50 rules" in text
    run_dir = only_run(out)
    rewrite = (run_dir / "suggested.nft").read_text()
    assert rewrite.count("tcp dport 22 accept") == 1 and "10.1.9.50 }" in rewrite
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {r["variant"] for r in summary["rows"]} >= {"current", "proposed", "suggested"}
    b = summary["behaviour"]
    assert b["variants"] == ["current", "proposed", "suggested"]
    assert len(b["flows"]) >= 50
    assert b["changes"] == []
    assert b["rewrite"] == {"of": "proposed", "flows": len(b["flows"]), "differ": [], "untraced": 0}
    assert f"equal on these {len(b['flows'])} flows, not a proof" in text


def test_a_hot_accept_moved_ahead_decides_every_flow_of_the_file_alike(tmp_path: Path) -> None:
    """With a flow file whose weight is mostly HTTPS, the HTTPS accept moves ahead of
    the drop of wan0 and the SSH, DNS and SMTP rules it shares no packet with, and the
    probe finds the rewrite deciding every flow as the proposed rule set does."""
    rules = tmp_path / "router.nft"
    rules.write_text(
        "table inet filter {\n"
        "\tchain forward {\n"
        "\t\ttype filter hook forward priority filter; policy drop;\n"
        "\t\tct state established,related accept\n"
        '\t\tiifname "wan0" drop\n'
        '\t\tiifname "lan0" oifname "wan0" udp dport 53 accept\n'
        '\t\tiifname "lan0" oifname "wan0" tcp dport 22 accept\n'
        '\t\tiifname "lan0" oifname "wan0" tcp dport 25 drop\n'
        '\t\tiifname "lan0" oifname "wan0" tcp dport 443 accept\n'
        "\t}\n}\n"
    )
    flows = tmp_path / "flows.csv"
    flows.write_text(
        "protocol,src,dst,dport,weight,request,response,ingress,egress,name\n"
        "tcp,10.1.2.3,198.51.100.9,443,0.7,100,1000,lan0,wan0,https\n"
        "udp,10.1.2.3,198.51.100.53,53,0.1,40,100,lan0,wan0,dns\n"
        "tcp,10.1.2.3,198.51.100.22,22,0.1,100,100,lan0,wan0,ssh\n"
        "tcp,10.1.2.3,198.51.100.25,25,0.1,100,100,lan0,wan0,smtp\n"
    )
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "secperf", "review", str(rules), str(rules)),
            *("--suggest", "--traffic", str(flows), "--rounds", "2", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert f"{rules}:9: inet filter forward:" in text and "70% of the traffic" in text
    run_dir = only_run(out)
    rewrite = (run_dir / "suggested.nft").read_text()
    # ahead of the wan0 drop too (iifname "lan0" is not "wan0"), behind the ct state rule
    marks = ("ct state", "dport 443 ", '"wan0" drop', "dport 53 ", "dport 22 ", "dport 25 ")
    order = [rewrite.index(m) for m in marks]
    assert order == sorted(order), rewrite
    b = json.loads((run_dir / "summary.json").read_text())["behaviour"]
    assert b["rewrite"] == {"of": "proposed", "flows": 4, "differ": [], "untraced": 0}
    verdicts = {f["flow"]: f["variants"]["suggested"]["verdict"] for f in b["flows"]}
    assert verdicts == {"https": "accept", "dns": "accept", "ssh": "accept", "smtp": "deny"}
