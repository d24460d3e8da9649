"""Each mechanism, with no load problem, loses no connection: 2,000 crr connections
(orderly close) at a modest rate and some HTTP fetches from nginx through every
mechanism kind this machine runs (acl, nat, appliance, synproxy, ips with both
engines), with every one completed and nothing counted as failed, on the engine's
and the server's side.
And synproxy promises the client exactly the TCP options the server gives a direct
connection."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.engine import CONTROL_PORT, DATA_PORTS, EngineServer, Record, run_test, start_server
from secperf.mechanisms.acl import Acl, AclSpec
from secperf.mechanisms.appliance import Appliance, ApplianceSpec
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    flush_flow_state,
    reset_dut,
    traffic_plan,
)
from secperf.mechanisms.ips import Ips, IpsSpec
from secperf.mechanisms.nat import Nat, NatSpec
from secperf.mechanisms.synproxy import LOOSE_SYSCTL, Synproxy, SynproxySpec
from secperf.services.nginx import HTTP_PORT, Nginx, start_nginx
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology

pytestmark = pytest.mark.netns

SERVER = "198.18.2.2"
CONNECTIONS = 2000
RATE = 500.0  # conn/s: a quarter of what the slowest mechanism here carries
FETCHES = 200
RULES = Path(__file__).resolve().parents[2] / "rules" / "secperf-attacks.rules"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, EngineServer]]:
    state = tmp_path_factory.mktemp("state")
    files = tmp_path_factory.mktemp("nginx")
    with Testbed.build(Topology.standard(), state_dir=state) as tb:
        web: Nginx = start_nginx(tb.host("server"), files, SERVER)
        web.serve([1024, 65536])
        engine = start_server(tb.host("server"), f"0.0.0.0:{CONTROL_PORT}", data_ports=DATA_PORTS)
        try:
            yield tb, engine
        finally:
            engine.stop()
            web.stop()


def _crr(tb: Testbed) -> Record:
    spec = {
        "kind": "crr",
        "server": f"{SERVER}:{CONTROL_PORT}",
        "rate": RATE,
        "parallel": 8,
        "timeout": 2.0,
        "duration": CONNECTIONS / RATE,
        "warmup": 0.0,
        "interval": 0,
    }
    return run_test(tb.host("client"), spec, timeout=60).result


def _http(tb: Testbed) -> Record:
    spec = {
        "kind": "http",
        "server": f"{SERVER}:{HTTP_PORT}",
        "urls": ["/files/1024.bin", "/files/65536.bin"],
        "rate": 100.0,
        "parallel": 8,
        "timeout": 2.0,
        "duration": FETCHES / 100.0,
        "warmup": 0.0,
        "interval": 0,
    }
    return run_test(tb.host("client"), spec, timeout=60).result


def _through(tb: Testbed, tmp_path: Path, mech: Mechanism) -> tuple[Record, Record]:
    dut = tb.host("dut")
    reset_dut(dut, {"nft", "iptables"})
    ctx = MechanismContext(
        plan=traffic_plan(tb.topology, 4),
        files_dir=tmp_path,
        name="sanity.0",
        table=f"secperf_{tb.prefix}",
        server=tb.host("server"),
    )
    ctx.rendered = mech.render(ctx)
    mech.apply(dut, ctx)
    flush_flow_state(dut)
    try:
        return _crr(tb), _http(tb)
    finally:
        mech.release(dut, ctx)
        reset_dut(dut, mech.backends())


# A known loss: the share of connections a mechanism may lose (0 for every other
# kind). It is not an xfail that passes either way: a synproxy that lost more, or
# carried no connection, fails. Both synproxy losses are documented in
# docs/studies/rfc.md, "RFC 3511".
SYNPROXY_LOSS = 0.02

MECHANISMS: list[Any] = [
    pytest.param(lambda: Acl(AclSpec(rules=100)), 0.0, id="acl"),
    pytest.param(lambda: Acl(AclSpec(rules=100, stateful=True)), 0.0, id="acl-stateful"),
    pytest.param(lambda: Nat(NatSpec(mode="pat")), 0.0, id="nat-pat"),
    pytest.param(lambda: Appliance(ApplianceSpec()), 0.0, id="appliance"),
    # Open: in some runs a few of the 2000 connections (8 in one) open at the client
    # and never reach the server; the cause is not found yet.
    pytest.param(
        lambda: Synproxy(SynproxySpec(timestamp=False)), SYNPROXY_LOSS, id="synproxy-no-timestamp"
    ),
    # With timestamps this kernel rejects synproxy's handshake ACK to the server now
    # and then (TSEcrRejected: the timestamp offset is applied twice), and the
    # connection stalls ~1 s on the server's SYN-ACK retransmission; a full-suite run
    # saw 8 of 1858 connections carry no transaction. A kernel finding, not fixed by secperf.
    pytest.param(lambda: Synproxy(SynproxySpec()), SYNPROXY_LOSS, id="synproxy"),
    pytest.param(lambda: Ips(IpsSpec(engine="nfq", rules=RULES)), 0.0, id="ips-nfq"),
    pytest.param(lambda: Ips(IpsSpec(engine="fwsnort", rules=RULES)), 0.0, id="ips-fwsnort"),
]


# serial: "attempted" counts what an open-loop client offered in its time, a rate that a
# CPU shared with other tests lowers (1,523 of 2,000 through synproxy beside them)
@pytest.mark.serial
@pytest.mark.parametrize(("make", "may_lose"), MECHANISMS)
def test_no_connection_is_lost_without_load(
    bed: tuple[Testbed, EngineServer], tmp_path: Path, make: Any, may_lose: float
) -> None:
    tb, _ = bed
    crr, http = _through(tb, tmp_path, make())
    attempted = crr["totals"]["client"]["connections"] + crr["loss"]["lost"]
    # synproxy answers each SYN itself and then opens to the server: its slower handshakes
    # hold the open-loop client's slots longer, so it offers fewer in its time, by how
    # fast the CPU is and how often this kernel stalls a handshake ~1 s (TSEcrRejected,
    # above); alone on the machine: 1,871 of 2,000 on an Intel Xeon, 1,691 and 1,266 on
    # an AMD EPYC. What this test claims is the loss among those offered, below. A
    # mechanism that loses nothing must offer them all.
    least = 0.95 if may_lose == 0 else 0.5
    assert attempted >= least * CONNECTIONS, crr["totals"]
    assert crr["loss"]["lost"] <= may_lose * CONNECTIONS, crr["loss"]
    # every connection attempted carried its transaction, and the server saw each
    done = crr["totals"]["client"]["transactions"]
    assert attempted - done <= may_lose * attempted, (done, attempted)
    client, server = crr["totals"]["client"]["connections"], crr["totals"]["server"]["connections"]
    assert abs(server - client) <= may_lose * client, (server, client)
    assert http["failed"] <= may_lose * FETCHES, http.get("errors")
    assert http["fetches"] >= 0.95 * FETCHES, http


# What the server's SYN-ACK gave a direct connection: TCP_INFO's options bits
# (1 timestamps, 2 SACK, 4 window scaling), the peer's window scale and the MSS the
# client sends with (the server's MSS less 12 bytes of timestamp option).
PROBE = (
    "import json,socket,struct\n"
    f"s=socket.create_connection(('{SERVER}',{CONTROL_PORT}))\n"
    "i=s.getsockopt(socket.IPPROTO_TCP,socket.TCP_INFO,104)\n"
    "print(json.dumps({'options':i[5],'wscale':i[6]&15,'snd_mss':struct.unpack('I',i[16:20])[0]}))\n"
)


def test_synproxy_promises_the_servers_own_options_in_the_standard_rule_order(
    bed: tuple[Testbed, EngineServer], tmp_path: Path
) -> None:
    tb, _ = bed
    dut = tb.host("dut")
    reset_dut(dut, {"nft"})
    direct = json.loads(tb.host("client").run(["python3", "-c", PROBE]).stdout)
    ts, sack, scaled = (bool(direct["options"] & bit) for bit in (1, 2, 4))
    mss = direct["snd_mss"] + (12 if ts else 0)
    mech = Synproxy(SynproxySpec())
    ctx = MechanismContext(
        plan=traffic_plan(tb.topology, 4),
        files_dir=tmp_path,
        name="syn.0",
        table=f"secperf_{tb.prefix}",
        server=tb.host("server"),
    )
    ctx.rendered = mech.render(ctx)
    mech.apply(dut, ctx)
    try:
        assert dut.run(["sysctl", "-n", LOOSE_SYSCTL]).stdout.strip() == "0"
        rules = dut.run(["nft", "list", "table", "inet", f"{ctx.table}_syn"]).stdout
    finally:
        mech.release(dut, ctx)
        reset_dut(dut, {"nft"})
    m = re.search(r"synproxy mss (\d+)(?: wscale (\d+))?( timestamp)?( sack-perm)?", rules)
    assert m, rules
    assert int(m.group(1)) == mss, (m.group(0), direct)
    assert (m.group(2) is not None) == scaled
    if scaled:
        assert int(m.group(2)) == direct["wscale"], (m.group(0), direct)
    assert (m.group(3) is not None, m.group(4) is not None) == (ts, sack), (m.group(0), direct)
    # the standard recipe: SYNs untracked in raw prerouting, then the synproxy rule
    # for invalid/untracked packets, then invalid dropped, in that order
    lines = [ln.strip() for ln in rules.splitlines()]
    notrack = next(i for i, ln in enumerate(lines) if ln.endswith("notrack"))
    proxy = next(i for i, ln in enumerate(lines) if "ct state invalid,untracked synproxy" in ln)
    drop = next(i for i, ln in enumerate(lines) if ln == "ct state invalid drop")
    assert "priority raw" in lines[notrack - 1] and notrack < proxy < drop, rules
