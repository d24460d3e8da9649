"""HTTPS in real namespaces: nginx serving TLS with certificates made for the run
(keys 0600), the engine's rustls client through the DUT (TLS 1.2 and 1.3, a new
handshake a fetch or keep-alive, resumption), and the tls_inspect mechanism on the
DUT: with `bump` the client sees a certificate issued by the run's proxy CA and
squid logs the URL path; with `splice` the client sees the server's own
certificate and squid logs no path."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from secperf.engine import CONTROL_PORT, Record
from secperf.mechanisms.base import MechanismContext, reset_dut, traffic_plan
from secperf.mechanisms.squid import folder as squid_folder
from secperf.mechanisms.tls_inspect import TlsInspect, TlsInspectSpec, service_name
from secperf.scenario.sweep import one_point
from secperf.services import pki
from secperf.services.nginx import HTTPS_PORT
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads import http
from secperf.workloads.base import MeasureContext
from secperf.workloads.parts import http as http_parts

pytestmark = pytest.mark.netns

SERVER = "198.18.2.2"
FILE = 4096


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, Path]]:
    files = tmp_path_factory.mktemp("files")
    with Testbed.build(Topology.standard(), state_dir=tmp_path_factory.mktemp("state")) as tb:
        try:
            yield tb, files
        finally:
            http_parts.forget(tb.prefix)


def measure(
    tb: Testbed,
    files: Path,
    mechanisms: list[tuple[Any, MechanismContext]] | None = None,
    **keys: Any,
) -> Record:
    ctx = MeasureContext.on(tb, f"{SERVER}:{CONTROL_PORT}", mechanisms=mechanisms)
    ctx.extra["files_dir"] = files
    table = {
        "kind": "http",
        "files": [FILE],
        "rate": 20,
        "parallel": 4,
        "duration": 1.0,
        "warmup": 0.0,
        "tls": True,
        **keys,
    }
    return http.HttpExecutor().measure(ctx, one_point(table))


def issuer_seen(tb: Testbed, ca: Path) -> str:
    """The issuer of the certificate the client host is shown at SERVER:HTTPS_PORT."""
    out = tb.host("client").run(
        [
            "sh",
            "-c",
            f"openssl s_client -connect {SERVER}:{HTTPS_PORT} -servername {pki.SERVER_NAME} "
            f"-CAfile {ca} </dev/null 2>/dev/null | openssl x509 -noout -issuer",
        ],
        check=False,
        timeout=20,
    )
    assert out.returncode == 0, out.stderr
    return str(out.stdout)


def test_https_through_the_dut_with_run_certificates(bed: tuple[Testbed, Path]) -> None:
    tb, files = bed
    r = measure(tb, files)
    assert r["fetches"] == 20 and r["failed"] == 0, r
    assert r["bytes"] == 20 * FILE
    assert r["handshakes"] == 20 and r["latency_us"]["handshake"]["count"] == 20, r
    assert r["resumed"] >= 10, r  # nginx's session cache and tickets
    # Certificates of the run, keys private.
    pkidir = files / "web" / "server" / "pki"
    for key in ("server-ca.key", "server.key"):
        assert stat.S_IMODE((pkidir / key).stat().st_mode) == 0o600
    assert "secperf server CA" in issuer_seen(tb, pkidir / "server-ca.pem")
    # TLS 1.2 with one suite and group, keep-alive, no resumption.
    r12 = measure(
        tb,
        files,
        tls_version="1.2",
        cipher="TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        groups=["secp384r1"],
        resumption=False,
        keepalive=True,
    )
    assert r12["fetches"] == 20 and r12["failed"] == 0, r12
    assert r12["resumed"] == 0 and 1 <= r12["handshakes"] <= 4, r12


def inspect(tb: Testbed, tmp_path: Path, mode: str) -> tuple[TlsInspect, MechanismContext]:
    mech = TlsInspect(TlsInspectSpec(mode=mode))  # type: ignore[arg-type]
    ctx = MechanismContext(
        plan=traffic_plan(tb.topology, 4),
        files_dir=tmp_path / "mech",
        name=f"tlsi.{mode}",
        table=f"secperf_{tb.prefix}",
        hosts=("dut",),
        hook="forward",
        topology=tb.topology,
    )
    ctx.rendered = mech.render(ctx)
    mech.apply(tb.host("dut"), ctx)
    return mech, ctx


@pytest.mark.parametrize("mode", ["bump", "splice"])
def test_tls_inspect_bump_and_splice(bed: tuple[Testbed, Path], tmp_path: Path, mode: str) -> None:
    tb, files = bed
    measure(tb, files, rate=5)  # nginx up, its certificates made
    mech, ctx = inspect(tb, tmp_path, mode)
    proxy_ca = mech.trusted_ca(ctx)
    assert proxy_ca is not None
    assert stat.S_IMODE((proxy_ca.parent / "proxy-ca.key").stat().st_mode) == 0o600
    try:
        r = measure(tb, files, mechanisms=[(mech, ctx)])
        assert r["fetches"] == 20 and r["failed"] == 0, str(
            (r["errors"], r["started"], r["failed"], r["latency_us"])
        )
        assert r["bytes"] == 20 * FILE
        seen = issuer_seen(tb, files / "web" / "server" / "pki" / "server-ca.pem")
        # squid writes in its own folder (secperf.mechanisms.squid) while it runs
        log = (squid_folder(service_name(ctx)) / "access.log").read_text()
        cost = mech.observe()
        # CPU comes in 10 ms ticks: 20 spliced connections may take less than one.
        assert cost is not None and cost["cpu_seconds"] >= 0 and cost["memory_bytes"] > 0, cost
        assert cost["logged"] >= 20, cost
        if mode == "bump":
            assert "secperf inspecting proxy CA" in seen, seen
            assert f"/files/{FILE}.bin" in log, log[-2000:]
            # 20 certificates mimicked and 40 handshakes: well above one tick.
            assert cost["cpu_seconds"] > 0 and cost["cpu_us_per_logged"] > 0, cost
        else:
            assert "secperf server CA" in seen, seen
            assert "/files/" not in log, log[-2000:]
    finally:
        mech.release(tb.host("dut"), ctx)
        reset_dut(tb.host("dut"), {"nft"})
    assert (proxy_ca.parent / "access.log").is_file()  # brought back when squid stopped
    # Without the proxy the client sees the server's certificate again.
    assert "secperf server CA" in issuer_seen(
        tb, files / "web" / "server" / "pki" / "server-ca.pem"
    )


def test_untrusted_proxy_ca_fails_the_fetches(bed: tuple[Testbed, Path], tmp_path: Path) -> None:
    """Bumping with a CA the client does not trust: every fetch fails as tls."""
    tb, files = bed
    measure(tb, files, rate=5)
    mech, ctx = inspect(tb, tmp_path, "bump")
    try:
        r = measure(tb, files)  # the mechanism not passed: its CA is not trusted
        assert r["fetches"] == 0 and r["errors"]["tls"] == 20, r
    finally:
        mech.release(tb.host("dut"), ctx)
        reset_dut(tb.host("dut"), {"nft"})
