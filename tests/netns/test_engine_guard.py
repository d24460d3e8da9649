"""The engine's target guard and its data sockets' peer check, inside an empty network
namespace: only `lo`, holding a testbed address for the server (198.18.77.1), one for
the client (198.18.77.2) and a "victim" outside every testbed range (192.0.2.1). Nothing
can leave such a namespace, so a case that fails (the engine sends where it must not)
harms nobody.

- Every address a spec can make the engine send to is guarded, not only `server`: a
  latency spec's `destinations`, a mix spec's `socks`.
- A server's UDP data socket answers only the control connection's peer (or an address
  its spec declares): a spoofed request, HELLO or probe from the victim gets nothing back.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.tools import engine_path

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parents[2]
SERVER, PEER, VICTIM = "198.18.77.1", "198.18.77.2", "192.0.2.1"
PORT = 5201


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


@pytest.fixture(scope="module")
def ns() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    name = "sg" + secrets.token_hex(3)
    _ip("netns", "add", name)
    server: subprocess.Popen[str] | None = None
    try:
        _ip("-n", name, "link", "set", "lo", "up")
        for addr in (SERVER, PEER, VICTIM):
            _ip("-n", name, "addr", "add", f"{addr}/32", "dev", "lo")
        server = subprocess.Popen(
            ["ip", "netns", "exec", name, engine_path(), "serve", "--listen", f"0.0.0.0:{PORT}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert server.stdout is not None
        line = server.stdout.readline()  # blocks until `listening` (or the engine ends)
        assert '"listening"' in line, line
        yield name
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        subprocess.run(["ip", "netns", "del", name], check=False)


def run_engine(ns: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
    got = subprocess.run(
        ["ip", "netns", "exec", ns, engine_path(), "run", "--spec", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return [json.loads(line) for line in got.stdout.splitlines() if line.startswith("{")]


def probe(ns: str, spec: dict[str, Any], send: str) -> dict[str, int]:
    args = {
        "server_ip": SERVER,
        "port": PORT,
        "peer_ip": PEER,
        "victim_ip": VICTIM,
        "spec": spec,
        "send": send,
    }
    python = str(ROOT / ".venv/bin/python")
    got = subprocess.run(
        ["ip", "netns", "exec", ns, python, "-m", "tests.netns.guardprobe", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert got.returncode == 0, got.stderr + got.stdout
    return dict(json.loads(got.stdout))


def test_latency_destinations_outside_the_testbed_are_refused(ns: str) -> None:
    """A loopback `server` passes the guard; `destinations` is where the probes go."""
    spec = {
        "kind": "latency",
        "server": f"127.0.0.1:{PORT}",
        "destinations": [VICTIM],
        "rate_pps": 100,
        "duration": 0.5,
        "warmup": 0.1,
    }
    records = run_engine(ns, spec)
    assert records and records[-1]["type"] == "error", records
    assert records[-1]["kind"] == "target" and records[-1]["field"] == "destinations[0]"
    assert "--allow-any-target" in records[-1]["message"]
    assert not any(r["type"] == "start" for r in records)  # refused before any packet


def test_a_mix_socks_proxy_outside_the_testbed_is_refused(ns: str) -> None:
    spec = {
        "kind": "mix",
        "servers": [{"address": SERVER}],
        "clients": [1],
        "requests": 1,
        "timeout": 0.5,
        "html_files": [1000],
        "socks": "192.0.2.9:1080",
    }
    records = run_engine(ns, spec)
    assert records and records[-1]["type"] == "error", records
    assert records[-1]["kind"] == "target" and records[-1]["field"] == "socks"
    assert not any(r["type"] == "start" for r in records)


def test_udp_rr_answers_only_the_control_peer(ns: str) -> None:
    spec = {"kind": "rr", "protocol": "udp", "request": 1, "response": 1000, "duration": 2}
    got = probe(ns, spec, "rr")
    assert got["victim"] == 0, got  # a spoofed request reflects nothing
    assert got["peer"] >= 1, got  # the client it serves is still answered


def test_a_spoofed_hello_starts_no_udp_stream(ns: str) -> None:
    spec = {
        "kind": "stream",
        "protocol": "udp",
        "direction": "receive",
        "message": 1000,
        "rate_bps": 8_000_000,
        "duration": 2,
    }
    got = probe(ns, spec, "hello")
    assert got["victim"] == 0, got
    assert got["peer"] >= 10, got


@pytest.mark.parametrize("duplex", ["half", "full"])
def test_latency_probes_go_only_to_the_control_peer(ns: str, duplex: str) -> None:
    spec = {"kind": "latency", "duplex": duplex, "rate_pps": 200, "duration": 2}
    got = probe(ns, spec, "probe")
    assert got["victim"] == 0, got
    assert got["peer"] >= 1, got


def test_the_namespace_is_empty_but_for_lo(ns: str) -> None:
    """What makes the cases above safe: no interface but loopback."""
    out = subprocess.run(
        ["ip", "-n", ns, "-j", "link", "show"], capture_output=True, text=True, check=True
    ).stdout
    assert [link["ifname"] for link in json.loads(out)] == ["lo"]
