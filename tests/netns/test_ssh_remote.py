"""The SSH backend against real OpenSSH servers: a lab of namespaces that each run
sshd (tests/netns/sshlab.py), with secperf run from a controller namespace that
reaches them over SSH only. A scenario whose generators (two), server and DUT are
remote runs end to end; nothing is left on any host afterwards, also when secperf
is killed mid-run (the watchdog ends what it started; `secperf clean` empties the
remote ledgers); `secperf check` names the host and the fix; an external DUT is
switched by the scenario's commands, or refused without a terminal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.testbed.topology import Topology
from tests.netns.sshlab import HOSTS, Lab, built_lab, scenario, sh, sshd_usable

pytestmark = pytest.mark.netns

_WHY = sshd_usable()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with built_lab(tmp_path_factory.mktemp("sshlab")) as built:
        yield built


def left_in_workdirs(lab: Lab) -> dict[str, list[str]]:
    """What a run left in each host's work directory beyond the cached engine."""
    return {
        h: sorted(p.name for p in lab.workdir(h).iterdir() if p.name != "secperf-engine")
        for h in lab.hosts
    }


ACL_RR = """
[variants.acl]
mechanisms = [{ kind = "acl", rules = 20, match = "last" }]
[[workloads]]
kind = "rr"
protocol = "tcp"
duration = "1s"
warmup = "0.3s"
"""


ZONED = Topology.zoned({"inside": (2, 0), "outside": (0, 1)})
GENERATORS = """
[topology.zones.inside]
clients = 2
[topology.zones.outside]
servers = 1
[variants.acl]
mechanisms = [{ kind = "acl", rules = 20, match = "last" }]
[[workloads]]
kind = "stream"
protocol = "udp"
message = 1000
rate = "40mbit"
duration = "1s"
warmup = "0.3s"
clients = ["inside"]
servers = ["outside"]
generators = 2
"""


@pytest.mark.serial
def test_scenario_over_ssh_runs_end_to_end_and_leaves_nothing(tmp_path: Path) -> None:
    """Two generator hosts, the DUT and the server all reached over SSH (the lab's
    switch is a bridge): the ACL is loaded on the remote DUT, both generators drive
    every test and their records merge, and nothing is left on any host."""
    if _WHY is not None:
        pytest.skip(_WHY)
    lab = Lab(tmp_path / "lab", ZONED).build()
    try:
        _end_to_end(lab, tmp_path)
    finally:
        lab.close()


def _end_to_end(lab: Lab, tmp_path: Path) -> None:
    env = {"SECPERF_STATE_DIR": str(tmp_path / "state")}
    path = scenario(lab, tmp_path / "ssh-gen.toml", GENERATORS)
    dut_rules_before = sh("ip", "netns", "exec", lab.ns("dut"), "nft", "list", "ruleset")

    out = tmp_path / "out"
    got = lab.secperf("--verbose", "run", str(path), "--out", str(out), "--json", env=env)
    assert got.returncode == 0, got.stderr[-3000:]
    run_dir = Path(json.loads(got.stdout)["run_dir"])
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "complete"
    assert meta["remote_hosts"]["dut"] == f"ssh://root@{lab.mgmt['dut']}:22"
    assert meta["testbed"]["hosts"]["inside-c1"]["netns"].startswith("ssh://root@198.18.230.")
    assert meta["generators"] == {"udp-stream#0": ["inside-c1", "inside-c2"]}
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    results = [r["record"] for r in records if r["record"]["type"] == "result"]
    assert {r["variant"] for r in records if r["record"]["type"] == "result"} == {
        "baseline",
        "acl",
    }
    assert len(results) == 4  # 2 rounds x (baseline, acl), each from both generators
    for rec in results:
        each = rec["generators"]["each"]
        assert [e["host"] for e in each] == ["inside-c1", "inside-c2"]
        assert rec["bits_per_second"] == pytest.approx(sum(e["bits_per_second"] for e in each))
        assert rec["bits_per_second"] > 1.5 * max(e["bits_per_second"] for e in each)
    server = ZONED.primary_address("outside-s1")
    starts = [
        r["record"]["record"]
        for r in records
        if r["record"]["type"] == "side" and r["record"]["record"]["type"] == "start"
    ]
    assert len(starts) == 8
    for rec in starts:
        # each generator ran in its own host (reached over SSH) and reached the server
        # at its plan address, through the DUT
        assert rec["local"].split(":")[0] in {
            ZONED.primary_address("inside-c1"),
            ZONED.primary_address("inside-c2"),
        }
        assert rec["spec"]["server"] == f"{server}:5201"
    # the ACL was really loaded on the remote DUT, from a copy in the DUT's own work
    # directory; the engines ran from each host's copy
    log = (run_dir / "commands.log").read_text()
    loads = [line for line in log.splitlines() if "[ssh dut] nft -f " in line]
    assert loads and all(f" {lab.workdir('dut')}/" in line for line in loads)
    for host in ("inside-c1", "inside-c2"):
        assert f"[ssh {host}] {lab.workdir(host)}/secperf-engine run" in log
    assert f"[ssh outside-s1] {lab.workdir('outside-s1')}/secperf-engine serve" in log
    # the copy is the static build: no ELF interpreter, so no glibc to match on the host
    copy = (lab.workdir("outside-s1") / "secperf-engine").read_bytes()
    assert b"/lib64/ld-linux" not in copy[:4096], "the remote engine is dynamically linked"
    assert "[ssh dut] conntrack -F" in log

    # nothing left: no process but sshd, no run files, no remote or local ledger,
    # the DUT's firewall as found
    assert lab.wait_quiet() == {}
    assert left_in_workdirs(lab) == {h: [] for h in lab.hosts}
    assert not list((tmp_path / "state").glob("*.jsonl"))
    assert sh("ip", "netns", "exec", lab.ns("dut"), "nft", "list", "ruleset") == dut_rules_before


def test_killed_controller_leaves_nothing_running_and_clean_reaches_remote_ledgers(
    lab: Lab, tmp_path: Path
) -> None:
    env = {**os.environ, "SECPERF_STATE_DIR": str(tmp_path / "state")}
    body = """
[variants.acl]
mechanisms = [{ kind = "acl", rules = 5 }]
[[workloads]]
kind = "stream"
protocol = "tcp"
duration = "30s"
warmup = "0.3s"
"""
    path = scenario(lab, tmp_path / "ssh-kill.toml", body)
    exe = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "secperf")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", lab.ctl, exe, "run", str(path), "--out", str(tmp_path / "o")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not any("secperf-engine run" in c for c in _cmdlines(lab, "client")):
            assert proc.poll() is None, "the run ended before its test started"
            assert time.monotonic() < deadline, "no engine client started on the client host"
            time.sleep(0.05)
        assert any("secperf-engine serve" in c for c in _cmdlines(lab, "server"))
    finally:
        proc.send_signal(signal.SIGKILL)  # no teardown: only the watchdogs act
        proc.wait()
    # The connections died with secperf: every process it started remotely is ended.
    assert lab.wait_quiet(timeout=15) == {}
    # Its remote ledgers and run files are still there, and its local ledger names them.
    assert all(left_in_workdirs(lab)[h] for h in HOSTS)
    ledgers = list((tmp_path / "state").glob("*.jsonl"))
    assert len(ledgers) == 1
    assert sum('"type": "ssh"' in line for line in ledgers[0].read_text().splitlines()) == 3

    cleaned = lab.secperf("clean", env={"SECPERF_STATE_DIR": str(tmp_path / "state")})
    assert cleaned.returncode == 0, cleaned.stderr
    assert "on dut" in cleaned.stdout and "ledger" in cleaned.stdout
    assert left_in_workdirs(lab) == {h: [] for h in HOSTS}
    assert not list((tmp_path / "state").glob("*.jsonl"))
    assert sh("ip", "netns", "exec", lab.ns("dut"), "nft", "list", "ruleset").strip() == ""


def test_check_names_the_host_and_the_fix(lab: Lab, tmp_path: Path) -> None:
    env = {"SECPERF_STATE_DIR": str(tmp_path / "state")}
    # a test address the server does not have
    wrong = lab.inventory().replace('"198.18.2.2"', '"198.18.2.2", "198.18.2.9"')
    # a host key nobody vouched for
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    unknown = lab.inventory().replace(str(lab.known_hosts), str(empty))
    # a key the hosts do not accept
    other = tmp_path / "other_key"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other))
    bad = lab.inventory().replace(str(lab.key), str(other))
    files = [
        scenario(lab, tmp_path / f"{n}.toml", ACL_RR, inv)
        for n, inv in (("good", lab.inventory()), ("a", wrong), ("b", unknown), ("c", bad))
    ]
    got = lab.secperf("check", *map(str, files), env=env)
    assert got.returncode != 0
    # the good inventory: every host reached, before any traffic
    for host in HOSTS:
        assert f"{host}: ssh root@{lab.mgmt[host]}:22 ok, engine" in got.stdout
    assert f"ok {files[0]}" in got.stdout
    errors = got.stderr.split("error:")[1:]
    assert len(errors) == 3, got.stderr
    assert "198.18.2.9 are not configured on server" in errors[0]
    assert "cannot log in" in errors[1] and "ssh-keyscan" in errors[1]
    assert "cannot log in" in errors[2] and "ansible_ssh_private_key_file" in errors[2]
    assert all(f"ok {f}" not in got.stdout for f in files[1:])


def test_external_dut_is_switched_by_its_commands_or_refused_without_a_terminal(
    lab: Lab, tmp_path: Path
) -> None:
    """A DUT declared external runs nothing secperf sends; its variant is put on and
    taken off by the scenario's commands (run here, with SECPERF_VARIANT set)."""
    env = {"SECPERF_STATE_DIR": str(tmp_path / "state")}
    inventory = lab.inventory(external=("dut",)).replace(
        "[testbed.hosts.client]\n", "[testbed.hosts.client]\nkeep_engine = false\n"
    )
    log = tmp_path / "device.log"
    dut = lab.ns("dut")
    nft = f"ip netns exec {dut} nft"
    apply = (
        f"{nft} add table inet ext && {nft} 'add chain inet ext fw "
        f"{{ type filter hook forward priority 0; }}' && {nft} add rule inet ext fw counter"
        f' && echo "apply $SECPERF_VARIANT $SECPERF_HOST" >> {log}'
    )
    remove = f'{nft} delete table inet ext && echo "remove $SECPERF_VARIANT" >> {log}'
    body = f"""
[variants.box]
mechanisms = [{{ kind = "external", apply = {json.dumps(apply)}, remove = {json.dumps(remove)} }}]
[[workloads]]
kind = "rr"
protocol = "tcp"
duration = "0.5s"
warmup = "0.2s"
"""
    path = scenario(lab, tmp_path / "ext.toml", body, inventory)
    got = lab.secperf("run", str(path), "--out", str(tmp_path / "o"), "--json", env=env)
    assert got.returncode == 0, got.stderr[-3000:]
    lines = log.read_text().splitlines()
    # once in the check pass, then before each of its 2 rounds' tests (once more when
    # the shuffled order measures it twice in a row across rounds: still applied
    # afresh), and every apply taken off again, the last one at the run's end
    applies, removes = lines.count("apply box dut"), lines.count("remove box")
    assert applies == 3 and removes == 3, lines
    assert lines[-1] == "remove box"
    meta = json.loads((Path(json.loads(got.stdout)["run_dir"]) / "run.json").read_text())
    assert meta["remote_hosts"]["dut"] == "external"
    assert sh("ip", "netns", "exec", dut, "nft", "list", "ruleset").strip() == ""
    assert lab.wait_quiet() == {}
    # keep_engine = false: the client's engine went with the run's files
    assert list(lab.workdir("client").iterdir()) == []
    assert [p.name for p in lab.workdir("server").iterdir()] == ["secperf-engine"]

    # without commands secperf would have to ask; with no terminal it refuses first
    manual = body.replace(f", apply = {json.dumps(apply)}, remove = {json.dumps(remove)}", "")
    path = scenario(lab, tmp_path / "manual.toml", manual, inventory)
    got = lab.secperf("run", str(path), "--out", str(tmp_path / "o2"), env=env)
    assert got.returncode != 0
    assert "not at a terminal" in got.stderr and "apply and remove" in got.stderr
    assert not (tmp_path / "o2").exists() or not any((tmp_path / "o2").iterdir())


def _cmdlines(lab: Lab, host: str) -> list[str]:
    out = []
    for pid in lab.pids(host):
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return out
