"""nginx's workers and dnsmasq run as unprivileged users (issue 41), and still read their
files: the web root and dnsmasq's hosts file live in a folder of root's under
/run/secperf-daemons (services/privdrop.py), so a run directory private to root (as
/root is) stays closed, and no directory of the run changes hands."""

from __future__ import annotations

import hashlib
import pwd
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from secperf.services import dns
from secperf.services.nginx import NGINX_USER, file_name, start_nginx
from secperf.testbed.hosts import Host
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with Testbed.build(Topology.standard(), state_dir=tmp_path_factory.mktemp("state")) as bed:
        yield bed


def _private(tmp_path: Path) -> Path:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    return private


def _uids(host: Host, pids: list[str]) -> set[int]:
    uids = set()
    for pid in pids:
        status = host.run(["cat", f"/proc/{pid}/status"], check=False).stdout
        uids |= {int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:")}
    return uids


def modes(path: Path) -> dict[Path, tuple[int, int, int]]:
    return {p: (p.stat().st_uid, p.stat().st_gid, p.stat().st_mode) for p in [path, *path.parents]}


def test_nginx_workers_run_unprivileged_and_serve_from_a_private_run_dir(
    tb: Testbed, tmp_path: Path
) -> None:
    directory = _private(tmp_path) / "run" / "nginx"
    directory.mkdir(parents=True)
    before = modes(directory)
    server_host = tb.host("server")
    address = tb.topology.primary_address("server")
    server = start_nginx(server_host, directory, address)
    try:
        server.serve([4096])
        workers = server_host.run(["pgrep", "-P", str(server.process.pid)]).stdout.split()
        assert workers and _uids(server_host, workers) == {pwd.getpwnam(NGINX_USER).pw_uid}
        url = f"http://{address}:{server.port}/files/{file_name(4096)}"
        got = tb.host("client").run(
            ["python3", "-c", f"import urllib.request,hashlib;print(hashlib.sha256("
             f"urllib.request.urlopen({url!r}, timeout=5).read()).hexdigest())"],
            timeout=20,
        ).stdout.strip()  # fmt: skip
        assert got == hashlib.sha256(random.Random(4096).randbytes(4096)).hexdigest()
        assert modes(directory) == before
        assert server.own is not None and server.own.stat().st_uid == 0
    finally:
        server.stop()
    assert server.own is not None and not server.own.exists()


def test_dnsmasq_runs_unprivileged_and_reads_its_hosts(tb: Testbed, tmp_path: Path) -> None:
    directory = _private(tmp_path) / "dns"
    host = tb.host("server")
    where = tb.topology.primary_address("server")
    server = dns.start_dns(host, directory, where, tb.topology)
    try:
        assert _uids(host, [str(server.process.pid)]) == {pwd.getpwnam(dns.DNS_USER).pw_uid}
        client = tb.host("client")
        addr = tb.topology.primary_address("client")
        assert dns.query(client, where, addr, "PTR") == [f"client.{dns.DOMAIN}"]
        assert server.queries("PTR") >= 1
        own = server.own
        assert own is not None and own.stat().st_uid == 0 and not own.stat().st_mode & 0o022
    finally:
        server.stop()
    assert not own.exists()
    assert "query[PTR]" in (directory / "queries.log").read_text()
    assert (directory / "queries.log").stat().st_uid == 0
