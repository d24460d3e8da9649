"""Certificates made per run with the `openssl` CLI: a CA, and server keys and
certificates it signs, for HTTPS workloads (nginx) and the TLS-inspecting proxy.

Every file is written inside the given directory of the run, keys 0600 (the
umask is set for the openssl child, and each file is chmodded after). Keys are
RSA 2048 (what nginx, squid's certificate mimicking and every TLS 1.2 RSA suite
take); certificates are valid for two days. A server certificate names
SERVER_NAME (the engine sends it as SNI and checks it) and the server's
addresses.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from secperf.errors import SecperfError
from secperf.tools import find_program

SERVER_NAME = "server.secperf.test"
DAYS = "2"


class PkiError(SecperfError):
    """A certificate could not be made."""


@dataclass(frozen=True)
class Issued:
    """A certificate (PEM) and its private key (PEM, 0600)."""

    cert: Path
    key: Path


def _openssl(directory: Path, args: list[str]) -> None:
    binary = find_program(
        "openssl", purpose="HTTPS certificates are made with it", package="openssl"
    )
    out = subprocess.run(
        [binary, *args],
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        preexec_fn=lambda: os.umask(0o077),
    )
    if out.returncode != 0:
        raise PkiError(
            f"openssl {' '.join(args[:2])} failed: {(out.stderr or out.stdout).strip()[-400:]}",
            where=str(directory),
            fix="check that openssl works (`openssl version`) and the run directory is writable",
        )


def _private(*paths: Path) -> None:
    for p in paths:
        p.chmod(0o600)


def make_ca(directory: Path, name: str, common_name: str) -> Issued:
    """A self-signed CA `name`.pem / `name`.key in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = Issued(directory / f"{name}.pem", directory / f"{name}.key")
    _openssl(
        directory,
        [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", DAYS,
            "-subj", f"/O=secperf/CN={common_name}",
            "-keyout", ca.key.name, "-out", ca.cert.name,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ],
    )  # fmt: skip
    _private(ca.key, ca.cert)
    return ca


def issue(
    directory: Path, ca: Issued, name: str, addresses: list[str], dns_name: str = SERVER_NAME
) -> Issued:
    """A server certificate `name`.pem / `name`.key signed by `ca`, for `dns_name`
    and every address in `addresses`."""
    sans = [f"DNS:{dns_name}"]
    for a in addresses:
        sans.append(f"IP:{ipaddress.ip_address(a)}")
    ext = directory / f"{name}.ext"
    ext.write_text(
        f"subjectAltName={','.join(sans)}\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    out = Issued(directory / f"{name}.pem", directory / f"{name}.key")
    _openssl(
        directory,
        [
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/O=secperf/CN={dns_name}",
            "-keyout", out.key.name, "-out", f"{name}.csr",
        ],
    )  # fmt: skip
    _openssl(
        directory,
        [
            "x509", "-req", "-in", f"{name}.csr", "-CA", ca.cert.name, "-CAkey", ca.key.name,
            "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-days", DAYS,
            "-extfile", ext.name, "-out", out.cert.name,
        ],
    )  # fmt: skip
    _private(out.key, out.cert)
    return out
