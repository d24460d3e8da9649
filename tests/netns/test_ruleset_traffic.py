"""A user's router rule set (router.nft, and as iptables-save output through both
iptables backends) through the `ruleset` mechanism, on a bed built through the
plan: the DUT's interfaces carry the file's names (lan0, wan0), the mapped addresses
sit on the hosts behind them, and real connections meet the rules as written:
masquerade out of wan0, a TCP reset for SMTP, SSH to the router from the admins' set
only, a DNAT from the outside to the inside web server.

The flows are given here (what the plan places, not how they are derived: the deriver
has its own tests), so every assertion is about the mechanism and the testbed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest

from secperf.mechanisms.base import reset_dut
from secperf.plan import Plan, review
from secperf.rulesets.model import Flow, PlacedFlow
from secperf.scenario.loader import load_scenario
from secperf.testbed.testbed import Testbed, new_prefix
from secperf.workloads.base import EngineExecutor, WorkloadKind, WorkloadSpec
from secperf.workloads.parts.probe import start_echo
from secperf.workloads.registry import WORKLOADS

pytestmark = pytest.mark.netns

DATA = Path(__file__).parent.parent / "data" / "rulesets"
DUT_WAN = "198.18.2.1"  # the DUT's own address on its link to the server (wan0)


class Review(WorkloadSpec):
    """Sends the rule set's traffic (as the flows workload does)."""

    kind: Literal["rsnetns"]
    sweepable: ClassVar[dict[str, str]] = {}

    def default_name(self) -> str:
        return "rsnetns"


KIND = WorkloadKind(
    name="rsnetns",
    model=Review,
    executor=EngineExecutor(),
    rule_set_traffic=lambda _spec: "coverage",
)


def flow(name: str, **kw: Any) -> Flow:
    base: dict[str, Any] = {"protocol": "tcp", "ingress": "lan0", "egress": "wan0"}
    return Flow(name=name, **{**base, **kw})


FLOWS = [
    flow("web", src="10.1.2.3", dst="198.51.100.7", dport=80),
    flow("smtp", src="10.1.2.3", dst="198.51.100.7", dport=25),
    flow("admin-ssh", src="10.1.9.7", dst="10.1.0.1", dport=22, egress=None, to_dut=True),
    flow("lan-ssh", src="10.1.2.3", dst="10.1.0.1", dport=22, egress=None, to_dut=True),
    flow(
        "dnat",
        src="198.51.100.7",
        dst="203.0.113.10",
        dport=80,
        ingress="wan0",
        egress="lan0",
        served_by="10.1.5.200",
        served_port=80,
    ),
]

CONNECT = r"""
import socket, sys
src, dst, port, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
s = socket.socket()
s.settimeout(timeout)
s.bind((src, 0))
try:
    s.connect((dst, port))
    s.sendall(b"x")
    print("OK", s.recv(64).decode())
except OSError as exc:
    print("FAIL", type(exc).__name__)
"""


RULE_SETS = {
    "nft": ("router.nft", ""),
    "iptables-nft": ("router.iptables", 'format = "iptables", backend = "iptables-nft", '),
    "iptables-legacy": ("router.iptables", 'format = "iptables", backend = "iptables-legacy", '),
}


@pytest.fixture(scope="module", params=list(RULE_SETS))
def bed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Testbed, Plan]]:
    name, keys = RULE_SETS[request.param]
    tmp = tmp_path_factory.mktemp("ruleset")
    (tmp / name).write_text((DATA / name).read_text())
    (tmp / "s.toml").write_text(
        'name = "router"\n[variants.current]\n'
        f'mechanisms = [{{ kind = "ruleset", file = "{name}", {keys}'
        'interfaces = { lan0 = "client", wan0 = "server" } }]\n'
        '[[workloads]]\nkind = "rsnetns"\n'
    )
    with pytest.MonkeyPatch.context() as mp, WORKLOADS.registered(KIND):
        mp.setattr(review.derive_flows, "derive", lambda _rs, _i, _n=None, _t=None: list(FLOWS))
        plan = Plan.of(load_scenario(tmp / "s.toml"))
    prefix = new_prefix()
    plan.render(tmp / "files", prefix)
    (variant,) = [v for v in plan.variants if v.name == "current"]
    with Testbed.build(plan.topology, prefix=prefix, state_dir=tmp_path_factory.mktemp("st")) as tb:
        for mech, ctx in variant.mechanisms:
            mech.apply_group([tb.host(h) for h in ctx.hosts], ctx)
        try:
            yield tb, plan
        finally:
            for mech, _ctx in variant.mechanisms:
                reset_dut(tb.host("dut"), mech.backends())


def placed(plan: Plan, name: str) -> PlacedFlow:
    (p,) = [p for p in plan.traffic.flows if p.flow.name == name]
    return p


def connect(tb: Testbed, p: PlacedFlow, *, src: str | None = None, timeout: float = 3.0) -> str:
    """One TCP connection of the flow from its client (from `src`, default the flow's),
    what the echo server answered ("OK <source it saw>") or why it failed."""
    proc = tb.host(p.client).run(
        [sys.executable, "-c", CONNECT, src or p.src, p.dst, str(p.flow.dport), str(timeout)],
        timeout=timeout + 10,
    )
    return proc.stdout.strip()


def test_the_dut_interfaces_carry_the_rule_sets_names(bed: tuple[Testbed, Plan]) -> None:
    tb, _plan = bed
    argv = ["ip", "-o", "-n", tb.netns("dut"), "link"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    names = {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}
    assert {"lan0", "wan0"} <= names
    assert tb.ifname("client-dut", "dut") == "lan0" and tb.ifname("dut-server", "dut") == "wan0"
    # the other ends keep their generated names, with the run's prefix
    assert tb.ifname("client-dut", "client").startswith(tb.prefix)


def test_lan_to_wan_web_passes_and_is_masqueraded(bed: tuple[Testbed, Plan]) -> None:
    tb, plan = bed
    web = placed(plan, "web")
    echo = start_echo(tb.host(web.server), web.listen, [80])
    try:
        assert connect(tb, web) == f"OK {DUT_WAN}"  # masquerade out of wan0
    finally:
        echo.stop()


def test_smtp_out_is_reset(bed: tuple[Testbed, Plan]) -> None:
    tb, plan = bed
    smtp = placed(plan, "smtp")
    echo = start_echo(tb.host(smtp.server), smtp.listen, [25])
    try:
        assert connect(tb, smtp) == "FAIL ConnectionRefusedError"  # reject with tcp reset
        assert not echo.seen()
    finally:
        echo.stop()


def test_ssh_to_the_router_from_the_admins_only(bed: tuple[Testbed, Plan]) -> None:
    tb, plan = bed
    admin, lan = placed(plan, "admin-ssh"), placed(plan, "lan-ssh")
    assert admin.server == "dut" and admin.listen == lan.listen
    echo = start_echo(tb.host("dut"), admin.listen, [22])
    try:
        assert connect(tb, admin) == f"OK {admin.src}"
        assert connect(tb, lan, timeout=1.5) == "FAIL TimeoutError"  # ssh_in: counter drop
    finally:
        echo.stop()


def test_dnat_from_the_outside_reaches_the_inside_web_server(bed: tuple[Testbed, Plan]) -> None:
    tb, plan = bed
    dnat = placed(plan, "dnat")
    assert (dnat.client, dnat.server) == ("server", "client") and dnat.listen != dnat.dst
    echo = start_echo(tb.host("client"), dnat.listen, [80])
    try:
        # sent to the mapped 203.0.113.10, answered on the client's mapped 10.1.5.200,
        # which sees the outside source as it was (no masquerade towards lan0)
        assert connect(tb, dnat) == f"OK {dnat.src}"
    finally:
        echo.stop()


def test_a_named_and_addressed_bed_goes_by_its_ledger(bed: tuple[Testbed, Plan]) -> None:
    """The named ends are in the ledger by name and namespace; a teardown of a bed with
    them leaves no namespace, no root-namespace lan0 and no ledger."""
    tb, plan = bed
    veths = [e for e in tb.ledger.live_entries() if e["type"] == "veth"]
    ends = {(e["name"], e["netns"]) for e in veths} | {(e["peer"], e["peer_netns"]) for e in veths}
    assert ("lan0", tb.netns("dut")) in ends and ("wan0", tb.netns("dut")) in ends
    root = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    names = {line.split(": ")[1].split("@")[0] for line in root.stdout.splitlines()}
    assert not {"lan0", "wan0"} & names  # never in the root namespace
    other = Testbed.build(plan.topology)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert other.netns("dut") in listed
    other.teardown()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert other.prefix not in listed and not other.ledger.path.exists()
