"""Safe in a real lab, without root (issue 22): what secperf runs on an SSH host is
built from quoted, validated pieces. A fake SSH client records every command the
code sends, so these tests read the exact shell text a lab host would run.

The same findings are tested against real sshd servers in namespaces in
tests/netns/test_ssh_safety.py."""

from __future__ import annotations

import contextlib
import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

import secperf.plan.inventory as inventory
import secperf.testbed.hosts.remote_teardown as teardown
import secperf.testbed.teardown as local
from secperf.errors import ScenarioError, SecperfError
from secperf.plan import Plan
from secperf.scenario.loader import parse_scenario
from secperf.schema.sections import InventoryHost
from secperf.testbed.hosts.ssh_transport import SshSpec
from secperf.testbed.ledger import Ledger, proc_starttime
from secperf.testbed.topology import Topology

Handler = Callable[[str], tuple[int, str, str]]


class FakeChannel:
    """Just enough of a paramiko channel for remote_run: runs nothing, answers from
    `handler(command)`."""

    def __init__(self, sent: list[str], handler: Handler) -> None:
        self.sent, self.handler = sent, handler
        self.out = self.err = b""
        self.rc = 0

    def settimeout(self, _t: float) -> None: ...

    def exec_command(self, cmd: str) -> None:
        self.sent.append(cmd)
        rc, out, err = self.handler(cmd)
        self.rc, self.out, self.err = rc, out.encode(), err.encode()

    def sendall(self, _data: bytes) -> None: ...

    def shutdown_write(self) -> None: ...

    def recv_ready(self) -> bool:
        return bool(self.out)

    def recv(self, _n: int) -> bytes:
        out, self.out = self.out, b""
        return out

    def recv_stderr_ready(self) -> bool:
        return bool(self.err)

    def recv_stderr(self, _n: int) -> bytes:
        err, self.err = self.err, b""
        return err

    def exit_status_ready(self) -> bool:
        return True

    eof_received = True

    def recv_exit_status(self) -> int:
        return self.rc

    def close(self) -> None: ...


class FakeClient:
    def __init__(self, handler: Handler) -> None:
        self.sent: list[str] = []
        self.handler = handler

    def get_transport(self) -> FakeClient:
        return self

    def open_session(self, timeout: float = 0) -> FakeChannel:
        return FakeChannel(self.sent, self.handler)

    def close(self) -> None: ...


# -- finding 8: the work directory never reaches a shell as text -----------------------


EVIL = "/x;touch /pwned;#"


def test_a_workdir_must_be_a_plain_path() -> None:
    with pytest.raises(ValueError, match="plain absolute path"):
        InventoryHost(workdir=EVIL)
    for bad in ("/var/lib/../tmp/x", "/var/lib/se cperf", "/a/$(id)", "relative/dir"):
        with pytest.raises(ValueError):
            InventoryHost(workdir=bad)
    assert InventoryHost(workdir="/srv/secperf-lab_1.0/").workdir == "/srv/secperf-lab_1.0"


def test_check_quotes_the_workdir_in_every_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec that skipped the schema (SshSpec built by hand) is refused before any
    command is sent; and were it not, every command quotes it."""
    client = FakeClient(lambda cmd: (0, "[]" if cmd.startswith("ip ") else "", ""))
    monkeypatch.setattr(inventory, "connect", lambda spec: client)
    spec = SshSpec(name="server", host="198.18.230.2", workdir=EVIL)
    with pytest.raises(SecperfError, match="plain absolute path"):
        inventory.reach(spec, engine_sha="0" * 64)
    assert client.sent == []
    monkeypatch.setattr(inventory, "check_workdir", lambda *a, **k: True)
    with contextlib.suppress(SecperfError):
        inventory.reach(spec, engine_sha="0" * 64)
    assert client.sent
    for cmd in client.sent:
        words = shlex.split(cmd, comments=False)
        assert "/pwned;#/secperf-engine" not in words and "/x;touch" not in words, cmd
        assert ";touch /pwned" not in cmd.replace(shlex.quote(EVIL + "/secperf-engine"), "")


def test_check_runs_nothing_from_a_workdir_it_found_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 41: a workdir reported missing (its parent a sticky /tmp, say) may be made by
    a local user between two commands; `secperf check` sends no command naming the engine."""

    def answer(cmd: str) -> tuple[int, str, str]:
        if "secperf-workdir" in cmd:
            return 0, "missing\n", ""
        if cmd.startswith("ip "):
            return 0, json.dumps([{"addr_info": [{"local": "198.18.230.2"}]}]), ""
        return 0, '{"version": "9.9.9"}\n', ""

    client = FakeClient(answer)
    monkeypatch.setattr(inventory, "connect", lambda spec: client)
    spec = SshSpec(
        name="server", host="198.18.230.2", workdir="/tmp/secperf", addresses=("198.18.230.2",)
    )
    said = inventory.reach(spec, engine_sha="0" * 64)
    assert "not there yet" in said
    assert any("secperf-workdir" in cmd for cmd in client.sent)
    assert not [cmd for cmd in client.sent if "secperf-engine" in cmd], client.sent


# -- finding 1: a root-only default, a ledger confined to it --------------------------


def test_the_default_workdir_is_root_only_not_world_writable_var_tmp() -> None:
    assert InventoryHost().workdir == "/var/lib/secperf"
    assert SshSpec(name="h", host="198.18.230.2").workdir == "/var/lib/secperf"


def test_teardown_removes_only_what_lies_in_the_workdir_and_kills_only_real_pids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ledger line planted by someone else: a path that climbs out of the work
    directory, pid 1 with a starttime, pid -1 with none, a pid that is not a number."""
    w = "/var/lib/secperf"
    lines = [
        {"op": "run", "prefix": "spabc"},
        {"op": "add", "type": "file", "path": f"{w}/spabc"},
        {"op": "add", "type": "file", "path": f"{w}/../../etc"},
        {"op": "add", "type": "file", "path": f"{w}/spabc/../../../root"},
        {"op": "add", "type": "file", "path": w},
        {"op": "add", "type": "process", "pid": 1, "starttime": 7, "label": "x"},
        {"op": "add", "type": "process", "pid": -1, "starttime": "", "label": "x"},
        {"op": "add", "type": "process", "pid": "1 -1", "starttime": 7, "label": "x"},
        {"op": "add", "type": "process", "pid": 4242, "starttime": 99, "label": "engine"},
    ]
    text = "\n".join(json.dumps(x) for x in lines) + "\n"

    def answer(cmd: str) -> tuple[int, str, str]:
        if cmd.startswith("cat "):
            return 0, text, ""
        return 0, "ok" if "secperf-workdir" in cmd else "", ""  # the workdir is root's

    client = FakeClient(answer)
    removed = teardown.remote_teardown(client, SshSpec(name="dut", host="h", workdir=w), "spabc")
    # every `sh -c KILL_GROUP kill PID STARTTIME` sent, in any command
    pids = [
        words[i + 1 : i + 3]
        for words in (shlex.split(c) for c in client.sent)
        for i in range(2, len(words) - 2)
        if words[i] == "kill" and words[i - 2] == "-c"
    ]
    assert pids == [["4242", "99"]], client.sent
    rm = [shlex.split(c) for c in client.sent if c.startswith("rm ")]
    assert len(rm) == 1
    targets = rm[0][rm[0].index("--") + 1 :]
    assert targets == [f"{w}/spabc", f"{w}/spabc.ledger.jsonl"], targets
    assert not any("etc" in r or "root" in r for r in removed)


def test_a_ledger_in_a_workdir_others_can_write_is_never_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`secperf clean` (and a run's own teardown) checks the work directory before it
    trusts a ledger there: in one someone else can write, the ledger could name any pid
    or path, so nothing is read, killed or removed."""
    w = "/var/tmp/secperf"

    def answer(cmd: str) -> tuple[int, str, str]:
        if "secperf-workdir" in cmd:
            return 3, f"{w} is writable by group or others (mode 1777)\n", ""
        if cmd.startswith("cat "):
            line = {"op": "add", "type": "file", "path": f"{w}/spabc"}
            return 0, json.dumps({"op": "run", "prefix": "spabc"}) + "\n" + json.dumps(line), ""
        return 0, "", ""

    client = FakeClient(answer)
    with pytest.raises(SecperfError, match="not safe") as err:
        teardown.remote_teardown(client, SshSpec(name="dut", host="h", workdir=w), "spabc")
    assert "writable by group or others" in str(err.value)
    assert [c for c in client.sent if "secperf-workdir" not in c] == [], client.sent


# -- finding 5: real wires are never shaped ---------------------------------------------

LAB = """
name = "lab"
[variants.acl]
mechanisms = [{ kind = "acl", rules = 10 }]
[[workloads]]
kind = "stream"
link_rate = "100mbit"
[testbed.hosts.client]
backend = "ssh"
ansible_host = "10.0.0.1"
addresses = ["198.18.1.2"]
interfaces = { dut = "eth1" }
[testbed.hosts.dut]
backend = "ssh"
ansible_host = "10.0.0.2"
addresses = ["198.18.1.1", "198.18.2.1"]
interfaces = { client = "eth1", server = "eth2" }
[testbed.hosts.server]
backend = "ssh"
ansible_host = "10.0.0.3"
addresses = ["198.18.2.2"]
interfaces = { dut = "eth1" }
"""


def test_a_workload_link_rate_through_real_hosts_is_refused(tmp_path: Path) -> None:
    sc = parse_scenario(LAB, tmp_path / "lab.toml")
    with pytest.raises(ScenarioError) as err:
        Plan.of(sc)  # secperf run
    assert "link_rate" in str(err.value) and "real" in str(err.value)
    assert err.value.where and "workloads[0]" in err.value.where
    with pytest.raises(ScenarioError, match="link_rate"):
        inventory.check_inventory(sc, Topology.standard())  # secperf check, before logging in
    fine = parse_scenario(LAB.replace('link_rate = "100mbit"\n', ""), tmp_path / "lab.toml")
    assert Plan.of(fine).remotes


def test_the_local_teardown_never_signals_pid_1_or_a_group_of_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    signalled: list[tuple[object, ...]] = []
    monkeypatch.setattr(local, "kill_recorded_process", lambda *a: signalled.append(a))
    ledger = Ledger.open("spzz", tmp_path)
    ledger.add("process", pid=1, starttime=proc_starttime(1) or 1, pgid=1, label="x")
    ledger.add("process", pid=-1, starttime="", pgid=-1, label="x")
    ledger.add("process", pid=4242, starttime=99, pgid=4242, label="engine")
    local.teardown_entries(ledger)
    assert signalled == [(4242, 99, 4242)]
    assert not ledger.path.exists()  # every line was dealt with


def test_teardown_writes_back_the_settings_its_ledger_names() -> None:
    """issue 41: `secperf clean` (remote_teardown) puts back a lab host's ip_forward and rps
    masks from the ledger's `setting` lines, through SETTINGS (the watchdog's script too)."""
    line = teardown.setting_line("/proc/sys/net/ipv4/ip_forward", "1")

    def answer(cmd: str) -> tuple[int, str, str]:
        if "secperf-workdir" in cmd:
            return 0, "ok\n", ""
        if cmd.startswith("cat "):
            return 0, line + "\n", ""
        if "settings" in cmd:
            return 0, "restored /proc/sys/net/ipv4/ip_forward 1\n", ""
        return 0, "", ""

    client = FakeClient(answer)
    spec = SshSpec(name="dut", host="198.18.230.2")
    removed = teardown.remote_teardown(client, spec, "sp1")
    sent = [c for c in client.sent if shlex.split(c)[:3] == ["sh", "-c", teardown.SETTINGS]]
    assert len(sent) == 1 and shlex.split(sent[0])[-1] == teardown.remote_ledger(spec, "sp1")
    assert "/proc/sys/net/ipv4/ip_forward 1 on dut (put back as found)" in removed
    assert teardown.setting_problem("/etc/passwd", "1") is not None
    assert teardown.setting_problem("/proc/sys/net/ipv4/ip_forward", "1; reboot") is not None
    assert teardown.setting_problem("/sys/class/net/eth1/queues/rx-0/rps_cpus", "3") is None
