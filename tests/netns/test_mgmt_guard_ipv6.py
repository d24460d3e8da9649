"""The management guard passes IPv6 neighbour discovery (issue 41): on a host managed over
IPv6, a guarded rule set with `policy drop` on input and output still lets the host and
the controller find each other's link-layer address, so the session survives its
neighbour entry's expiry. Here the dut is the lab host, the client the controller, and a
listener on the dut stands for sshd."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.testbed.hosts.mgmt_guard import Management, guard_nft
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology

pytestmark = pytest.mark.netns

PORT = 2222
DROP_ALL = """\
table inet secperf_guardtest {
  chain input { type filter hook input priority 0; policy drop; }
  chain output { type filter hook output priority 0; policy drop; }
}
"""


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[Testbed]:
    with Testbed.build(Topology.standard(), state_dir=tmp_path / "state") as tb:
        yield tb


def _connects(tb: Testbed, address: str) -> bool:
    probe = textwrap.dedent(
        f"""
        import socket, sys
        s = socket.socket(socket.AF_INET6)
        s.settimeout(3)
        sys.exit(s.connect_ex(({address!r}, {PORT})))
        """
    )
    return tb.host("client").run(["python3", "-c", probe], check=False).returncode == 0


def test_a_guarded_drop_policy_keeps_neighbour_discovery_for_an_ipv6_session(
    bed: Testbed,
) -> None:
    link = bed.topology.link_between("client", "dut")
    assert link is not None
    controller = bed.topology.address("client", link.name, 6)
    host = bed.topology.address("dut", link.name, 6)
    mgmt = Management.parse(f"{controller} 40000 {host} {PORT}")
    assert mgmt is not None and mgmt.family == 6
    dut = bed.host("dut")
    listener = dut.spawn(
        ["python3", "-c", f"import socket,time\ns=socket.socket(socket.AF_INET6)\n"
         f"s.bind(('{host}', {PORT}))\ns.listen(64)\nwhile True: s.accept()[0].close()"],
        label="fake-sshd",
    )  # fmt: skip
    try:
        assert _connects(bed, host) or _connects(bed, host)  # up (the first may race)
        dut.run(["nft", "-f", "-"], input=guard_nft(DROP_ALL, mgmt))
        # Both neighbour caches forgotten: the next packet needs a solicitation answered.
        for name in ("client", "dut"):
            bed.host(name).run(["ip", "-6", "neigh", "flush", "all"])
        assert _connects(bed, host), "the guarded host no longer answers neighbour discovery"
    finally:
        dut.run(["nft", "delete", "table", "inet", "secperf_guardtest"], check=False)
        listener.stop()
