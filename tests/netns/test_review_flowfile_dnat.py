"""A flow file's flow to a DNAT'ed address is answered where the DNAT sends it: the
router of tests/data/rulesets DNATs 203.0.113.10:80 to its web server 10.1.5.200 on the
LAN, so a CSV flow from the internet to 203.0.113.10:80 is served by the host behind
lan0 on the mapped 10.1.5.200, as the coverage flow of that DNAT rule is, and its
connections complete."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns

DATA = Path(__file__).parent.parent / "data" / "rulesets"


def test_a_flow_files_dnat_flow_is_served_behind_the_dnat(tmp_path: Path) -> None:
    flows = tmp_path / "flows.csv"
    flows.write_text(
        "protocol,src,dst,dport,weight,request,response,ingress,egress,name\n"
        "tcp,198.51.100.7,203.0.113.10,80,0.5,100,1000,wan0,,web-in\n"
        "tcp,10.1.2.3,198.51.100.9,443,0.5,100,1000,lan0,wan0,web-out\n"
    )
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "secperf", "review"),
            *(str(DATA / "router.nft"), str(DATA / "router-proposed.nft")),
            *("--traffic", str(flows), "--rounds", "2", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = only_run(out)
    meta = json.loads((run_dir / "run.json").read_text())
    placed = {f["name"]: f for f in meta["rule_set_map"]["flows"]}
    web = placed["web-in"]
    assert (web["served_by"], web["served_port"]) == ("10.1.5.200", 80)
    assert (web["client"], web["server"], web["egress"]) == ("server", "client", "lan0")
    mapped = dict(line.split("  ")[0].split(" -> ") for line in meta["rule_set_map"]["lines"])
    assert web["listen"] == mapped["10.1.5.200"]
    # its connections complete in every measured test of both rule sets
    seen = {"current": 0, "proposed": 0}
    for line in (run_dir / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        inner = r["record"].get("record")
        if r["variant"] not in seen or not isinstance(inner, dict):
            continue
        if "attempts_per_second" not in inner:
            continue  # an interval, not a test's result
        for f in inner.get("flows") or []:
            if f.get("name") == "web-in":
                assert f["ok"] > 0 and f["failed"] == 0, f
                seen[r["variant"]] += 1
    assert all(seen.values()), seen
