"""The whole product from the command line: run, report, check, clean, with real namespaces."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from secperf.testbed.ledger import Ledger, ledgers
from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns

TINY = """
name = "tiny"
[testbed]
baseline = "{baseline}"
[repeat]
min = 2
max = 2
# one result per round: none measured again, no traced or attribution round
remeasure = 0
trace_softirq = false
attribution = false
[timing]
duration = "{duration}"
warmup = "0.1s"
[variants.acl]
mechanisms = [{{ kind = "acl", rules = 300, layout = "linear" }}]
[[workloads]]
kind = "rr"
request = 1
response = 1
[[workloads]]
kind = "crr"
[[workloads]]
kind = "stream"
message = ["16KiB", "128KiB"]
"""


def secperf(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "secperf", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def our_namespaces(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.startswith(prefix + "-")]


def alive(pid: int) -> bool:
    """Running, not merely a zombie waiting for a reaper (pid 1 here may never reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def orphaned_engines() -> set[int]:
    """Engine processes in a network namespace that no longer has a name.

    A run's processes live in its named namespaces; once teardown deleted those, a
    survivor would still hold its namespace alive, unnamed. Other runs' processes
    (in named namespaces) do not count.
    """
    named = {os.stat(p).st_ino for p in Path("/run/netns").glob("*")}
    named.add(os.stat("/proc/self/ns/net").st_ino)
    out = subprocess.run(["pgrep", "-f", "secperf-engine"], capture_output=True, text=True)
    orphans = set()
    for pid in map(int, out.stdout.split()):
        try:
            inode = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            continue
        if alive(pid) and inode not in named:
            orphans.add(pid)
    return orphans


@pytest.mark.parametrize("baseline", ["forward", "direct"])
def test_run_writes_a_complete_run_directory_and_leaves_nothing(
    tmp_path: Path, state_dir: Path, baseline: str
) -> None:
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY.format(baseline=baseline, duration="0.4s"))
    junit = tmp_path / "gate.xml"
    # a threshold no real run meets: the run completes, then its gate fails (exit 5)
    gate = ["--expect", "acl tcp-rr tps < 1", "--gate-rule", "mean", "--junit", str(junit)]
    proc = secperf("run", str(scenario), "--out", str(tmp_path / "results"), *gate)
    assert proc.returncode == 5, proc.stderr + proc.stdout
    assert "FAIL: acl · tcp-rr · Transaction rate: tps" in proc.stdout
    failures = [
        c for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None
    ]
    assert len(failures) == 1 and "acl · tcp-rr · Transaction rate" in str(failures[0].get("name"))
    run_dir = only_run(tmp_path / "results")
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "complete" and meta["scenario"]["name"] == "tiny"
    assert meta["host"]["kernel"] and meta["testbed"]["hosts"]["dut"]["ip_forward"] == "1"
    assert {s["reason"] for s in meta["stops"]} <= {"ci_met", "max_reached"}
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    results = [r for r in records if r["record"]["type"] == "result"]
    # 4 points (rr, crr, 2 stream sizes) x 2 variants x 2 rounds
    assert len(results) == 16
    assert {r["variant"] for r in results} == {"baseline", "acl"}
    # interleaved: within a point, each round runs baseline and variant once, in the
    # shuffled order run.json records
    order = [(r["variant"], r["rep"]) for r in results if r["point_id"] == "tcp-rr#0"]
    (stop,) = [s for s in meta["stops"] if s["point_id"] == "tcp-rr#0"]
    assert order == [(name, rep) for rep, names in enumerate(stop["order"]) for name in names]
    assert all(sorted(names) == ["acl", "baseline"] for names in stop["order"])
    assert isinstance(meta["order_seed"], int)
    # the direct baseline really bypassed the DUT; the variant went through it
    targets = {r["variant"]: r["record"] for r in records if r["record"]["type"] == "start"}
    expected = "198.18.3.2" if baseline == "direct" else "198.18.2.2"
    assert targets["baseline"]["spec"]["server"].startswith(expected)
    assert targets["acl"]["spec"]["server"].startswith("198.18.2.2")
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [r for r in summary["rows"] if r["variant"] == "acl" and r["metric"] == "tps"]
    assert rows and rows[0]["degradation_pct"] is not None and rows[0]["n"] == 2
    assert (run_dir / "report.html").is_file()
    # a 0.4 s test reports every 0.05 s: each has a series over time, and the report draws it
    measured: dict[tuple[str, str, int], int] = {}
    for r in records:
        if r["record"]["type"] == "interval" and not r["record"].get("warmup"):
            key = (r["point_id"], r["variant"], r["rep"])
            measured[key] = measured.get(key, 0) + 1
    assert len(measured) == 16 and min(measured.values()) >= 5, measured
    assert "tcp-rr: over time (every round)" in (run_dir / "report.html").read_text()
    assert (run_dir / "files" / "acl.0.nft").is_file()
    # the compressed copy a kept run carries (issue 42) holds the same records
    kept = gzip.decompress((run_dir / "records.jsonl.gz").read_bytes())
    assert kept == (run_dir / "records.jsonl").read_bytes()
    assert "The answer" in proc.stdout and "tcp-rr" in proc.stdout and "┏" not in proc.stdout
    # the run said how long it would take, and counted points and rounds
    assert "point(s) x 2 configuration(s)" in proc.stdout and "about " in proc.stdout
    assert "point 1/4, round 1/2: " in proc.stdout and " left" in proc.stdout
    # nothing left behind: no namespace, no ledger, no engine process of ours
    assert our_namespaces(meta["prefix"]) == []
    assert ledgers(state_dir) == []
    assert orphaned_engines() == set()
    # the report can be rebuilt from the run directory alone
    (run_dir / "summary.json").unlink()
    (run_dir / "report.html").unlink()
    met = ["--expect", "baseline tcp-rr tps > 1", "--gate-rule", "mean", "--details"]
    rebuilt = secperf("report", str(run_dir), *met)
    assert rebuilt.returncode == 0, rebuilt.stderr + rebuilt.stdout
    assert "gate: passed" in rebuilt.stdout and "Δ%" in rebuilt.stdout
    assert json.loads((run_dir / "summary.json").read_text())["rows"] == summary["rows"]
    assert (run_dir / "report.html").is_file()


def test_a_typo_fails_before_any_namespace_exists(tmp_path: Path, state_dir: Path) -> None:
    scenario = tmp_path / "typo.toml"
    scenario.write_text(
        TINY.format(baseline="forward", duration="1s").replace("request = 1", "reqest = 1")
    )
    proc = secperf("run", str(scenario), "--out", str(tmp_path / "results"))
    assert proc.returncode == 3  # invalid scenario (docs/cli.md, exit codes)
    assert "reqest" in proc.stderr and "request" in proc.stderr and f"{scenario}:" in proc.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())
    assert ledgers(state_dir) == [] and not any(state_dir.iterdir())


def test_a_killed_run_is_cleaned_by_secperf_clean(tmp_path: Path, state_dir: Path) -> None:
    scenario = tmp_path / "long.toml"
    scenario.write_text(TINY.format(baseline="forward", duration="30s"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "secperf", "run", str(scenario), "--out", str(tmp_path / "r")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # wait (polling) until the run has its testbed and an engine test under way
        deadline = time.monotonic() + 60
        ledger: Ledger | None = None
        while time.monotonic() < deadline:
            found = ledgers(state_dir)
            if found and any(
                e["type"] == "process" and e.get("label") == "engine-run"
                for e in found[0].live_entries()
            ):
                ledger = found[0]
                break
            time.sleep(0.05)
        assert ledger is not None, "the run never started a test"
        prefix = ledger.prefix
        pids = [e["pid"] for e in ledger.live_entries() if e["type"] == "process"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # the kill left its state behind (so the test below can fail) ...
    assert len(our_namespaces(prefix)) == 3
    out = secperf("clean")
    assert out.returncode == 0, out.stderr
    assert prefix in out.stdout
    # ... and clean removed all of it: namespaces, processes, the ledger
    assert our_namespaces(prefix) == []
    assert all(not alive(pid) for pid in pids)
    assert ledgers(state_dir) == []
    # a second clean finds nothing
    assert "nothing to clean" in secperf("clean").stdout


def test_check_accepts_every_shipped_scenario() -> None:
    shipped = sorted(str(p) for p in Path("scenarios").glob("*.toml"))
    assert shipped
    out = secperf("check", *shipped)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("ok ") == len(shipped)


def test_ctrl_c_tears_down_and_keeps_the_records(tmp_path: Path, state_dir: Path) -> None:
    scenario = tmp_path / "long.toml"
    scenario.write_text(TINY.format(baseline="forward", duration="1s"))
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "secperf", "run", str(scenario), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # wait (polling) until at least one result record is on disk
    deadline = time.monotonic() + 60
    records: Path | None = None
    while time.monotonic() < deadline:
        found = list(out.glob("*/records.jsonl"))
        if found and '"result"' in found[0].read_text():
            records = found[0]
            break
        time.sleep(0.05)
    assert records is not None, "no result was recorded"
    prefix = ledgers(state_dir)[0].prefix
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    meta = json.loads((records.parent / "run.json").read_text())
    assert meta["status"] == "interrupted"
    kept = [json.loads(line) for line in records.read_text().splitlines()]
    assert any(r["record"]["type"] == "result" for r in kept)
    assert (records.parent / "summary.json").is_file()
    assert our_namespaces(prefix) == [] and ledgers(state_dir) == []
    assert orphaned_engines() == set()
