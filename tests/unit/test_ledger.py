"""The ledger: written at once, read back exactly, and knows whether its owner lives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from secperf.errors import TestbedError
from secperf.testbed.ledger import Ledger, ledgers, proc_starttime, resolve_state_dir


def test_round_trip(tmp_path: Path) -> None:
    led = Ledger.open("sptest1", tmp_path)
    led.add("netns", name="sptest1-client")
    led.add("veth", name="sptest1-cd", netns="sptest1-client", peer="sptest1-dc", peer_netns="x")
    led.add("process", pid=123, starttime=456, label="sleep")

    again = Ledger(tmp_path / "sptest1.jsonl")
    assert again.prefix == "sptest1"
    assert again.header["pid"] == os.getpid()
    assert again.header["starttime"] == proc_starttime(os.getpid())
    assert again.entries() == led.entries()
    assert [e["type"] for e in again.live_entries()] == ["netns", "veth", "process"]


def test_each_entry_is_on_disk_at_once(tmp_path: Path) -> None:
    led = Ledger.open("sptest2", tmp_path)
    led.add("file", path="/tmp/x")
    lines = (tmp_path / "sptest2.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["op"] == "run"
    assert json.loads(lines[-1]) == {"op": "add", "type": "file", "path": "/tmp/x"}


def test_live_entries_after_removes(tmp_path: Path) -> None:
    led = Ledger.open("sptest3", tmp_path)
    led.add("netns", name="a")
    led.add("netns", name="b")
    led.add("process", pid=10, starttime=1, label="x")
    led.add("netns", name="c")
    led.remove("netns", name="b")
    led.remove("process", pid=10, starttime=1)
    assert [e.get("name") for e in led.live_entries()] == ["a", "c"]
    # A remove that matches nothing live is not written: removal is idempotent.
    size = led.path.stat().st_size
    led.remove("netns", name="b")
    led.remove("netns", name="zzz")
    assert led.path.stat().st_size == size
    assert [e.get("name") for e in Ledger(led.path).live_entries()] == ["a", "c"]


def test_unknown_type_refused(tmp_path: Path) -> None:
    led = Ledger.open("sptest4", tmp_path)
    with pytest.raises(ValueError):
        led.add("bridge", name="x")  # type: ignore[arg-type]


def test_same_prefix_twice_refused(tmp_path: Path) -> None:
    Ledger.open("sptest5", tmp_path)
    with pytest.raises(TestbedError):
        Ledger.open("sptest5", tmp_path)


def test_truncated_last_line_is_ignored(tmp_path: Path) -> None:
    led = Ledger.open("sptest6", tmp_path)
    led.add("netns", name="a")
    with open(led.path, "a") as f:
        f.write('{"op": "add", "type": "netns", "na')  # a crash mid-write
    assert [e["name"] for e in Ledger(led.path).live_entries()] == ["a"]


def _write_header(path: Path, pid: int, starttime: int | None) -> Ledger:
    header = {"op": "run", "prefix": path.stem, "pid": pid, "starttime": starttime}
    path.write_text(json.dumps(header) + "\n")
    return Ledger(path)


def test_owner_alive_for_self(tmp_path: Path) -> None:
    assert Ledger.open("sptest7", tmp_path).owner_alive()


def test_owner_dead_pid(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    starttime = proc_starttime(child.pid)
    assert starttime is not None  # not reaped yet: its stat is still there
    child.wait()
    led = _write_header(tmp_path / "spdead.jsonl", child.pid, starttime)
    assert not led.owner_alive()


def test_owner_reused_pid(tmp_path: Path) -> None:
    # Our own pid, but a different starttime: a reused pid is not the owner.
    mine = proc_starttime(os.getpid())
    assert mine is not None
    led = _write_header(tmp_path / "spreuse.jsonl", os.getpid(), mine + 1)
    assert not led.owner_alive()
    assert not _write_header(tmp_path / "spnone.jsonl", os.getpid(), None).owner_alive()


def test_state_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SECPERF_STATE_DIR", raising=False)
    assert resolve_state_dir() == Path("/run/secperf")
    monkeypatch.setenv("SECPERF_STATE_DIR", str(tmp_path))
    assert resolve_state_dir() == tmp_path
    assert resolve_state_dir(Path("/x")) == Path("/x")
    Ledger.open("spenv", None)
    assert [led.prefix for led in ledgers()] == ["spenv"]
