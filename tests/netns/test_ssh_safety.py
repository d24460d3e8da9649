"""Safe in a real lab (issue 22), against real OpenSSH servers in namespaces
(tests/netns/sshlab.py): secperf reaches the lab hosts from a controller namespace over
SSH only, as it would real machines.

- A work directory someone else could write is refused before anything in it runs.
- A firewall on an SSH host never cuts the session that drives it; when the controller
  dies, or its link does, the host's watchdog stops what the run started there and
  puts its firewall back, without waiting for `secperf clean`.
- What secperf changes on a host (legacy iptables tables, ipsets) is put back.
- Staged files (keys, rules) are readable by root only.
- `host_key_checking = false` trusts a host's key on first use and keeps it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.netns.sshlab import Lab, built_lab, scenario, sh

pytestmark = pytest.mark.netns

EXE = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "secperf")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with built_lab(tmp_path_factory.mktemp("sshsafe")) as built:
        yield built


def ruleset(lab: Lab, host: str) -> str:
    return sh("ip", "netns", "exec", lab.ns(host), "nft", "list", "ruleset")


def in_ns(lab: Lab, host: str, *argv: str) -> str:
    return sh("ip", "netns", "exec", lab.ns(host), *argv)


def poll(what: str, cond: object, timeout: float) -> None:
    """Wait until `cond()` is true (a deadline, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def cmdlines(lab: Lab, host: str) -> list[str]:
    out = []
    for pid in lab.pids(host):
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return out


def start_run(lab: Lab, path: Path, out: Path, state: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["ip", "netns", "exec", lab.ctl, EXE, "run", str(path), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "SECPERF_STATE_DIR": str(state)},
    )


ACL_ON_SERVER = """
[variants.host-firewall]
mechanisms = [{ kind = "acl", rules = 5, on = "server" }]
[[workloads]]
kind = "rr"
protocol = "tcp"
duration = "0.5s"
warmup = "0.2s"
"""


# -- finding 1 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "owner", "says"),
    [(0o777, 0, "writable by group or others"), (0o700, 65534, "belongs to uid 65534")],
)
def test_a_workdir_someone_else_controls_is_refused_before_anything_runs_there(
    lab: Lab, tmp_path: Path, mode: int, owner: int, says: str
) -> None:
    work = tmp_path / "shared"
    work.mkdir()
    marker = tmp_path / "ran"
    planted = work / "secperf-engine"
    planted.write_text(f'#!/bin/sh\ntouch {marker}\necho \'{{"version":"0.0.0"}}\'\n')
    planted.chmod(0o755)
    os.chown(work, owner, owner)
    work.chmod(mode)
    inventory = lab.inventory().replace(
        f'workdir = "{lab.workdir("server")}"', f'workdir = "{work}"'
    )
    path = scenario(lab, tmp_path / "w.toml", ACL_ON_SERVER, inventory)
    env = {"SECPERF_STATE_DIR": str(tmp_path / "state")}
    got = lab.secperf("check", str(path), env=env)
    assert got.returncode != 0
    assert says in got.stderr and str(work) in got.stderr, got.stderr
    got = lab.secperf("run", str(path), "--out", str(tmp_path / "o"), env=env)
    assert got.returncode != 0 and says in got.stderr, got.stderr[-2000:]
    assert not marker.exists(), "root ran a program from a directory others control"
    assert sorted(p.name for p in work.iterdir()) == ["secperf-engine"]
    assert lab.wait_quiet() == {}


# -- finding 2 ---------------------------------------------------------------------------


APPLIANCE_ON_DUT = """
[variants.appliance]
mechanisms = [{ kind = "appliance" }]
[[workloads]]
kind = "rr"
protocol = "tcp"
duration = "0.5s"
warmup = "0.2s"
"""


@pytest.mark.parametrize(
    ("body", "variant", "host"),
    [(ACL_ON_SERVER, "host-firewall", "server"), (APPLIANCE_ON_DUT, "appliance", "dut")],
    ids=["acl-input-on-server", "appliance-on-dut"],
)
def test_an_input_firewall_on_an_ssh_host_keeps_its_management_session(
    lab: Lab, tmp_path: Path, body: str, variant: str, host: str
) -> None:
    """A stateless ACL on the server's input path (policy drop), or the appliance on
    the DUT (input policy drop, then a conntrack flush), is measured end to end: the
    session that loads it, runs the test and takes it off is never cut."""
    before = ruleset(lab, host)
    path = scenario(lab, tmp_path / "fw.toml", body)
    env = {"SECPERF_STATE_DIR": str(tmp_path / "state")}
    try:
        got = lab.secperf("run", str(path), "--out", str(tmp_path / "o"), "--json", env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("the run hung: its SSH session to the server was cut")
    assert got.returncode == 0, got.stderr[-3000:]
    meta = json.loads((Path(json.loads(got.stdout)["run_dir"]) / "run.json").read_text())
    assert meta["status"] == "complete"
    kind = "acl" if variant == "host-firewall" else "appliance"
    assert meta["placements"][variant] == [{"kind": kind, "hosts": [host]}]
    # What the host loaded: the rules with the session's accept heading the input chain.
    run_dir = Path(json.loads(got.stdout)["run_dir"])
    copies = list(run_dir.rglob(f"*.ssh-{host}.nft"))
    assert len(copies) == 1, copies
    first = [ln for ln in copies[0].read_text().splitlines() if ln.startswith("insert rule ")]
    assert any(" input ip saddr " in ln and "tcp dport 22 accept" in ln for ln in first), first
    assert ruleset(lab, host) == before
    assert lab.wait_quiet() == {}


def test_a_killed_controller_gets_the_firewall_back_from_the_watchdog(
    lab: Lab, tmp_path: Path
) -> None:
    """secperf killed (no teardown) while an input-drop ACL is loaded on the server:
    the host's watchdog puts its ruleset back on its own. What secperf staged there
    (rules, its ledger) was root's only (finding 6)."""
    before = ruleset(lab, "server")
    body = ACL_ON_SERVER.replace('duration = "0.5s"', 'duration = "20s"')
    path = scenario(lab, tmp_path / "kill.toml", body)
    state = tmp_path / "state"
    proc = start_run(lab, path, tmp_path / "o", state)
    try:
        poll("a test through the server's ACL", lambda: _measuring_acl(lab), 120)
        _staged_files_are_root_only(lab.workdir("server"))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # No `secperf clean` yet: the watchdog alone.
    poll("the server's ruleset as found", lambda: ruleset(lab, "server") == before, 15)
    assert lab.wait_quiet(timeout=15) == {}
    cleaned = lab.secperf("clean", env={"SECPERF_STATE_DIR": str(state)})
    assert cleaned.returncode == 0, cleaned.stderr
    assert not [p for p in lab.workdir("server").iterdir() if p.name != "secperf-engine"]


def _measuring_acl(lab: Lab) -> bool:
    """The ACL is loaded on the server and a test runs (the shuffled order may
    measure the baseline first)."""
    return "policy drop" in ruleset(lab, "server") and any(
        "secperf-engine run" in c for c in cmdlines(lab, "client")
    )


def _staged_files_are_root_only(workdir: Path) -> None:
    runs = [p for p in workdir.iterdir() if p.is_dir()]
    assert len(runs) == 1
    rundir = runs[0]
    assert rundir.stat().st_mode & 0o777 == 0o700, oct(rundir.stat().st_mode)
    ledgers = list(workdir.glob("*.ledger.jsonl"))
    assert ledgers and all(p.stat().st_mode & 0o077 == 0 for p in ledgers)
    staged = [p for p in rundir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".nft" for p in staged), staged
    for p in [*staged, *(d for d in rundir.rglob("*") if d.is_dir())]:
        assert p.stat().st_mode & 0o077 == 0, f"{p} is {oct(p.stat().st_mode)}"


# -- finding 12 --------------------------------------------------------------------------


def test_a_dead_link_ends_what_the_run_started_by_the_watchdogs_deadline(
    lab: Lab, tmp_path: Path
) -> None:
    """The controller's link to every host goes dead (no FIN, no RST: sshd never
    notices). Within the watchdog's deadline the hosts stop what the run started and
    put their firewalls back."""
    before = ruleset(lab, "server")
    inventory = lab.inventory().replace('backend = "ssh"\n', 'backend = "ssh"\nwatchdog = "4s"\n')
    body = ACL_ON_SERVER.replace('duration = "0.5s"', 'duration = "20s"')
    path = scenario(lab, tmp_path / "dead.toml", body, inventory)
    state = tmp_path / "state"
    proc = start_run(lab, path, tmp_path / "o", state)
    links = [f"{lab.tag}k{n}" for n in range(1, len(lab.hosts) + 1)]
    try:
        poll("a test through the server's ACL", lambda: _measuring_acl(lab), 120)
        for link in links:  # the management links die silently, on the controller's side
            sh("ip", "-n", lab.ctl, "link", "set", link, "down")
        cut = time.monotonic()
        assert lab.wait_quiet(timeout=20) == {}, "remote processes outlived the dead link"
        try:
            poll("the server's ruleset as found", lambda: ruleset(lab, "server") == before, 10)
        except AssertionError:
            raise AssertionError(f"before: {before!r}\nnow: {ruleset(lab, 'server')!r}") from None
        assert time.monotonic() - cut < 20
    finally:
        for link in links:
            sh("ip", "-n", lab.ctl, "link", "set", link, "up", check=False)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    cleaned = lab.secperf("clean", env={"SECPERF_STATE_DIR": str(state)})
    assert cleaned.returncode == 0, cleaned.stderr


# -- finding 5 ---------------------------------------------------------------------------

LEGACY_ACL = """
[variants.legacy-set]
mechanisms = [{ kind = "acl", rules = 5, backend = "iptables-legacy", layout = "set" }]
[[workloads]]
kind = "rr"
protocol = "tcp"
duration = "0.5s"
warmup = "0.2s"
"""


def _legacy_state(lab: Lab) -> tuple[list[str], list[str]]:
    """The DUT's legacy rules (by table; counters, and empty built-in chains that
    accept, aside: a table emptied is a table never loaded) and its ipsets."""
    rules, table = [], ""
    for line in in_ns(lab, "dut", "iptables-legacy-save").splitlines():
        if line.startswith("*"):
            table = line
        elif not line.startswith(("#", "COMMIT")):
            line = re.sub(r"\[\d+:\d+\]", "[0:0]", line)
            if not re.fullmatch(r":[A-Z]+ ACCEPT \[0:0\]", line):
                rules.append(f"{table} {line}")
    return rules, sorted(in_ns(lab, "dut", "ipset", "save").splitlines())


def test_legacy_tables_and_ipsets_found_on_a_host_are_put_back(lab: Lab, tmp_path: Path) -> None:
    in_ns(lab, "dut", "ipset", "create", "labset", "hash:ip")
    in_ns(lab, "dut", "ipset", "add", "labset", "198.18.99.9")
    in_ns(lab, "dut", "iptables-legacy", "-A", "FORWARD", "-m", "set", "--match-set", "labset",
          "src", "-j", "ACCEPT")  # fmt: skip
    in_ns(lab, "dut", "iptables-legacy", "-A", "INPUT", "-s", "198.18.99.8", "-j", "DROP")
    try:
        before = _legacy_state(lab)
        assert any("labset" in r for r in before[0]) and "add labset 198.18.99.9" in before[1]
        path = scenario(lab, tmp_path / "legacy.toml", LEGACY_ACL)
        env = {"SECPERF_STATE_DIR": str(tmp_path / "state")}
        out = str(tmp_path / "o")
        got = lab.secperf("--verbose", "run", str(path), "--out", out, "--json", env=env)
        assert got.returncode == 0, got.stderr[-3000:]
        log = (Path(json.loads(got.stdout)["run_dir"]) / "commands.log").read_text()
        assert "[ssh dut] ipset destroy" in log  # the run did take them away between tests
        assert _legacy_state(lab) == before
    finally:
        for table in ("filter", "nat", "mangle"):
            in_ns(lab, "dut", "iptables-legacy", "-t", table, "-F")
        in_ns(lab, "dut", "ipset", "destroy")


# -- finding 11 --------------------------------------------------------------------------


def test_host_key_checking_off_trusts_on_first_use_and_keeps_the_key(
    lab: Lab, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    inventory = (
        lab.inventory()
        .replace(str(lab.known_hosts), str(empty))
        .replace('backend = "ssh"\n', 'backend = "ssh"\nhost_key_checking = false\n')
    )
    path = scenario(lab, tmp_path / "tofu.toml", ACL_ON_SERVER, inventory)
    config = tmp_path / "config"
    env = {"SECPERF_STATE_DIR": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(config)}
    got = lab.secperf("check", str(path), env=env)
    assert got.returncode == 0, got.stderr
    saved = config / "secperf" / "known_hosts"
    assert saved.stat().st_mode & 0o077 == 0
    keys = saved.read_text().splitlines()
    assert sorted(line.split()[0] for line in keys) == sorted(lab.mgmt.values())
    assert empty.read_text() == ""  # the inventory's file is never written
    # The server's key changes (another machine on its address): refused, not trusted.
    other = tmp_path / "other"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other))
    server = lab.mgmt["server"]
    saved.write_text(
        "\n".join(
            f"{server} {(other.with_suffix('.pub')).read_text().split(' ', 2)[0]} "
            f"{(other.with_suffix('.pub')).read_text().split()[1]}"
            if line.split()[0] == server
            else line
            for line in keys
        )
        + "\n"
    )
    got = lab.secperf("check", str(path), env=env)
    assert got.returncode != 0
    assert "server" in got.stderr and "host key" in got.stderr and str(saved) in got.stderr, (
        got.stderr
    )


# -- issue 41: a lab DUT's settings come back after a crash ---------------------------------

FAILCLOSED = """
[variants.acl]
mechanisms = [{ kind = "acl", rules = 5 }]
[[workloads]]
kind = "failclosed"
timeout = "10s"
"""


def _forwarding(lab: Lab, host: str) -> str:
    return in_ns(lab, host, "cat", "/proc/sys/net/ipv4/ip_forward").strip()


def test_a_killed_controller_gets_ip_forward_back_from_the_watchdog(
    lab: Lab, tmp_path: Path
) -> None:
    """secperf killed while failclosed has the DUT's forwarding off (its probes wait 10 s
    there): the DUT's watchdog writes the value found back from the ledger's `setting`
    line, with no `secperf clean`."""
    assert _forwarding(lab, "dut") == "1"
    path = scenario(lab, tmp_path / "fc.toml", FAILCLOSED)
    proc = start_run(lab, path, tmp_path / "o", tmp_path / "state")
    try:
        poll("the DUT's forwarding switched off", lambda: _forwarding(lab, "dut") == "0", 180)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    poll("the DUT's forwarding back on", lambda: _forwarding(lab, "dut") == "1", 15)
    log = next(lab.workdir("dut").glob("*/watchdog.log")).read_text()
    assert "restored /proc/sys/net/ipv4/ip_forward 1" in log, log
    assert lab.wait_quiet(timeout=15) == {}
    cleaned = lab.secperf("clean", env={"SECPERF_STATE_DIR": str(tmp_path / "state")})
    assert cleaned.returncode == 0, cleaned.stderr
