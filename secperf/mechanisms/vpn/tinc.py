"""tinc 1.0 between two tunnel ends, in router mode over a TUN device.

Each end has a configuration directory in the run directory (tinc.conf, a
tinc-up script that gives the device its inner addresses, hosts/<end> for both
nodes with their addresses, subnets and RSA public keys). The RSA keys (2048
bits) are made per run with `tincd -K`. End a connects to end b.

`Cipher`, `Digest` and `Compression` are host settings in tinc 1.0: both host
files carry the same values, so both directions use them. Compression levels:
0 none, 1-9 zlib, 10 fast LZO, 11 best LZO (`compression = "lzo"` is 11,
`compression = "zlib"` is `compression_level`, default 6). `transport = "tcp"`
sets TCPOnly (packets ride the meta connection); the default is UDP, as tinc's.

Path MTU discovery is off and the device's MTU fixed at 1400: with discovery on,
tinc 1.0 sends every packet larger than the MTU it has confirmed so far through
the TCP meta connection, uncompressed, for the first seconds of a tunnel's life,
which is not the tunnel a measurement means to see.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from secperf.errors import MechanismError
from secperf.mechanisms.vpn.base import (
    DaemonTunnel,
    TunnelEnd,
    run_local,
    version_of,
)
from secperf.tools import Tool

PORT = 655
TOOLS = (Tool("tincd", "tinc", "vpn tinc"),)
CIPHERS = {
    "aes-256-cbc": "aes-256-cbc",
    "aes-128-cbc": "aes-128-cbc",
    "blowfish": "bf-cbc",
    "none": "none",
}
# Blowfish is in OpenSSL 3's legacy provider only: without it tincd 1.0 fails every
# UDP key exchange ("digital envelope routines::unsupported") and quietly carries the
# packets over its TCP meta connection instead. OPENSSL_CONF points it at this.
LEGACY = ("blowfish",)
OPENSSL_LEGACY_CONF = """openssl_conf = openssl_init
[openssl_init]
providers = provider_sect
[provider_sect]
default = default_sect
legacy = legacy_sect
[default_sect]
activate = 1
[legacy_sect]
activate = 1
"""
DIGESTS = {"sha256": "sha256", "sha1": "sha1", "none": "none"}
COMPRESSION = ("none", "zlib", "lzo")
LZO_BEST = 11
# Inner packets of at most 1400 bytes fit one 1500-byte underlay packet after tinc's
# overhead (UDP/IP 28-48, sequence number 4, CBC padding up to 16, digest up to 32).
DEVICE_MTU = 1400


def tinc_level(compression: str, level: int | None) -> int:
    if compression not in COMPRESSION:
        raise MechanismError(
            f"tinc compression {compression!r} is not available",
            fix=f"use one of {', '.join(COMPRESSION)}",
        )
    if compression == "none":
        return 0
    if compression == "lzo":
        return LZO_BEST
    level = 6 if level is None else level
    if not 1 <= level <= 9:
        raise MechanismError(f"tinc zlib level {level} is out of range", fix="use 1..9")
    return level


def node_name(end: TunnelEnd) -> str:
    """tinc node names are letters, digits and '_'."""
    return end.name.replace("-", "_")


def render_tinc_conf(
    me: TunnelEnd, peer: TunnelEnd, device: str, key: Path, tcp: bool, buffer: int | None = None
) -> str:
    lines = [
        f"# secperf tinc: {me.name} -> {peer.name}",
        f"Name = {node_name(me)}",
        f"Interface = {device}",
        "Mode = router",
        "DeviceType = tun",
        f"AddressFamily = ipv{me.underlay_family}",
        f"BindToAddress = {me.underlay} {PORT}",
        f"PrivateKeyFile = {key}",
    ]
    if tcp:
        lines.append("TCPOnly = yes")
    if buffer is not None:
        lines += [f"UDPRcvBuf = {buffer}", f"UDPSndBuf = {buffer}"]
    return "\n".join(lines) + "\n"


def render_host(end: TunnelEnd, peer: TunnelEnd, cipher: str, digest: str, level: int) -> str:
    """hosts/<end>: its address, the subnets behind it (what its peer routes to it), crypto."""
    subnets = [*end.host_prefixes(), *peer.routes]
    return (
        f"Address = {end.underlay} {PORT}\n"
        + "".join(f"Subnet = {s}\n" for s in subnets)
        + f"Cipher = {CIPHERS[cipher]}\nDigest = {DIGESTS[digest]}\nCompression = {level}\n"
        # Path MTU discovery sends every packet above the MTU found so far through the
        # TCP meta connection, uncompressed, until it ends: seconds of start-up traffic
        # unlike the steady state. A fixed device MTU (tinc-up) keeps packets on UDP.
        + "PMTUDiscovery = no\n"
    )


def render_up(end: TunnelEnd) -> str:
    lines = ["#!/bin/sh", "# tinc runs this once its device exists; $INTERFACE names it"]
    lines.append(f'ip addr add {end.inner4} dev "$INTERFACE"')
    if end.inner6:
        lines.append(f'ip addr add {end.inner6} dev "$INTERFACE"')
    lines.append(f'ip link set "$INTERFACE" mtu {DEVICE_MTU} up')
    return "\n".join(lines) + "\n"


class Tinc(DaemonTunnel):
    kind = "tinc"
    TOOLS = TOOLS

    def __init__(
        self,
        cipher: str = "aes-256-cbc",
        digest: str = "sha256",
        compression: str = "none",
        compression_level: int | None = None,
        transport: str = "udp",
        socket_buffer: int | None = None,
    ) -> None:
        if cipher not in CIPHERS:
            raise MechanismError(
                f"tinc cipher {cipher!r} is not one secperf knows",
                fix=f"use one of {', '.join(CIPHERS)}",
            )
        if digest not in DIGESTS:
            raise MechanismError(f"tinc digest {digest!r}", fix=f"use one of {', '.join(DIGESTS)}")
        if transport not in ("udp", "tcp"):
            raise MechanismError(f"tinc transport {transport!r}", fix="use udp or tcp")
        super().__init__("tincd")
        self.cipher, self.digest, self.transport = cipher, digest, transport
        self.compression = compression
        self.socket_buffer = socket_buffer
        self.level = tinc_level(compression, compression_level)
        self._dirs: dict[str, Path] = {}

    def write(self, a: TunnelEnd, b: TunnelEnd, files_dir: Path, name: str) -> list[Path]:
        out = []
        for end, peer, letter in ((a, b, "a"), (b, a, "b")):
            d = files_dir / f"{name}.{end.name}.tinc"
            if d.exists():
                shutil.rmtree(d)
            (d / "hosts").mkdir(parents=True)
            dev = f"{name}{letter}"
            self._names[end.name] = dev
            self._dirs[end.name] = d
            key = d / "rsa_key.priv"
            conf = render_tinc_conf(
                end, peer, dev, key, self.transport == "tcp", self.socket_buffer
            )
            if end is a:
                conf += f"ConnectTo = {node_name(b)}\n"
            (d / "tinc.conf").write_text(conf)
            if self.cipher in LEGACY:
                (d / "openssl.cnf").write_text(OPENSSL_LEGACY_CONF)
                out.append(d / "openssl.cnf")
            up = d / "tinc-up"
            up.write_text(render_up(end))
            up.chmod(0o755)
            host = d / "hosts" / node_name(end)
            host.write_text(render_host(end, peer, self.cipher, self.digest, self.level))
            # -K appends the public key to hosts/<Name>; stdin closed: no questions asked.
            run_local(["tincd", "-c", str(d), "-K", "2048"], what="tincd -K", input="")
            key.chmod(0o600)
            out += [d / "tinc.conf", up, host]
        for end, peer in ((a, b), (b, a)):
            src = self._dirs[peer.name] / "hosts" / node_name(peer)
            shutil.copy(src, self._dirs[end.name] / "hosts" / node_name(peer))
        return out

    def launch(self, end: TunnelEnd, peer: TunnelEnd, server: bool) -> None:
        d = self._dirs[end.name]
        argv = ["tincd", "-c", str(d), "-D", "-d", "1", f"--pidfile={d / 'tincd.pid'}"]
        if self.cipher in LEGACY:
            argv = ["env", f"OPENSSL_CONF={d / 'openssl.cnf'}", *argv]
        self._ds.spawn(end, argv, self.files / f"{self._names[end.name]}.tincd.log", "tincd")

    def listener(self) -> tuple[int, str]:
        return (PORT, "tcp")  # a connects to b's meta connection

    def describe(self) -> dict[str, Any]:
        return {
            "implementation": "tinc",
            "version": version_of(["tincd", "--version"], r"tinc version (\S+)"),
            "backend": "user space",
            "cipher": self.cipher,
            "digest": self.digest,
            "mode": "tunnel (router)",
            "transport": "tcp (TCPOnly)" if self.transport == "tcp" else "udp",
            "auth": "rsa 2048 keys (per run)",
            "compression": self.compression,
            "compression_level": self.level,
            "socket_buffer": self.socket_buffer,
        }
