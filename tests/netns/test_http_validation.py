"""RFC 9411 §7's validation criteria through a real DUT: `secperf run` on a scenario
whose variant resets one new connection in 20 to nginx (an nftables rule on the DUT)
reports that variant's tests as FAILED with the criterion missed, while the baseline,
which meets the same criteria, is reported as a number; nginx's keepalive_requests
ends each connection of a `requests_per_connection = 10` workload after 10 fetches;
the deviations (RFC 9411's constant rate and concurrent connections) are judged on
the engine's interval records, and a SHOULD deviation missed (a limit no real rate
meets) is noted beside a number that stands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns

# One new connection in 20 to nginx (port 5380) is answered with a TCP RST by the DUT.
RESET_SOME = """table inet resetsome {
  chain forward {
    type filter hook forward priority 0; policy accept;
    tcp dport 5380 ct state new numgen random mod 20 == 0 reject with tcp reset
  }
}
"""

SCENARIO = """
name = "validation"
[testbed]
family = "ipv4"
[repeat]
min = 2
max = 2
remeasure = 0
trace_softirq = false
attribution = false
[timing]
duration = "0.5s"
warmup = "0.2s"
[variants.reset-some]
description = "the DUT resets one new connection to nginx in 20"
mechanisms = [{ kind = "custom", file = "reset-some.nft", format = "nft" }]
[[workloads]]
name = "cps"
kind = "http"
files = ["1KiB"]
parallel = 4
validation = { max_failed_pct = 0.001, max_reset_pct = 0.001 }
[[workloads]]
name = "steady"
kind = "http"
files = ["1KiB"]
parallel = 2
keepalive = true
[workloads.validation]
max_open_deviation_pct = 10
max_rate_deviation_pct = 0.0001
deviation_interval = 0.1
[[workloads]]
name = "ten-a-connection"
kind = "http"
files = ["1KiB"]
parallel = 2
requests_per_connection = 10
"""


@pytest.mark.serial
def test_a_test_that_misses_its_criteria_is_failed_and_one_that_meets_them_a_number(
    tmp_path: Path, state_dir: Path
) -> None:
    (tmp_path / "reset-some.nft").write_text(RESET_SOME)
    scenario = tmp_path / "validation.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "secperf", "run", str(scenario), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode in (0, 4), proc.stderr + proc.stdout
    run_dir = only_run(out)
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = {
        (r["workload"], r["variant"]): r for r in summary["rows"] if r["metric"] == "fetch_rate"
    }
    base, bad = rows[("cps", "baseline")], rows[("cps", "reset-some")]
    # the baseline met the criteria: a number
    assert base["validation"] == {
        "checked_n": 2,
        "failed_n": 0,
        "failed": [],
        "noted_n": 0,
        "noted": [],
    }
    assert base["n"] == 2 and base["mean"] > 0
    # the resetting DUT missed them: FAILED with the criteria, no number, no degradation
    assert bad["validation"]["failed_n"] == 2, bad
    assert bad["n"] == 0 and bad["mean"] is None and bad["degradation_pct"] is None
    missed = " ".join(bad["validation"]["failed"])
    assert "failed transactions" in missed and "TCP RSTs" in missed and "> 0.001 %" in missed
    # and the report says so, with the criterion
    assert "FAILED" in proc.stdout and "> 0.001 %" in proc.stdout, proc.stdout
    # nginx closed each connection after 10 fetches: ~10 fetches a connection
    records = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    (ten, *_) = [
        r["record"]
        for r in records
        if r["workload"] == "ten-a-connection"
        and r["variant"] == "baseline"
        and r["record"]["type"] == "result"
    ]
    assert ten["fetches"] > 100 and ten["failed"] == 0
    per_connection = ten["totals"]["client"]["fetches"] / ten["totals"]["client"]["connections"]
    assert 9.0 <= per_connection <= 10.0, ten["totals"]["client"]

    # the deviations: five 0.1 s periods of the 0.5 s window a round, from interval
    # records; 2 connections kept alive are constant (a criterion met), no real rate
    # is constant within 0.0001 % (a SHOULD missed: noted, the number stands)
    steady = rows[("steady", "baseline")]
    assert steady["n"] == 2 and steady["mean"] > 0, steady
    assert steady["validation"]["failed_n"] == 0 and steady["validation"]["noted_n"] == 2
    assert "traffic rate's largest deviation" in steady["validation"]["noted"][0]
    for rep in (0, 1):
        mine = [
            r["record"]
            for r in records
            if r["workload"] == "steady" and r["variant"] == "baseline" and r["rep"] == rep
        ]
        periods = [r for r in mine if r["type"] == "interval" and not r["warmup"]]
        assert len(periods) == 5 and all(p["fetches"] > 0 for p in periods), periods
        (res,) = [r for r in mine if r["type"] == "result"]
        crit = {c["name"]: c for c in res["validation"]["criteria"]}
        assert crit["max_open_deviation_pct"]["passed"] is True, crit
        assert crit["max_open_deviation_pct"]["value"] < 10
        assert crit["max_rate_deviation_pct"]["passed"] is False
        assert crit["max_rate_deviation_pct"]["required"] is False
