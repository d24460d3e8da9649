"""The proxy mechanism in real namespaces: HTTP and FTP through squid and ftp-proxy on
the DUT (the server sees the DUT's address, the proxy logs the request), a request
the proxy's rules deny fails, reverse look-ups reach the testbed's DNS server only
when they are on, and the cpus/memory switches put the proxies in cgroups."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.mechanisms.proxy import DNS_ADDRESS, Proxy, ProxySpec
from secperf.mechanisms.proxy.config import service_name
from secperf.mechanisms.squid import shm_paths
from secperf.services import dns
from secperf.services.nginx import HTTP_PORT, write_files
from secperf.services.vsftpd import FTP_PORT, Vsftpd, file_url, start_vsftpd
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology

pytestmark = pytest.mark.netns

SIZE = 20_000


def two_zones() -> Topology:
    return Topology.zoned({"inside": (1, 1), "dmz": (1, 1)})


@dataclass
class Bed:
    tb: Testbed
    web_log: Path
    ftp: Vsftpd
    server: str
    dut_dmz: str
    client: str


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    root = tmp_path_factory.mktemp("servers")
    with Testbed.build(two_zones(), state_dir=tmp_path_factory.mktemp("state")) as tb:
        topo = tb.topology
        server = topo.primary_address("dmz-s1")
        # A web server that logs each client's address: python's http.server.
        write_files(root / "www", [SIZE])
        web_log = root / "web.log"
        with web_log.open("w") as log:
            tb.host("dmz-s1").spawn(
                [
                    "python3",
                    "-m",
                    "http.server",
                    str(HTTP_PORT),
                    "--bind",
                    server,
                    "--directory",
                    str(root / "www"),
                ],
                stderr=log,
                label="http.server",
            )
        ftp = start_vsftpd(tb.host("dmz-s1"), root / "ftp", server)
        ftp.serve([SIZE])
        link = topo.link_between("dut", "dmz-sw")
        assert link is not None
        yield Bed(
            tb,
            web_log,
            ftp,
            server,
            topo.address("dut", link.name),
            topo.primary_address("inside-c1"),
        )


def context(bed: Bed, tmp_path: Path) -> MechanismContext:
    topo = bed.tb.topology
    return MechanismContext(
        plan=traffic_plan(topo, 4, "inside-c1", "dmz-s1"),
        files_dir=tmp_path / "files",
        name="proxy.0",
        table=f"secperf_{bed.tb.prefix}",
        hosts=("dut",),
        hook="forward",
        topology=topo,
    )


@pytest.fixture
def applied(
    bed: Bed, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Proxy, MechanismContext]]:
    proxy: Proxy = request.param
    ctx = context(bed, tmp_path)
    ctx.rendered = proxy.render(ctx)
    dut = bed.tb.host("dut")
    proxy.apply(dut, ctx)
    # squid's shared memory lives outside the namespace, under this run's name.
    assert any(p.exists() for p in shm_paths(service_name(ctx)))
    try:
        yield proxy, ctx
    finally:
        proxy.release(dut, ctx)
        reset_dut(dut, proxy.backends())
    assert not proxy.daemons()
    assert not any(p.exists() for p in shm_paths(service_name(ctx)))


def fetch(bed: Bed, url: str) -> subprocess.CompletedProcess[str]:
    return bed.tb.host("inside-c1").run(
        ["sh", "-c", f"curl -sS -f --max-time 10 {url} | sha256sum"], check=False, timeout=30
    )


def expected_digest() -> str:
    return hashlib.sha256(random.Random(SIZE).randbytes(SIZE)).hexdigest()


@pytest.mark.parametrize("applied", [Proxy(ProxySpec(rules=100, match="last"))], indirect=True)
def test_http_and_ftp_go_through_the_proxy(
    bed: Bed, applied: tuple[Proxy, MechanismContext]
) -> None:
    _, ctx = applied
    d = Proxy.directory(ctx)
    url = f"http://{bed.server}:{HTTP_PORT}/files/{SIZE}.bin"
    out = fetch(bed, url)
    assert out.stdout.split()[0] == expected_digest()
    # The server saw the proxy's (the DUT's) address, not the client's.
    web = bed.web_log.read_text()
    assert f"{bed.dut_dmz} - -" in web and f"{bed.client} - -" not in web
    # squid's access log (in its own folder while it runs) names the client and the URL.
    access = (Proxy.squid_dir(ctx) / "access.log").read_text()
    assert bed.client in access and url in access
    # FTP: the same file through ftp-proxy; vsftpd logs the DUT as its client.
    before = bed.ftp.log()
    out = fetch(bed, file_url(bed.server, SIZE))
    assert out.stdout.split()[0] == expected_digest()
    new = bed.ftp.log()[len(before) :]
    assert "OK DOWNLOAD" in new and bed.dut_dmz in new and bed.client not in new
    # ftp-proxy logged the intercepted connection, from the client, to the server.
    proxied = (d / "ftp-proxy.log").read_text()
    assert f"transparent proxy request to {bed.server}:{FTP_PORT} from {bed.client}" in proxied


@pytest.mark.parametrize(
    "applied", [Proxy(ProxySpec(rules=4, match="first", deny=[]))], indirect=True
)
def test_a_request_the_rules_deny_fails(
    bed: Bed, applied: tuple[Proxy, MechanismContext], tmp_path: Path
) -> None:
    proxy, ctx = applied
    dut = bed.tb.host("dut")
    url = f"http://{bed.server}:{HTTP_PORT}/files/{SIZE}.bin"
    assert fetch(bed, url).stdout.split()[0] == expected_digest()
    # Same proxy, now refusing the server: the fetch fails with the proxy's 403.
    proxy.release(dut, ctx)
    reset_dut(dut, proxy.backends())
    denying = Proxy(ProxySpec(rules=4, match="first", deny=[bed.server]))
    ctx2 = context(bed, tmp_path / "deny")
    ctx2.rendered = denying.render(ctx2)
    denying.apply(dut, ctx2)
    try:
        code = bed.tb.host("inside-c1").run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", url],
            check=False,
        )
        assert code.stdout.strip() == "403"
        assert "TCP_DENIED/403" in (Proxy.squid_dir(ctx2) / "access.log").read_text()
    finally:
        denying.release(dut, ctx2)
        reset_dut(dut, denying.backends())
    proxy.apply(dut, ctx)  # the fixture releases it


@pytest.mark.parametrize("applied", [Proxy(ProxySpec(dns_lookups=True))], indirect=True)
def test_dns_lookups_on_reach_the_dns_server(
    bed: Bed, applied: tuple[Proxy, MechanismContext]
) -> None:
    proxy, _ = applied
    assert proxy.dns_server is not None
    reverse = dns.reverse_name(bed.client)
    assert reverse not in proxy.dns_server.log()
    before = proxy.dns_server.queries("PTR")
    for _ in range(3):
        out = fetch(bed, f"http://{bed.server}:{HTTP_PORT}/files/{SIZE}.bin")
        assert out.stdout.split()[0] == expected_digest()
    # squid asked for the client's name (it keeps an answer for the record's TTL,
    # 0 s from dnsmasq: look-ups within one second may share one).
    assert proxy.dns_server.queries("PTR") > before
    assert dns.reverse_name(bed.client) in proxy.dns_server.log()


@pytest.mark.parametrize(
    "applied",
    [Proxy(ProxySpec(dns_lookups=False, cache=False, logging="off", cpus=1, memory=128 * 2**20))],
    indirect=True,
)
def test_dns_off_asks_nobody_and_limits_hold(
    bed: Bed, applied: tuple[Proxy, MechanismContext], tmp_path: Path
) -> None:
    proxy, ctx = applied
    dut = bed.tb.host("dut")
    # The same DNS server where squid would ask: it must hear nothing.
    server = dns.start_dns(dut, tmp_path / "dns", DNS_ADDRESS, bed.tb.topology)
    try:
        before = server.queries()
        for _ in range(3):
            out = fetch(bed, f"http://{bed.server}:{HTTP_PORT}/files/{SIZE}.bin")
            assert out.stdout.split()[0] == expected_digest()
        assert server.queries() == before
    finally:
        server.stop()
    assert not (Proxy.squid_dir(ctx) / "access.log").exists()
    # Both proxies run in the limit groups: one CPU, 128 MiB.
    limits = proxy._limits
    assert limits is not None and len(limits.dirs) == 2
    cpuset, memory = limits.dirs
    assert (cpuset / "cpuset.cpus").read_text().strip() == str(sorted(os.sched_getaffinity(0))[0])
    assert int((memory / "memory.limit_in_bytes").read_text()) == 128 * 2**20
    pids = {int(p) for p in (cpuset / "cgroup.procs").read_text().split()}
    assert {p.pid for p in proxy.daemons()} <= pids


@pytest.mark.parametrize(
    "applied",
    [Proxy(ProxySpec(rules=100, rule_cache=True, cache=False)), Proxy(ProxySpec(rule_cache=False))],
    indirect=True,
)
def test_the_rule_helper_admits_http_and_ftp_walks_the_rule_chain(
    bed: Bed, applied: tuple[Proxy, MechanismContext]
) -> None:
    proxy, ctx = applied
    out = fetch(bed, f"http://{bed.server}:{HTTP_PORT}/files/{SIZE}.bin")
    assert out.stdout.split()[0] == expected_digest()
    # squid asked its external ACL helper: the helper processes run in the DUT.
    ps = bed.tb.host("dut").run(["ps", "-eo", "args"], check=True).stdout
    assert "rule_helper.py" in ps
    out = fetch(bed, file_url(bed.server, SIZE))
    assert out.stdout.split()[0] == expected_digest()
    # FTP's packets went through the same rule base, an nft chain of N rules and a drop.
    chain = bed.tb.host("dut").run(
        ["nft", "list", "chain", "ip", f"{ctx.table}_proxy", "ftp_rules"], check=True
    )
    walked = [ln for ln in chain.stdout.splitlines() if "accept" in ln or "drop" in ln]
    assert len(walked) == proxy.spec.rules + 1
