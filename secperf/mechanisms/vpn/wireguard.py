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
    DaemonSet,
    DaemonTunnel,
    TunnelEnd,
    add_routes,
    check_ends,
    check_tunnel_name,
    endpoint,
    run_local,
    version_of,
    wait_for,
    wait_passing,
    write_private,
)
from secperf.testbed.hosts import Host

PORT = 51820
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

    def __init__(self, cipher: str = "chacha20-poly1305") -> None:
        if cipher not in CIPHERS:
            raise MechanismError(
                f"wireguard has one cipher, chacha20-poly1305, not {cipher!r}",
                fix="leave `cipher` out for wireguard",
            )
        self.cipher = cipher
        self._names: dict[str, str] = {}
        self._confs: dict[str, Path] = {}
        self._files: Path | None = None
        self._ds = DaemonSet("wireguard-go")
        self._backend = "wireguard-go"

    def render(self, a: TunnelEnd, b: TunnelEnd, files_dir: Path, name: str) -> list[Path]:
        check_ends(a, b)
        check_tunnel_name(name)
        files_dir.mkdir(parents=True, exist_ok=True)
        self._files = files_dir
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

    def start(self, a: TunnelEnd, b: TunnelEnd) -> None:
        if not self._confs or self._files is None:
            raise MechanismError("wireguard: start() before render()")
        ds = self._ds
        try:
            for end in (a, b):
                dev = self._names[end.name]
                if (
                    end.host.run(
                        ["ip", "link", "add", dev, "type", "wireguard"], check=False
                    ).returncode
                    == 0
                ):
                    self._backend = "kernel"
                    ds.add_undo(end.host, ["ip", "link", "del", dev])
                else:
                    log = self._files / f"{dev}.wireguard-go.log"
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
            wait_passing(a, b, ds)
            for end in (a, b):
                add_routes(ds, end, self._names[end.name])
        except BaseException:
            ds.stop()
            raise

    def stop(self) -> None:
        self._ds.stop()
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
