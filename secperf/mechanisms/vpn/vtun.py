"""vtun 3.0 between two tunnel ends: end b runs the server (`vtund -s`), end a the client.

One session with a password made per run, a TUN device named by secperf, its
address set by vtund's `up` block with `ip`. `encrypt` is `no` or aes128ecb
(`cipher = "aes-128-ecb"`); `compress` is lzo or zlib at a level (default 9).

Refused, with the reason: Blowfish (vtun's `encrypt yes` and the blowfish*
ciphers: vtund 3.0.4 segfaults with them here) and aes256cbc (the tunnel dies
under load); found on this machine (docs/studies/003.md. Inner
IPv6 is refused too, and so is an IPv6 underlay (vtund's parser rejects an IPv6
`bindaddr`): vtund's TUN device only works with IPv6 off on it (with
IPv6 on, the kernel's own router solicitations make vtund fail with EIO), so
start() sets `net.ipv6.conf.default.disable_ipv6 = 1` in both hosts while the
tunnel runs (new devices only: the hosts' links keep IPv6) and stop() restores
the old value. Each vtund gets its own /run (pid files at compiled-in paths).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from secperf.errors import MechanismError
from secperf.mechanisms.vpn.base import (
    PRIVATE_RUN,
    DaemonTunnel,
    TunnelEnd,
    version_of,
    write_private,
)
from secperf.tools import Tool

PORT = 5000
TOOLS = (
    Tool("vtund", "vtun", "vpn vtun"),
    Tool("unshare", "util-linux", "vpn vtun (a private /run per vtund)"),
)
SESSION = "secperf"
CIPHERS = {"none": "no", "aes-128-ecb": "aes128ecb"}
REFUSED = {
    "blowfish": "vtund 3.0.4 segfaults with Blowfish (its `encrypt yes`) on this machine",
    "aes-256-cbc": "vtun's aes256cbc tunnel dies under load on this machine",
}
COMPRESSION = ("none", "lzo", "zlib")
DISABLE_V6 = "net.ipv6.conf.default.disable_ipv6"


def check_params(cipher: str, compression: str, transport: str) -> None:
    if cipher in REFUSED:
        raise MechanismError(
            f"vtun cipher {cipher!r} is refused: {REFUSED[cipher]}",
            fix='use cipher = "aes-128-ecb" or "none" with vtun',
        )
    if cipher not in CIPHERS:
        raise MechanismError(
            f"vtun cipher {cipher!r} is not one secperf runs",
            fix=f"use one of {', '.join(CIPHERS)}",
        )
    if compression not in COMPRESSION:
        raise MechanismError(
            f"vtun compression {compression!r} is not available",
            fix=f"use one of {', '.join(COMPRESSION)}",
        )
    if transport not in ("udp", "tcp"):
        raise MechanismError(f"vtun transport {transport!r}", fix="use udp or tcp")


def render_conf(vpn: Vtun, me: TunnelEnd, device: str, password: str, server: bool) -> str:
    compress = "no" if vpn.compression == "none" else f"{vpn.compression}:{vpn.level}"
    bind = f"  bindaddr {{ addr {me.underlay}; }};\n" if server else ""
    return (
        f"# secperf vtun: {me.name} ({'server' if server else 'client'})\n"
        "options {\n"
        f"  port {PORT};\n"
        f"{bind}"
        "  ip /sbin/ip;\n"
        "  timeout 10;\n"
        "}\n"
        f"{SESSION} {{\n"
        f"  passwd {password};\n"
        "  type tun;\n"
        f"  proto {vpn.transport};\n"
        f"  encrypt {CIPHERS[vpn.cipher]};\n"
        f"  compress {compress};\n"
        "  keepalive yes;\n"
        "  stat no;\n"
        "  persist no;\n"
        f"  device {device};\n"
        "  up {\n"
        f'    ip "addr add {me.inner4} dev %%";\n'
        '    ip "link set %% up";\n'
        "  };\n"
        "}\n"
    )


class Vtun(DaemonTunnel):
    kind = "vtun"
    TOOLS = TOOLS

    def __init__(
        self,
        cipher: str = "aes-128-ecb",
        compression: str = "none",
        compression_level: int | None = None,
        transport: str = "udp",
    ) -> None:
        check_params(cipher, compression, transport)
        level = 9 if compression_level is None else compression_level
        if not 1 <= level <= 9:
            raise MechanismError(f"vtun compression level {level}", fix="use 1..9")
        super().__init__("vtund")
        self.cipher, self.compression, self.level = cipher, compression, level
        self.transport = transport
        self._confs: dict[str, Path] = {}

    def check(self, a: TunnelEnd, b: TunnelEnd) -> None:
        if a.inner6 or b.inner6:
            raise MechanismError(
                "vtun carries no inner IPv6 here: its TUN device works only with IPv6 off",
                fix="give vtun's tunnel ends no inner6 address",
            )
        if a.underlay_family != 4:
            raise MechanismError(
                f"vtun 3.0 takes IPv4 underlay addresses only, not {a.underlay}/{b.underlay} "
                "(its configuration parser rejects an IPv6 bindaddr)",
                fix="give vtun's tunnel ends IPv4 underlay addresses",
            )

    def write(self, a: TunnelEnd, b: TunnelEnd, files_dir: Path, name: str) -> list[Path]:
        password = secrets.token_hex(16)
        out = []
        for end, letter, server in ((a, "a", False), (b, "b", True)):
            dev = f"{name}{letter}"
            self._names[end.name] = dev
            conf = files_dir / f"{name}.{end.name}.vtund.conf"
            write_private(conf, render_conf(self, end, dev, password, server))
            self._confs[end.name] = conf
            out.append(conf)
        return out

    def prepare(self, a: TunnelEnd, b: TunnelEnd) -> None:
        for end in (a, b):
            old = end.host.run(["sysctl", "-n", DISABLE_V6]).stdout.strip() or "0"
            end.host.run(["sysctl", "-q", "-w", f"{DISABLE_V6}=1"])
            self._ds.add_undo(end.host, ["sysctl", "-q", "-w", f"{DISABLE_V6}={old}"])

    def launch(self, end: TunnelEnd, peer: TunnelEnd, server: bool) -> None:
        conf = str(self._confs[end.name])
        argv = ["vtund", "-n", "-s", "-f", conf] if server else [
            "vtund", "-n", "-f", conf, SESSION, peer.underlay,
        ]  # fmt: skip
        log = self.files / f"{self._names[end.name]}.vtund.log"
        self._ds.spawn(end, [*PRIVATE_RUN, *argv], log, "vtund")

    def listener(self) -> tuple[int, str]:
        return (PORT, "tcp")  # sessions start over TCP, whatever carries the data

    def describe(self) -> dict[str, Any]:
        return {
            "implementation": "vtun",
            # vtund calls itself "3.X"; the package says which release that is.
            "version": version_of(["dpkg-query", "-W", "-f=${Version}", "vtun"], r"(\S+)"),
            "backend": "user space",
            "cipher": self.cipher,
            "mode": "tunnel",
            "transport": self.transport,
            "auth": "password (per run)",
            "compression": self.compression,
            "compression_level": self.level if self.compression != "none" else 0,
        }
