"""The proxy study's servers in real namespaces: vsftpd serves a file over passive
FTP to a client across the DUT, and dnsmasq answers forward and PTR records for
every host of a two-zone graph."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.services import dns
from secperf.services.vsftpd import file_url, start_vsftpd
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology

pytestmark = pytest.mark.netns


def two_zones() -> Topology:
    return Topology.zoned({"inside": (1, 1), "dmz": (1, 1)})


@pytest.fixture(scope="module")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with Testbed.build(two_zones(), state_dir=tmp_path_factory.mktemp("state")) as tb:
        yield tb


def test_ftp_fetch_across_the_dut_gets_the_files_bytes(testbed: Testbed, tmp_path: Path) -> None:
    topo = testbed.topology
    addr = topo.primary_address("dmz-s1")
    server = start_vsftpd(testbed.host("dmz-s1"), tmp_path / "ftp", addr)
    try:
        server.serve([65536])
        url = file_url(addr, 65536)
        expected = random.Random(65536).randbytes(65536)
        assert (server.root / "files" / "65536.bin").read_bytes() == expected
        digest = testbed.host("inside-c1").run(
            ["sh", "-c", f"curl -sS --max-time 10 --ftp-pasv {url} | sha256sum"], timeout=20
        )
        assert digest.stdout.split()[0] == hashlib.sha256(expected).hexdigest()
        # The server logged the transfer, from the client's own address (routed, no proxy).
        log = server.log()
        assert "OK DOWNLOAD" in log and topo.primary_address("inside-c1") in log
        # And a file that is not there fails.
        missing = testbed.host("inside-c1").run(
            ["curl", "-sS", "--max-time", "10", "-o", "/dev/null", file_url(addr, 7)],
            check=False,
            timeout=20,
        )
        assert missing.returncode != 0
    finally:
        server.stop()
    assert not server.alive()


def test_dns_answers_forward_and_ptr_for_every_host(testbed: Testbed, tmp_path: Path) -> None:
    topo = testbed.topology
    where = topo.primary_address("dmz-s1")
    server = dns.start_dns(testbed.host("dmz-s1"), tmp_path / "dns", where, topo)
    try:
        client = testbed.host("inside-c1")
        before = server.queries("PTR")
        for name in ("inside-c1", "dmz-c1", "dut"):
            addr = topo.primary_address(name)
            assert dns.query(client, where, addr, "PTR") == [f"{name}.{dns.DOMAIN}"]
        assert dns.query(client, where, f"inside-s1.{dns.DOMAIN}") == [
            topo.primary_address("inside-s1")
        ]
        # Each look-up reached the server and is in its log.
        assert server.queries("PTR") == before + 3
        # A name outside the testbed gets no answer data (no upstream resolver).
        assert dns.query(client, where, "example.com") == []
    finally:
        server.stop()
