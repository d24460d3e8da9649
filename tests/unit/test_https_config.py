"""HTTPS without root: the http kind's TLS keys, the certificates made per run, nginx's
TLS server block, and the tls_inspect mechanism's squid config and nft redirect."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from secperf.mechanisms.registry import MECHANISMS
from secperf.mechanisms.tls_inspect import (
    INTERCEPT_PORT,
    TlsInspectSpec,
    render_nft,
    render_squid,
)
from secperf.scenario.sweep import one_point
from secperf.services import pki
from secperf.services.nginx import (
    HTTPS_PORT,
    NGINX_CONNECTIONS,
    NGINX_FD_MARGIN,
    Nginx,
    render_config,
)
from secperf.workloads.base import engine_spec
from secperf.workloads.http import HttpWorkload


def http(**keys: object) -> HttpWorkload:
    point = one_point({"kind": "http", **keys})
    assert isinstance(point.spec, HttpWorkload)
    return point.spec


def test_tls_keys_need_tls_and_a_cipher_of_the_version() -> None:
    w = http(tls=True, tls_version="1.2", cipher="TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
    spec = engine_spec(w)
    assert spec["tls_version"] == "1.2" and spec["cipher"].startswith("TLS_ECDHE")
    assert "tls_version" not in engine_spec(http())
    with pytest.raises(ValidationError, match="set tls = true"):
        http(cipher="TLS13_AES_128_GCM_SHA256")
    with pytest.raises(ValidationError, match="set tls = true"):
        http(resumption=False)
    with pytest.raises(ValidationError, match=r"not a TLS 1\.2 suite"):
        http(tls=True, tls_version="1.2", cipher="TLS13_AES_128_GCM_SHA256")
    with pytest.raises(ValidationError):
        http(tls=True, tls_version="1.1")


def test_certificates_are_private_and_name_the_server(tmp_path: Path) -> None:
    ca = pki.make_ca(tmp_path, "ca", "test CA")
    srv = pki.issue(tmp_path, ca, "server", ["198.18.2.2"])
    for f in (ca.key, ca.cert, srv.key, srv.cert):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    text = subprocess.run(
        ["openssl", "x509", "-in", str(srv.cert), "-noout", "-text"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"DNS:{pki.SERVER_NAME}" in text and "IP Address:198.18.2.2" in text
    assert "CN = test CA" in text  # the issuer
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca.cert), str(srv.cert)],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stderr


def test_nginx_serves_https_only_with_certificates(tmp_path: Path) -> None:
    plain = render_config(tmp_path, 5380, ipv6=False, missing=set())
    assert "ssl" not in plain
    tls = pki.Issued(tmp_path / "s.pem", tmp_path / "s.key")
    conf = render_config(tmp_path, 5380, ipv6=True, missing=set(), tls=tls)
    assert f"listen {HTTPS_PORT} ssl" in conf and f"listen [::]:{HTTPS_PORT} ssl" in conf
    assert f"ssl_certificate {tls.cert.resolve()};" in conf
    assert "ssl_protocols TLSv1.2 TLSv1.3;" in conf
    assert "ssl_session_tickets on;" in conf and "ssl_session_cache shared:" in conf
    full = render_config(tmp_path, 5380, ipv6=False, missing=set(), tls=tls, tls_resumption=False)
    assert "ssl_session_tickets off;" in full and "ssl_session_cache off;" in full
    assert "ssl_session_tickets on;" not in full


def test_squid_bumps_or_splices(tmp_path: Path) -> None:
    own = tmp_path / "own"
    bump = render_squid(TlsInspectSpec(mode="bump"), tmp_path, own)
    splice = render_squid(TlsInspectSpec(mode="splice"), tmp_path, own)
    for conf in (bump, splice):
        assert f"https_port {INTERCEPT_PORT} intercept ssl-bump" in conf
        assert "ssl_bump peek step1" in conf
        assert f"tls-key={tmp_path.resolve()}/proxy-ca.key" in conf
        assert "cache deny all" in conf
        # squid writes only in its own folder, never in the run directory
        assert f"pid_filename {own}/squid.pid" in conf and f"-s {own}/ssl_db" in conf
        assert f"access_log stdio:{own}/access.log" in conf
    assert "ssl_bump stare step2" in bump and "ssl_bump bump all" in bump
    assert "ssl_bump splice all" in splice and "stare" not in splice and "bump all" not in splice
    nft = render_nft("secperf_x_tlsi")
    assert f"tcp dport {HTTPS_PORT} redirect to :{INTERCEPT_PORT}" in nft


def test_tls_inspect_is_a_registered_kind() -> None:
    kind = MECHANISMS.get("tls_inspect")
    assert kind.forwarding_only
    assert {t.package for t in kind.known_tools} >= {"squid-openssl"}
    with pytest.raises(ValidationError):
        TlsInspectSpec(mode="peek")  # type: ignore[arg-type]


class _Ran:
    def __init__(self, stdout: str) -> None:
        self.stdout = stdout


class _Host:
    """A host whose nginx master (pid 100) has one worker (101) with `limit` files."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit

    def run(self, argv: list[str], *, check: bool = True) -> _Ran:
        if argv[:2] == ["pgrep", "-P"]:
            return _Ran("101\n" if argv[2] == "100" and self.limit is not None else "")
        assert argv == ["cat", "/proc/101/limits"]
        return _Ran(
            "Limit                     Soft Limit           Hard Limit           Units\n"
            f"Max open files            {self.limit}     {self.limit}     files\n"
        )


class _Proc:
    pid = 100


def test_nginx_holds_what_its_workers_open_file_limit_allows(tmp_path: Path) -> None:
    def limit(files: int | None) -> int:
        server = Nginx(
            host=_Host(files),  # type: ignore[arg-type]
            directory=tmp_path,
            port=80,
            process=_Proc(),  # type: ignore[arg-type]
            address="198.18.2.2",
        )
        return server.connection_limit()

    # a worker that could not raise RLIMIT_NOFILE (no CAP_SYS_RESOURCE)
    assert limit(20_000) == 20_000 - NGINX_FD_MARGIN
    # one that could: its worker_connections
    assert limit(262_144) == NGINX_CONNECTIONS
    # none found (a lab host's nginx): as configured
    assert limit(None) == NGINX_CONNECTIONS
    conf = render_config(tmp_path, 80, ipv6=False, missing=set())
    assert f"worker_connections {NGINX_CONNECTIONS};" in conf
