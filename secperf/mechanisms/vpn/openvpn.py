"""OpenVPN 2.6 between two tunnel ends, point to point, UDP or TCP, TLS or a static key.

End b is the TLS server (and, over TCP, the listening side); end a connects to
it. With `auth = "tls"` a CA, a server and a client certificate (EC P-256) are
made per run with openssl; the leaf certificates carry keyUsage and
extendedKeyUsage, so `--remote-cert-tls` checks that each side holds the other
kind of certificate. With `auth = "static"` one pre-shared key comes from
`openvpn --genkey secret`; static-key mode has no cipher negotiation and no
AEAD, so AES-GCM and ChaCha20-Poly1305 are refused there (the schema says so
first).

`cipher = "bf-cbc"` is Blowfish (128-bit key, CBC, HMAC-SHA256), the cipher of the
paper's CIPE and vpnd; OpenSSL 3 keeps it in its legacy provider, which the config
loads (`providers legacy default`).

`cipher = "none"` turns encryption and the data channel's HMAC off (`cipher
none`, `auth none`): the paper's "encryption off". Compression is lz4 or lzo
under `allow-compression yes` (OpenVPN refuses to compress otherwise; it warns,
rightly, that compression beside encryption leaks). Data-channel offload is off
(`disable-dco`): the data channel runs in the openvpn process, whose CPU the host's
cgroup counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from secperf.errors import MechanismError
from secperf.mechanisms.vpn.base import (
    DaemonTunnel,
    TunnelEnd,
    run_local,
    version_of,
    wait_for,
    write_private,
)
from secperf.mechanisms.vpn.spec import OPENVPN_AEAD
from secperf.tools import Tool

PORT = 1194
TOOLS = (
    Tool("openvpn", "openvpn", "vpn openvpn"),
    Tool("openssl", "openssl", "vpn openvpn (a CA and certificates per run)"),
)
CIPHERS = {
    "aes-256-gcm": "AES-256-GCM",
    "aes-128-gcm": "AES-128-GCM",
    "chacha20-poly1305": "CHACHA20-POLY1305",
    "aes-256-cbc": "AES-256-CBC",
    "bf-cbc": "BF-CBC",
    "none": "none",
}
# Ciphers with a separate HMAC (SHA-256) on the data channel, beside "none" the ones a
# static key can use; Blowfish (BF-CBC, OpenVPN's default before 2.5, 128-bit key) is in
# OpenSSL 3's legacy provider only, which OpenVPN loads when asked (`providers`).
CBC = ("aes-256-cbc", "bf-cbc")
LEGACY = ("bf-cbc",)
AEAD = OPENVPN_AEAD
COMPRESSION = ("none", "lz4", "lzo")
# The data channel's HMAC (`auth`) for the non-AEAD ciphers: by default SHA-256 with
# a CBC cipher and none with `cipher none` (the paper's "encryption off": no
# cryptography at all); `digest = "sha256"` beside `cipher = "none"` measures the MAC
# alone.
DIGESTS = {"sha256": "SHA256", "sha1": "SHA1", "none": "none"}
TRANSPORTS = ("udp", "tcp")
AUTHS = ("tls", "static")


def check_params(cipher: str, compression: str, transport: str, auth: str) -> None:
    if cipher not in CIPHERS:
        raise MechanismError(
            f"openvpn cipher {cipher!r} is not one secperf knows",
            fix=f"use one of {', '.join(CIPHERS)}",
        )
    if compression not in COMPRESSION:
        raise MechanismError(
            f"openvpn compression {compression!r} is not available",
            fix=f"use one of {', '.join(COMPRESSION)}",
        )
    if transport not in TRANSPORTS:
        raise MechanismError(f"openvpn transport {transport!r}", fix="use udp or tcp")
    if auth not in AUTHS:
        raise MechanismError(f"openvpn auth {auth!r}", fix="use tls or static")
    if auth == "static" and cipher in AEAD:
        raise MechanismError(
            f"openvpn static-key mode cannot use {cipher}: it has no AEAD ciphers "
            "(GCM, ChaCha20-Poly1305 need TLS mode's per-session keys and packet ids)",
            fix='use auth = "tls", or cipher = "aes-256-cbc", "bf-cbc" or "none" with a static key',
        )


def render_conf(
    vpn: OpenVpn, me: TunnelEnd, peer: TunnelEnd, device: str, files: dict[str, Path], server: bool
) -> str:
    fam = me.underlay_family
    lines = [
        f"# secperf openvpn: {me.name} ({'server' if server else 'client'}) -> {peer.name}",
        f"dev {device}",
        "dev-type tun",
        "disable-dco",
        f"ifconfig {me.ip4} {peer.ip4}",
    ]
    if me.inner6 and peer.ip6:
        lines.append(f"ifconfig-ipv6 {me.inner6} {peer.ip6}")
    if vpn.transport == "udp":
        lines += [
            f"proto udp{fam}",
            f"local {me.underlay}",
            f"lport {PORT}",
            f"remote {peer.underlay} {PORT}",
        ]
    elif server:
        lines += [f"proto tcp{fam}-server", f"local {me.underlay}", f"lport {PORT}"]
    else:
        lines += [
            f"proto tcp{fam}-client",
            f"remote {peer.underlay} {PORT}",
            "nobind",
            "connect-retry 1 1",
        ]
    if vpn.auth == "tls":
        lines += [
            "tls-server" if server else "tls-client",
            *(["dh none"] if server else []),
            f"ca {files['ca']}",
            f"cert {files['server_cert' if server else 'client_cert']}",
            f"key {files['server_key' if server else 'client_key']}",
            f"remote-cert-tls {'client' if server else 'server'}",
            f"data-ciphers {CIPHERS[vpn.cipher]}",
        ]
        if vpn.cipher == "none" or vpn.cipher in CBC:
            lines.append(f"data-ciphers-fallback {CIPHERS[vpn.cipher]}")
    else:
        lines += [f"secret {files['static']} {0 if server else 1}", f"cipher {CIPHERS[vpn.cipher]}"]
    if vpn.cipher in LEGACY:
        lines.append("providers legacy default")
    if vpn.cipher in AEAD:
        pass  # the AEAD's own tag authenticates; `auth` does not apply
    else:
        lines.append(f"auth {DIGESTS[vpn.digest]}")
    if vpn.compression != "none":
        lines += ["allow-compression yes", f"compress {vpn.compression}"]
    if vpn.socket_buffer is not None:
        lines += [f"sndbuf {vpn.socket_buffer}", f"rcvbuf {vpn.socket_buffer}"]
    lines += ["verb 3", "mute-replay-warnings"]
    return "\n".join(lines) + "\n"


def make_tls_files(files_dir: Path, name: str) -> dict[str, Path]:
    """A CA and a server and a client certificate (EC P-256, valid 2 days) for this run."""
    d = files_dir / f"{name}.openvpn-pki"
    d.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca_key, ca_crt = d / "ca.key", d / "ca.crt"
    run_local(
        ["openssl", "req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca_crt),
         "-days", "2", "-subj", f"/CN=secperf {name} CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        what="openssl (CA)",
    )  # fmt: skip
    out = {"ca": ca_crt}
    for role, eku in (("server", "serverAuth"), ("client", "clientAuth")):
        key, csr, crt, ext = (d / f"{role}.{x}" for x in ("key", "csr", "crt", "ext"))
        run_local(
            ["openssl", "req", *ec, "-keyout", str(key), "-out", str(csr),
             "-subj", f"/CN=secperf {name} {role}"],
            what=f"openssl ({role} key)",
        )  # fmt: skip
        ext.write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyAgreement\n"
            f"extendedKeyUsage={eku}\n"
        )
        run_local(
            ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey",
             str(ca_key), "-CAcreateserial", "-out", str(crt), "-days", "2",
             "-extfile", str(ext)],
            what=f"openssl ({role} certificate)",
        )  # fmt: skip
        key.chmod(0o600)
        out[f"{role}_key"], out[f"{role}_cert"] = key, crt
    ca_key.chmod(0o600)
    return out


class OpenVpn(DaemonTunnel):
    kind = "openvpn"
    TOOLS = TOOLS

    def __init__(
        self,
        cipher: str = "aes-256-gcm",
        compression: str = "none",
        transport: str = "udp",
        auth: str = "tls",
        socket_buffer: int | None = None,
        digest: str | None = None,
    ) -> None:
        check_params(cipher, compression, transport, auth)
        if digest is not None and cipher in AEAD:
            raise MechanismError(
                f"openvpn digest {digest!r} with {cipher}: an AEAD cipher authenticates with "
                "its own tag",
                fix="remove digest, or use a CBC cipher or none",
            )
        if digest is not None and digest not in DIGESTS:
            raise MechanismError(
                f"openvpn digest {digest!r}", fix=f"use one of {', '.join(DIGESTS)}"
            )
        super().__init__("openvpn")
        self.digest = digest or ("none" if cipher == "none" else "sha256")
        self.cipher, self.compression = cipher, compression
        self.transport, self.auth = transport, auth
        self.socket_buffer = socket_buffer
        self._confs: dict[str, Path] = {}
        self._logs: dict[str, Path] = {}

    def write(self, a: TunnelEnd, b: TunnelEnd, files_dir: Path, name: str) -> list[Path]:
        if self.auth == "tls":
            files = make_tls_files(files_dir, name)
        else:
            static = files_dir / f"{name}.openvpn-static.key"
            write_private(static, "")
            run_local(["openvpn", "--genkey", "secret", str(static)], what="openvpn --genkey")
            files = {"static": static}
        out = list(files.values())
        for end, peer, letter, server in ((a, b, "a", False), (b, a, "b", True)):
            dev = f"{name}{letter}"
            self._names[end.name] = dev
            conf = files_dir / f"{name}.{end.name}.openvpn.conf"
            conf.write_text(render_conf(self, end, peer, dev, files, server))
            self._confs[end.name] = conf
            out.append(conf)
        return out

    def launch(self, end: TunnelEnd, peer: TunnelEnd, server: bool) -> None:
        log = self.files / f"{self._names[end.name]}.openvpn.log"
        self._logs[end.name] = log
        self._ds.spawn(end, ["openvpn", "--config", str(self._confs[end.name])], log, "openvpn")

    def listener(self) -> tuple[int, str] | None:
        return (PORT, "tcp") if self.transport == "tcp" else None  # b listens over TCP

    def ready(self, a: TunnelEnd, b: TunnelEnd) -> None:
        # A static key passes packets before openvpn reports its data channel
        # (it does once it has heard its peer): wait for both reports.
        wait_for(
            lambda: set(self.data_channel()) == {a.name, b.name},
            self._ds,
            what="openvpn did not report its data channel on both ends",
            fix="read the daemons' logs above",
        )

    def describe(self) -> dict[str, Any]:
        return {
            "implementation": "openvpn",
            "version": version_of(["openvpn", "--version"], r"OpenVPN (\d[\w.]*)"),
            "backend": "user space (dco off)",
            "cipher": self.cipher,
            "data_auth": "aead" if self.cipher in AEAD else DIGESTS[self.digest],
            "mode": "tunnel",
            "transport": self.transport,
            "auth": self.auth,
            "compression": self.compression,
            "socket_buffer": self.socket_buffer,
            # What each end's data channel actually runs, in openvpn's own words.
            "data_channel": self.data_channel(),
        }

    def data_channel(self) -> dict[str, str]:
        """End name -> the last 'Data Channel: ...' line of its openvpn log."""
        out: dict[str, str] = {}
        for end, log in self._logs.items():
            try:
                text = log.read_text(errors="replace")
            except OSError:
                continue
            found = [ln.split("Data Channel: ", 1)[1] for ln in text.splitlines()
                     if "Data Channel: " in ln]  # fmt: skip
            if found:
                out[end] = found[-1].strip()
        return out
