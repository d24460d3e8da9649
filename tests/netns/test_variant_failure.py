"""A variant that cannot be measured is reported as failed, with its reason, while the
other variants finish and keep their results: `secperf run` on a scenario where one
variant's mechanism drops every packet through the DUT (the engine's control
connection included, so its tests cannot even start)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from secperf.testbed.ledger import ledgers
from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns

DROP_ALL = """table inet dropall {
  chain forward {
    type filter hook forward priority 0; policy drop;
  }
}
"""

SCENARIO = """
name = "one-fails"
[repeat]
min = 2
max = 2
[timing]
duration = "0.4s"
warmup = "0.1s"
[variants.acl]
mechanisms = [{ kind = "acl", rules = 10 }]
[variants.drop-all]
description = "drops everything it forwards: nothing can be measured through it"
mechanisms = [{ kind = "custom", file = "drop-all.nft", format = "nft" }]
[variants.nat]
mechanisms = [{ kind = "nat", mode = "pat" }]
[[workloads]]
kind = "rr"
request = 1
response = 1
"""


def test_a_variant_that_drops_everything_fails_alone(tmp_path: Path, state_dir: Path) -> None:
    (tmp_path / "drop-all.nft").write_text(DROP_ALL)
    scenario = tmp_path / "one-fails.toml"
    scenario.write_text(SCENARIO)
    proc = subprocess.run(
        [sys.executable, "-m", "secperf", "run", str(scenario), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # the run went to its end, and its exit status says that not everything was measured
    assert proc.returncode == 4, proc.stderr + proc.stdout
    run_dir = only_run(tmp_path / "out")
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "complete"
    (failed,) = meta["failed"]
    assert (failed["variant"], failed["point_id"], failed["round"]) == ("drop-all", "tcp-rr#0", 0)
    assert failed["error"]  # the reason, as the engine or the runner gave it
    # the others finished: both rounds each, with results and a degradation
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    results = [r for r in records if r["record"]["type"] == "result"]
    # the traced round after the measured ones (rep -1) measures the same survivors
    traced = sorted(r["variant"] for r in results if r.get("phase") == "traced")
    assert traced in ([], ["acl", "baseline", "nat"]), traced
    results = [r for r in results if r.get("phase") is None]
    # a round disturbed by other processes is measured again under the same rep
    measured = sorted({(r["variant"], r["rep"]) for r in results})
    assert measured == [(v, rep) for v in ("acl", "baseline", "nat") for rep in (0, 1)]
    assert not [r for r in results if r["variant"] == "drop-all"]
    # later rounds left the failed variant out
    (stop,) = [s for s in meta["stops"] if s["point_id"] == "tcp-rr#0" and "variant" not in s]
    assert "drop-all" in stop["order"][0] and "drop-all" not in stop["order"][1]
    assert stop["reason"] == "max_reached"
    summary = json.loads((run_dir / "summary.json").read_text())
    tps = {r["variant"]: r for r in summary["rows"] if r["metric"] == "tps"}
    assert set(tps) == {"baseline", "acl", "nat"}
    assert tps["acl"]["n"] == 2 and tps["acl"]["degradation_pct"] is not None
    assert [(f["variant"], f["point_id"]) for f in summary["failed"]] == [("drop-all", "tcp-rr#0")]
    # the report says it, with the reason
    assert "FAILED: drop-all at tcp-rr#0 could not be measured" in proc.stdout
    assert "could not be measured" in proc.stderr
    # nothing left behind
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert meta["prefix"] not in listed.stdout
    assert ledgers(state_dir) == []
