"""WireGuard between two tunnel ends: wireguard-go (user space), configured with `wg`.

The kernel module is used where the host has it (`ip link add type wireguard`
succeeds); this machine's kernel has none, so wireguard-go runs. wireguard-go
keeps its control socket in /var/run/wireguard/<device>.sock, a directory all
namespaces share: the device names carry the run prefix and the end letter, so
two tunnels, or two runs, never meet there.

Keys are made per run with `wg genkey` / `wg pubkey`; each end's `wg setconf`
file holds its private key and the peer (public key, endpoint, allowed IPs = the
peer's inner addresses and the networks behind it, this end's routes). The cipher
is WireGuard's only one, ChaCha20-Poly1305; there is no compression.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from secperf.errors import MechanismError
from secperf.mechanisms.vpn.base import (
    DaemonTunnel,
    TunnelEnd,
    endpoint,
    run_local,
    version_of,
    wait_for,
    write_private,
)
from secperf.testbed.hosts import Host
from secperf.tools import Tool

PORT = 51820
TOOLS = (
    Tool("wireguard-go", "wireguard-go", "vpn wireguard (user-space WireGuard)"),
    Tool("wg", "wireguard-tools", "vpn wireguard (keys and configuration)"),
)
SOCKET_DIR = Path("/var/run/wireguard")
CIPHERS = ("chacha20-poly1305",)


def render_conf(private_key: str, me: TunnelEnd, peer: TunnelEnd, peer_public: str) -> str:
    # What I send to the peer, and the sources I accept from it: its inner addresses
    # and the networks behind it (my routes).
    allowed = [*peer.host_prefixes(), *me.routes]
    return (
        f"# secperf wireguard: {me.name} -> {peer.name}\n"
        "[Interface]\n"
        f"PrivateKey = {private_key}\n"
        f"ListenPort = {PORT}\n"
        "\n"
        "[Peer]\n"
        f"PublicKey = {peer_public}\n"
        f"Endpoint = {endpoint(peer.underlay, PORT)}\n"
        f"AllowedIPs = {', '.join(allowed)}\n"
        "PersistentKeepalive = 25\n"
    )


def _has_wg_device(host: Host, dev: str) -> bool:
    return host.run(["wg", "show", dev], check=False).returncode == 0


class Wireguard(DaemonTunnel):
    kind = "wireguard"
    TOOLS = TOOLS
    server_first = False  # no listener: both ends send to each other

    def __init__(self, cipher: str = "chacha20-poly1305") -> None:
        if cipher not in CIPHERS:
            raise MechanismError(
                f"wireguard has one cipher, chacha20-poly1305, not {cipher!r}",
                fix="leave `cipher` out for wireguard",
            )
        super().__init__("wireguard-go")
        self.cipher = cipher
        self._confs: dict[str, Path] = {}
        self._backend = "wireguard-go"

    def write(self, a: TunnelEnd, b: TunnelEnd, files_dir: Path, name: str) -> list[Path]:
        keys = {}
        for end in (a, b):
            private = run_local(["wg", "genkey"], what="wg genkey").strip()
            public = run_local(["wg", "pubkey"], what="wg pubkey", input=private + "\n").strip()
            keys[end.name] = (private, public)
        out = []
        for end, peer, letter in ((a, b, "a"), (b, a, "b")):
            self._names[end.name] = f"{name}{letter}"
            conf = files_dir / f"{name}.{end.name}.wg.conf"
            write_private(conf, render_conf(keys[end.name][0], end, peer, keys[peer.name][1]))
            self._confs[end.name] = conf
            out.append(conf)
        return out

    def launch(self, end: TunnelEnd, peer: TunnelEnd, server: bool) -> None:
        """The device (the kernel's, else wireguard-go's), its keys and addresses."""
        ds, dev = self._ds, self._names[end.name]
        kernel = end.host.run(["ip", "link", "add", dev, "type", "wireguard"], check=False)
        if kernel.returncode == 0:
            self._backend = "kernel"
            ds.add_undo(end.host, ["ip", "link", "del", dev])
        else:
            log = self.files / f"{dev}.wireguard-go.log"
            ds.spawn(end, ["wireguard-go", "-f", dev], log, label="wireguard-go")
            self._backend = "wireguard-go"
            wait_for(
                partial(_has_wg_device, end.host, dev),
                ds,
                what=f"wireguard-go made no device {dev} in {end.name}",
                fix="check that /dev/net/tun exists in that host",
            )
        end.host.run(["wg", "setconf", dev, str(self._confs[end.name])])
        end.host.run(["ip", "addr", "add", end.inner4, "dev", dev])
        if end.inner6:
            end.host.run(["ip", "addr", "add", end.inner6, "dev", dev])
        end.host.run(["ip", "link", "set", dev, "up"])

    def stop(self) -> None:
        super().stop()
        if self._backend == "wireguard-go":
            # wireguard-go removes its socket on SIGTERM; one it could not remove
            # (killed) is ours by its name, which carries the run prefix.
            for path in self.host_files():
                path.unlink(missing_ok=True)

    def host_files(self) -> list[Path]:
        if self._backend != "wireguard-go":
            return []
        return [SOCKET_DIR / f"{dev}.sock" for dev in self._names.values()]

    def describe(self) -> dict[str, Any]:
        return {
            "implementation": "wireguard",
            "version": version_of(["wireguard-go", "--version"], r"v?(\d[\w.]*)")
            if self._backend == "wireguard-go"
            else "kernel",
            "backend": self._backend,
            "cipher": "chacha20-poly1305",
            "mode": "tunnel",
            "transport": "udp",
            "auth": "curve25519 keys (per run)",
            "compression": "none",
        }
