"""Real traffic through real rule sets: the ACL permits the measured flow and denies the rest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.errors import ScenarioError
from secperf.mechanisms.acl import Acl, AclSpec
from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.mechanisms.custom import Custom, CustomSpec
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.parts.probe import EchoServer, probe, start_echo

pytestmark = pytest.mark.netns

MEASURED = 5201  # the engine's control port: always in the permit
DATA = 5300  # first engine data port: in the permit
UNLISTED = 7000  # in no permit


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, EchoServer]]:
    state = tmp_path_factory.mktemp("state")
    with Testbed.build(Topology.standard(), state_dir=state) as tb:
        echo = start_echo(tb.host("server"), "0.0.0.0", [MEASURED, DATA, UNLISTED])
        yield tb, echo


def load(tb: Testbed, acl: Acl | Custom, tmp_path: Path) -> None:
    plan = traffic_plan(tb.topology, 4)
    ctx = MechanismContext(plan=plan, files_dir=tmp_path, name="v.0", table=f"secperf_{tb.prefix}")
    ctx.rendered = acl.render(ctx)
    acl.apply(tb.host("dut"), ctx)


SERVER = "198.18.2.2"


def test_without_acl_every_flow_passes(bed: tuple[Testbed, EchoServer]) -> None:
    tb, _ = bed
    reset_dut(tb.host("dut"), {"nft"})
    assert probe(tb.host("client"), SERVER, UNLISTED) == "198.18.1.2"
    assert probe(tb.host("client"), SERVER, MEASURED) == "198.18.1.2"


@pytest.mark.parametrize(
    "acl",
    [
        Acl(AclSpec(rules=1000, layout="linear")),
        Acl(AclSpec(rules=1000, layout="set")),
        Acl(AclSpec(rules=50, layout="linear", match="first", stateful=True)),
        Acl(AclSpec(rules=200, backend="iptables-legacy")),
        Acl(AclSpec(rules=200, backend="iptables-nft", layout="set")),
        Acl(AclSpec(rules=200, backend="iptables-legacy", layout="set")),
    ],
    ids=lambda a: (
        f"{a.spec.backend}-{a.spec.layout}-{a.spec.match}{'-stateful' if a.spec.stateful else ''}"
    ),
)
def test_acl_permits_measured_and_denies_unlisted(
    bed: tuple[Testbed, EchoServer], acl: Acl, tmp_path: Path
) -> None:
    tb, _ = bed
    dut, client = tb.host("dut"), tb.host("client")
    try:
        load(tb, acl, tmp_path)
        assert probe(client, SERVER, MEASURED) == "198.18.1.2"
        assert probe(client, SERVER, DATA, "udp") == "198.18.1.2"
        assert probe(client, SERVER, UNLISTED, timeout=0.5) is None
        assert probe(client, SERVER, UNLISTED, "udp", timeout=0.5) is None
    finally:
        reset_dut(dut, acl.backends())
    # reset really returns the DUT to plain forwarding
    assert probe(client, SERVER, UNLISTED) == "198.18.1.2"


def test_standard_acl_denies_an_unlisted_source(
    bed: tuple[Testbed, EchoServer], tmp_path: Path
) -> None:
    tb, _ = bed
    client = tb.host("client")
    # a second client-side address that the standard ACL does not list
    client.run(["ip", "addr", "add", "198.18.1.3/24", "dev", tb.ifname("client-dut", "client")])
    try:
        load(tb, Acl(AclSpec(rules=100, entries="standard")), tmp_path)
        assert probe(client, SERVER, UNLISTED) == "198.18.1.2"  # listed source, any port
        bind = (
            "import socket,sys;s=socket.socket();s.settimeout(0.5);"
            "s.bind(('198.18.1.3',0));s.connect(('198.18.2.2',7000))"
        )
        out = client.run(["python3", "-c", bind], check=False)
        assert out.returncode != 0
    finally:
        reset_dut(tb.host("dut"), {"nft"})
        client.run(["ip", "addr", "del", "198.18.1.3/24", "dev", tb.ifname("client-dut", "client")])


def test_custom_nft_file_is_loaded_and_a_bad_one_names_its_line(
    bed: tuple[Testbed, EchoServer], tmp_path: Path
) -> None:
    tb, _ = bed
    good = tmp_path / "good.nft"
    good.write_text(
        "table inet user {\n  chain forward {\n"
        "    type filter hook forward priority 0; policy accept;\n"
        "    tcp dport 7000 drop\n  }\n}\n"
    )
    custom = Custom(CustomSpec(file=good, format="nft"))
    custom.check(4)
    try:
        load(tb, custom, tmp_path / "files")
        assert probe(tb.host("client"), SERVER, UNLISTED, timeout=0.5) is None
        assert probe(tb.host("client"), SERVER, MEASURED) == "198.18.1.2"
    finally:
        reset_dut(tb.host("dut"), custom.backends())
    bad = tmp_path / "bad.nft"
    bad.write_text("table inet user {\n  chain forward {\n    tcp dporrt 7000 drop\n  }\n}\n")
    with pytest.raises(ScenarioError) as err:  # a bad rule file is bad input (exit 3)
        Custom(CustomSpec(file=bad, format="nft")).check(4)
    assert "bad.nft:3:" in str(err.value)


def test_custom_iptables_file_checked_with_its_own_parser(tmp_path: Path) -> None:
    bad = tmp_path / "bad.rules"
    bad.write_text(
        "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -p tcp --dportt 80 -j ACCEPT\nCOMMIT\n"
    )
    with pytest.raises(ScenarioError) as err:
        Custom(CustomSpec(file=bad, format="iptables", backend="iptables-nft")).check(4)
    assert "line 3" in str(err.value).lower() or "--dportt" in str(err.value)
