"""secperf-nfq's bounded per-flow reassembly and the DUT's fast path (flowtable), with
real TCP through a real DUT.

Reassembly: the test string is sent in two TCP segments of one connection (the
second only after the server has answered the first, so they cannot coalesce).
Matched packet by packet, neither segment holds the string and both pass; with
reassembly on, the second segment completes it and is dropped; with a bound smaller
than the bytes before the string, the bound cuts the flow (counted) and it passes.

Fast path: a TCP stream through the DUT, with a counter in the DUT's forward hook.
Without the flowtable every packet passes the forward hook; with it, the flow is
offloaded (conntrack marks it [OFFLOAD]) and the forward hook sees only its first
packets.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.errors import MechanismError
from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.mechanisms.fastpath import Fastpath, FastpathSpec, offloaded_flows
from secperf.mechanisms.ips import Ips, IpsSpec
from secperf.testbed.hosts import ManagedProcess
from secperf.testbed.testbed import Host, Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.parts.probe import SINK_SCRIPT

pytestmark = pytest.mark.netns

RULES = Path(__file__).resolve().parents[2] / "rules" / "secperf-attacks.rules"
SERVER = "198.18.2.2"
PORT = 5398
HEAD, TAIL = b"SECPERF-IPS-TEST-", b"ATTACK-7e1f"

# Reads part one (its length is the first line), answers "1", reads part two, answers
# "2"; prints what it got of each connection.
SPLIT_SERVER = r"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", @PORT@)); s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept(); c.settimeout(3.0); got = b""
    try:
        f = c.makefile("rb"); n1, n2 = map(int, f.readline().split())
        got = f.read(n1); c.sendall(b"1")
        got += f.read(n2); c.sendall(b"2")
    except OSError:
        pass
    print(len(got), flush=True); c.close()
""".replace("@PORT@", str(PORT))

SPLIT_CLIENT = r"""
import socket, sys
one, two = bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])
c = socket.create_connection((sys.argv[1], @PORT@), timeout=1.5)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
c.sendall(b"%d %d\n" % (len(one), len(two)) + one)
assert c.recv(1) == b"1"
c.sendall(two)
try:
    print("passed" if c.recv(1) == b"2" else "closed")
except OSError:
    print("blocked")
c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
c.close()
""".replace("@PORT@", str(PORT))


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    state = tmp_path_factory.mktemp("state")
    with Testbed.build(Topology.standard(), state_dir=state) as tb:
        yield tb


def _ctx(tb: Testbed, tmp_path: Path, name: str) -> MechanismContext:
    return MechanismContext(
        plan=traffic_plan(tb.topology, 4),
        files_dir=tmp_path,
        name=name,
        table=f"secperf_{tb.prefix}",
        topology=tb.topology,
    )


def _line(proc: ManagedProcess, deadline_s: float = 10.0) -> str:
    assert proc.stdout is not None
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if line:
            return str(line).strip()
    raise AssertionError("no line from the server")


def _split(client: Host, one: bytes, two: bytes) -> str:
    out = client.run(
        [sys.executable, "-c", SPLIT_CLIENT, SERVER, one.hex(), two.hex()],
        check=False,
        timeout=20,
    )
    return out.stdout.strip() or f"error: {out.stderr.strip()[-300:]}"


def test_split_attack_caught_with_reassembly_missed_without(bed: Testbed, tmp_path: Path) -> None:
    dut, client = bed.host("dut"), bed.host("client")
    server = bed.host("server").spawn(
        [sys.executable, "-c", SPLIT_SERVER], stdout=subprocess.PIPE, label="split-server"
    )
    try:
        assert _line(server) == "ready"
        results: dict[str, tuple[str, str, dict[str, Any]]] = {}
        pad = b"p" * 200  # bytes of the flow before the split string
        for name, bound in (("off", 0), ("on", 1 << 20), ("bound", 64)):
            spec = IpsSpec(
                engine="nfq",
                rules=RULES,
                reassembly=bound > 0,
                reassembly_bytes=bound or 1 << 20,
                reassembly_flows=64,
            )
            ips = Ips(spec)
            ctx = _ctx(bed, tmp_path, f"reasm-{name}.0")
            ctx.rendered = ips.render(ctx)
            try:
                ips.apply(dut, ctx)
                said = _split(client, pad + HEAD, TAIL + b" rest")
                got = _line(server)
            finally:
                ips.release(dut, ctx)
                reset_dut(dut, ips.backends())
            lines = (tmp_path / f"{ctx.name}.dut.ips-stats.jsonl").read_text().splitlines()
            results[name] = (said, got, json.loads(lines[-1])["ips"])
    finally:
        server.stop(timeout=5.0)
    whole = len(pad + HEAD) + len(TAIL + b" rest")
    said, got, ips_off = results["off"]
    assert (said, got) == ("passed", str(whole)), results["off"]
    assert ips_off["by_sid"] == {} and "reassembly" not in ips_off, ips_off
    said, got, ips_on = results["on"]
    assert said == "blocked" and int(got) < whole, results["on"]
    assert ips_on["by_sid"].get("9000001") == 1 and ips_on["drops"] >= 1, ips_on
    re_on = ips_on["reassembly"]
    assert re_on["flows_opened"] >= 2 and re_on["flows_cut"] == 0, re_on
    assert re_on["bytes_reassembled"] >= len(pad + HEAD + TAIL), re_on
    said, got, ips_bound = results["bound"]
    assert (said, got) == ("passed", str(whole)), results["bound"]
    assert ips_bound["by_sid"] == {}, ips_bound
    re_b = ips_bound["reassembly"]
    assert re_b["bytes_bound"] == 64 and re_b["flows_cut"] >= 1, re_b
    assert re_b["bytes_past_bound"] >= len(pad + HEAD) - 64, re_b


FORWARD_COUNTER = """table inet fpcount {
  chain forward { type filter hook forward priority filter - 10; policy accept;
    ip daddr 198.18.2.2 tcp dport 5001 counter;
  }
}
"""


def _forwarded(dut: Host) -> int:
    out = dut.run(["nft", "-j", "list", "table", "inet", "fpcount"]).stdout
    for item in json.loads(out)["nftables"]:
        for expr in item.get("rule", {}).get("expr", []):
            if "counter" in expr:
                return int(expr["counter"]["packets"])
    raise AssertionError(out)


def _stream(tb: Testbed, seconds: float, while_running: Any = None) -> tuple[int, Any]:
    """Bytes a TCP stream carried to the server, and what `while_running` returned."""
    sink = tb.host("server").spawn(
        [sys.executable, "-c", SINK_SCRIPT], stdout=subprocess.PIPE, label="sink"
    )
    try:
        assert _line(sink) == "ready"
        src = tb.host("client").spawn(
            [sys.executable, "-c", SOURCE_SLOW, SERVER, str(seconds)], label="source"
        )
        seen = while_running() if while_running else None
        src.wait(timeout=seconds + 10)
        nbytes = int(_line(sink).split()[0])
    finally:
        sink.stop(timeout=5.0)
    return nbytes, seen


# 4 KiB writes, each flushed (TCP_NODELAY), for SECONDS: many packets, not a few huge ones.
SOURCE_SLOW = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5001), timeout=5)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b"x" * 1400
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    c.sendall(buf)
    time.sleep(0.0005)
c.close()
"""


def _poll_offloaded(dut: Host, deadline_s: float = 3.0) -> int:
    end = time.monotonic() + deadline_s
    n = 0
    while time.monotonic() < end and n == 0:
        n = offloaded_flows(dut)
    return n


def _has_flowtables() -> bool:
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            return "CONFIG_NF_FLOW_TABLE=y" in f.read()
    except OSError:
        return True  # no config to read: the test finds out by trying


def test_fastpath_without_kernel_flowtables_is_a_clear_error(bed: Testbed, tmp_path: Path) -> None:
    if _has_flowtables():
        pytest.skip("this kernel has flowtables: test_fastpath_offloads_established_flows runs")
    dut = bed.host("dut")
    fp = Fastpath(FastpathSpec())
    ctx = _ctx(bed, tmp_path, "fastpath.0")
    ctx.rendered = fp.render(ctx)
    with pytest.raises(MechanismError, match="CONFIG_NF_FLOW_TABLE"):
        fp.apply(dut, ctx)
    # Nothing half-loaded stays behind: the DUT still forwards, without the table.
    assert "_fastpath" not in dut.run(["nft", "list", "tables"]).stdout
    nbytes, _ = _stream(bed, 0.3)
    assert nbytes > 0


@pytest.mark.serial
def test_fastpath_offloads_established_flows(bed: Testbed, tmp_path: Path) -> None:
    if not _has_flowtables():
        pytest.skip("CONFIG_NF_FLOW_TABLE is not set: no flowtables on this kernel")
    dut = bed.host("dut")
    dut.run(["nft", "-f", "-"], input=FORWARD_COUNTER)
    try:
        slow_bytes, _ = _stream(bed, 1.0)
        slow_fwd = _forwarded(dut)
        fp = Fastpath(FastpathSpec())
        ctx = _ctx(bed, tmp_path, "fastpath.0")
        ctx.rendered = fp.render(ctx)
        assert ctx.flowtables == [f"inet secperf_{bed.prefix}_fastpath ft"]
        fp.apply(dut, ctx)
        dut.run(["nft", "reset", "counters", "table", "inet", "fpcount"])
        fast_bytes, offloaded = _stream(bed, 1.0, lambda: _poll_offloaded(dut))
        fast_fwd = _forwarded(dut)
    finally:
        reset_dut(dut, {"nft"})
    assert slow_bytes > 1_000_000 and fast_bytes > 1_000_000, (slow_bytes, fast_bytes)
    # Without the fast path every data packet passes the forward hook...
    assert slow_fwd > slow_bytes / 1448 / 2, (slow_fwd, slow_bytes)
    # ... with it, only the packets before the flow was offloaded.
    assert offloaded >= 1
    assert fast_fwd < 20, (fast_fwd, fast_bytes)
