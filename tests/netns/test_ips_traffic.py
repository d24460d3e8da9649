"""The IPS inline (secperf-nfq with Hyperscan, and fwsnort's iptables rules) and the
IDS on a mirror, with real packets through a real DUT: the shipped rule file's test
string is dropped inline and passes with an alert on the mirror; clean traffic passes."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.mechanisms.ids import Ids, IdsSpec
from secperf.mechanisms.ips import Ips, IpsSpec
from secperf.testbed.testbed import Host, Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.parts.probe import EchoServer, start_echo

pytestmark = pytest.mark.netns

RULES = Path(__file__).resolve().parents[2] / "rules" / "secperf-attacks.rules"
SERVER = "198.18.2.2"
PORT = 5399
CONTROL = 5201  # the engine server's control port: it passes beside the queue
ATTACK = b"GET /SECPERF-IPS-TEST-ATTACK-7e1f"
CLEAN = b"GET /index.html HTTP/1.0"
TEST_SID = {"tcp": "9000001", "udp": "9000002"}

SEND = r"""
import socket, sys
proto, addr, port, payload = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].encode()
flows = int(sys.argv[5])
try:
  for _ in range(flows):
    if proto == "tcp":
        s = socket.create_connection((addr, port), timeout=2.0)
        s.sendall(payload); print(s.recv(64).decode())
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2.0)
        s.sendto(payload, (addr, port)); print(s.recvfrom(64)[0].decode())
    s.close()
except OSError as exc:
    print("FAIL", type(exc).__name__); sys.exit(1)
"""


def send(client: Host, proto: str, payload: bytes, port: int = PORT, flows: int = 1) -> bool:
    """Whether the server answered a connection (TCP) or datagram (UDP) carrying payload,
    on each of `flows` flows (a new source port each)."""
    out = client.run(
        [sys.executable, "-c", SEND, proto, SERVER, str(port), payload.decode(), str(flows)],
        check=False,
        timeout=15 + 3 * flows,
    )
    return out.returncode == 0 and out.stdout.strip() != ""


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, EchoServer]]:
    state = tmp_path_factory.mktemp("state")
    with Testbed.build(Topology.standard(ids=True), state_dir=state) as tb:
        echo = start_echo(tb.host("server"), "0.0.0.0", [PORT, CONTROL])
        yield tb, echo
        echo.stop()


def _ctx(tb: Testbed, tmp_path: Path, name: str) -> MechanismContext:
    plan = traffic_plan(tb.topology, 4)
    return MechanismContext(
        plan=plan,
        files_dir=tmp_path,
        name=name,
        table=f"secperf_{tb.prefix}",
        topology=tb.topology,
    )


def _stats(tmp_path: Path, name: str, host: str) -> list[dict[str, Any]]:
    path = tmp_path / f"{name}.{host}.ips-stats.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("engine", ["nfq", "fwsnort"])
def test_inline_ips_drops_the_attack_and_passes_clean_traffic(
    bed: tuple[Testbed, EchoServer], tmp_path: Path, engine: str
) -> None:
    tb, _echo = bed
    dut, client = tb.host("dut"), tb.host("client")
    ips = Ips(IpsSpec(engine=engine, rules=RULES))
    ctx = _ctx(tb, tmp_path, f"ips-{engine}.0")
    ctx.rendered = ips.render(ctx)
    # The path works before the IPS goes in, for both payloads.
    assert send(client, "tcp", ATTACK)
    try:
        ips.apply(dut, ctx)
        results = {
            (proto, kind): send(client, proto, payload)
            for proto in ("tcp", "udp")
            for kind, payload in (("clean", CLEAN), ("attack", ATTACK))
        }
    finally:
        ips.release(dut, ctx)
        reset_dut(dut, ips.backends())
    assert results == {
        ("tcp", "clean"): True,
        ("tcp", "attack"): False,
        ("udp", "clean"): True,
        ("udp", "attack"): False,
    }
    (record,) = _stats(tmp_path, ctx.name, "dut")
    counts = record["ips"] if engine == "nfq" else record
    assert counts["drops"] >= 2, record  # the TCP segment (and its retransmits), the datagram
    for sid in TEST_SID.values():
        assert counts["by_sid"].get(sid, 0) >= 1, record
    # Only the test strings matched: clean traffic raised nothing.
    assert set(counts["by_sid"]) == set(TEST_SID.values()), record
    if engine == "nfq":
        assert record["kernel"]["queue_dropped"] == 0, record
    # Released: the path is open again.
    assert send(client, "tcp", ATTACK)


def test_ids_on_a_mirror_alerts_and_lets_the_attack_pass(
    bed: tuple[Testbed, EchoServer], tmp_path: Path
) -> None:
    tb, _echo = bed
    dut, sensor, client = tb.host("dut"), tb.host("ids"), tb.host("client")
    ids = Ids(IdsSpec(rules=RULES))
    ctx = _ctx(tb, tmp_path, "ids.0")
    ctx.hosts = ("dut", "ids")
    ctx.rendered = ids.render(ctx)
    try:
        ids.apply_group([dut, sensor], ctx)
        passed = {proto: send(client, proto, ATTACK) for proto in ("tcp", "udp")}
        clean = send(client, "tcp", CLEAN)
    finally:
        ids.release_group([dut, sensor], ctx)
        reset_dut(dut, ids.backends())
    assert passed == {"tcp": True, "udp": True}
    assert clean
    (record,) = _stats(tmp_path, ctx.name, "ids")
    assert record["mode"] == "ids"
    counts = record["ips"]
    for sid in TEST_SID.values():
        assert counts["by_sid"].get(sid, 0) >= 1, record
    assert counts["drops"] == 0, record  # a sensor never drops
    assert record["sensor_drops"] == 0, record
    # The sensor saw both directions of every exchange (the mirror copies all of it).
    assert record["packets"] >= 6, record


def test_nfq_ips_fails_closed_without_its_daemon(
    bed: tuple[Testbed, EchoServer], tmp_path: Path
) -> None:
    tb, _echo = bed
    dut, client = tb.host("dut"), tb.host("client")
    ips = Ips(IpsSpec(engine="nfq", rules=RULES))
    ctx = _ctx(tb, tmp_path, "ips-fc.0")
    ctx.rendered = ips.render(ctx)
    try:
        ips.apply(dut, ctx)
        assert send(client, "udp", CLEAN)
        assert ips.kill_daemons()
        closed = send(client, "udp", CLEAN)  # no --queue-bypass: nothing passes
        ips.restart_daemons(dut, ctx)
        reopened = send(client, "udp", CLEAN)
    finally:
        ips.release(dut, ctx)
        reset_dut(dut, ips.backends())
    assert not closed
    assert reopened


def test_nfq_ips_on_two_queues_and_failing_open(
    bed: tuple[Testbed, EchoServer], tmp_path: Path
) -> None:
    tb, _echo = bed
    dut, client = tb.host("dut"), tb.host("client")
    ips = Ips(IpsSpec(engine="nfq", rules=RULES, queue=3, queues=2, fail_open=True))
    ctx = _ctx(tb, tmp_path, "ips-2q.0")
    ctx.rendered = ips.render(ctx)
    try:
        ips.apply(dut, ctx)
        # 16 flows: --queue-balance hashes each to one of the two queues (all 16 on
        # one queue: 1 in 32768)
        clean = send(client, "udp", CLEAN, flows=16)
        attack = send(client, "udp", ATTACK)
        assert ips.kill_daemons()
        bypassed = send(client, "udp", ATTACK)  # --queue-bypass: no daemon, no inspection
    finally:
        ips.release(dut, ctx)
        reset_dut(dut, ips.backends())
    assert clean and not attack
    assert bypassed


def test_nfq_ips_threads_share_the_load_of_two_queues(
    bed: tuple[Testbed, EchoServer], tmp_path: Path
) -> None:
    tb, _echo = bed
    dut, client = tb.host("dut"), tb.host("client")
    ips = Ips(IpsSpec(engine="nfq", rules=RULES, queue=3, queues=2))
    ctx = _ctx(tb, tmp_path, "ips-2q-stats.0")
    ctx.rendered = ips.render(ctx)
    try:
        ips.apply(dut, ctx)
        clean = send(client, "udp", CLEAN, flows=16)
        attack = send(client, "tcp", ATTACK)
    finally:
        ips.release(dut, ctx)
        reset_dut(dut, ips.backends())
    assert clean and not attack
    (record,) = _stats(tmp_path, ctx.name, "dut")
    assert record["queues"] == 2
    # a thread a queue, and together they had every packet the kernel queued (which queue
    # a flow lands on is the kernel's hash of its addresses and protocol with a seed drawn
    # once a boot: between one pair of hosts both protocols may share one queue)
    assert len(record["per_queue_packets"]) == 2, record
    assert sum(record["per_queue_packets"]) == record["packets"] > 0, record
    each = {q["queue"]: q["queued"] for q in record["kernel"]["queues"]}
    assert set(each) == {3, 4}, record
    assert record["packets"] == record["kernel"]["queued"], record
    assert record["ips"]["by_sid"].get(TEST_SID["tcp"], 0) >= 1, record
    assert record["kernel"]["queue_dropped"] == 0 and record["kernel"]["user_dropped"] == 0
    assert record["batches"] >= 1 and record["verdict_errors"] == 0, record


def test_the_engines_control_connection_passes_a_stalled_queue(
    bed: tuple[Testbed, EchoServer], tmp_path: Path
) -> None:
    """The daemon stopped (SIGSTOP: bound, but no verdicts): every queued packet waits
    and the load is lost, but the engine's control port answers at once, so a test
    through an IPS that cannot keep up reports its loss instead of timing out."""
    tb, _echo = bed
    dut, client = tb.host("dut"), tb.host("client")
    ips = Ips(IpsSpec(engine="nfq", rules=RULES))
    ctx = _ctx(tb, tmp_path, "ips-stall.0")
    ctx.rendered = ips.render(ctx)
    try:
        ips.apply(dut, ctx)
        (daemon,) = ips.daemons()
        daemon.popen.send_signal(signal.SIGSTOP)
        try:
            data = send(client, "tcp", CLEAN)
            control = send(client, "tcp", CLEAN, port=CONTROL)
        finally:
            daemon.popen.send_signal(signal.SIGCONT)
    finally:
        ips.release(dut, ctx)
        reset_dut(dut, ips.backends())
    assert not data
    assert control


def _rx_packets(host: Host) -> int:
    """Packets received on the host's interfaces but loopback."""
    links = json.loads(host.run(["ip", "-s", "-j", "link", "show"]).stdout or "[]")
    return sum(int(link["stats64"]["rx"]["packets"]) for link in links if link["ifname"] != "lo")


def test_a_mirror_without_a_sensor_copies_every_packet_and_nobody_reads_them(
    bed: tuple[Testbed, EchoServer], tmp_path: Path
) -> None:
    tb, _echo = bed
    dut, sensor, client = tb.host("dut"), tb.host("ids"), tb.host("client")
    ids = Ids(IdsSpec(rules=RULES, sensor=False))
    ctx = _ctx(tb, tmp_path, "ids-mirror-only.0")
    ctx.hosts = ("dut", "ids")
    ctx.rendered = ids.render(ctx)
    before = _rx_packets(sensor)
    try:
        ids.apply_group([dut, sensor], ctx)
        passed = {proto: send(client, proto, ATTACK) for proto in ("tcp", "udp")}
        copied = _rx_packets(sensor) - before
        assert ids.detection_counts([dut, sensor], ctx) is None
    finally:
        ids.release_group([dut, sensor], ctx)
        reset_dut(dut, ids.backends())
    assert passed == {"tcp": True, "udp": True}
    # the copies of both exchanges reached the sensor's interface (TCP: at least the
    # handshake, the request, the answer; UDP: the datagram and its answer)
    assert copied >= 6, copied
    # and no matcher ran: no counters were written
    assert not (tmp_path / f"{ctx.name}.ids.ips-stats.jsonl").exists()
