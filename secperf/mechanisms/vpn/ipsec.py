"""IPsec (IKEv2 + ESP) between two tunnel ends: strongSwan's charon, configured with swanctl.

Backend: the kernel's XFRM ESP where the kernel has the ESP transform
(CONFIG_INET_ESP; /proc/config.gz or /proc/net/xfrm_stat with esp4 in
/proc/crypto's users are not enough to tell, so the kernel config decides), else
kernel-libipsec: charon encrypts in user space and routes the cleartext through
its TUN device (named ipsec0 by charon, one per charon, in that end's host),
always in UDP encapsulation (ESP in UDP 4500). This machine's kernel has no ESP
transform, so kernel-libipsec runs here; `describe()["backend"]` says which.

kernel-libipsec carries tunnel mode only: it has no XFRM policy to catch a
host's own traffic, so the inner addresses sit on `lo` and routes (table 220)
send the peer's inner addresses and routes to ipsec0. Transport mode needs the
kernel's ESP and is refused without it, with that reason.

Each charon gets its own /run (`unshare -m` and a tmpfs): charon keeps its pid
file at the compiled-in /run/charon.pid, and two charons on one machine would
otherwise refuse to start. Its vici socket is in the run directory, where
swanctl reaches it. Peers authenticate with a pre-shared key made per run; the
IKE SA is AES-256-GCM with X25519; `cipher` picks ESP's proposal.
"""

from __future__ import annotations

import base64
import gzip
import secrets
from functools import partial
from pathlib import Path
from typing import Any

from secperf.errors import MechanismError
from secperf.mechanisms.vpn.base import (
    PRIVATE_RUN,
    DaemonTunnel,
    TunnelEnd,
    version_of,
    wait_for,
    write_private,
)
from secperf.testbed.hosts import Host
from secperf.tools import Tool

CHARON = "/usr/lib/ipsec/charon"
# strongSwan's plugins come with it from scripts/setup.sh: kernel-libipsec
# (libcharon-extra-plugins), openssl and gcm (libstrongswan-standard-plugins), chapoly
# and curve25519 (libstrongswan-extra-plugins).
TOOLS = (
    Tool("/usr/lib/ipsec/charon", "strongswan-charon", "vpn ipsec (the IKE daemon)"),
    Tool("swanctl", "strongswan-swanctl", "vpn ipsec (loading and starting the SAs)"),
    Tool("unshare", "util-linux", "vpn ipsec (a private /run per charon)"),
)
ESP_PROPOSALS = {
    "aes-128-gcm": "aes128gcm16",
    "aes-256-gcm": "aes256gcm16",
    "chacha20-poly1305": "chacha20poly1305",
    "aes-256-cbc": "aes256-sha256",
    "none": "null-sha256",
}
MODES = ("tunnel", "transport")
IKE_PROPOSAL = "aes256gcm16-prfsha256-x25519"
PLUGINS = (
    "random nonce openssl aes sha1 sha2 hmac gcm chapoly curve25519 kdf pem pkcs1 x509 "
    "pubkey socket-default vici"
)
CONFIG_GZ = Path("/proc/config.gz")


def kernel_has_esp(config_gz: Path = CONFIG_GZ) -> bool | None:
    """True/False from the kernel config (CONFIG_INET_ESP), None if it cannot be read."""
    try:
        text = gzip.decompress(config_gz.read_bytes()).decode(errors="replace")
    except OSError:
        return None
    return any(line in ("CONFIG_INET_ESP=y", "CONFIG_INET_ESP=m") for line in text.splitlines())


def render_strongswan_conf(vici: Path, libipsec: bool) -> str:
    # kernel-libipsec before kernel-netlink: the first kernel plugin loaded handles the SAs.
    plugins = PLUGINS + (" kernel-libipsec kernel-netlink" if libipsec else " kernel-netlink")
    return (
        "# secperf ipsec: charon and swanctl for one tunnel end\n"
        "charon {\n"
        f"  load = {plugins}\n"
        "  install_routes = yes\n"
        "  plugins {\n"
        "    vici {\n"
        f"      socket = unix://{vici}\n"
        "    }\n"
        "  }\n"
        "  filelog {\n"
        "    stderr {\n"
        "      default = 1\n"
        "      ike = 1\n"
        "    }\n"
        "  }\n"
        "}\n"
        "swanctl {\n"
        "  load = random nonce openssl pem pkcs1 x509 pubkey\n"
        "}\n"
    )


def render_swanctl_conf(
    me: TunnelEnd, peer: TunnelEnd, esp: str, mode: str, libipsec: bool, psk: str
) -> str:
    if mode == "tunnel":
        # Behind me: what my peer routes to me; behind the peer: what I route to it.
        local_ts = ",".join([*me.host_prefixes(), *peer.routes])
        remote_ts = ",".join([*peer.host_prefixes(), *me.routes])
    else:
        local_ts = remote_ts = "dynamic"
    return (
        f"# secperf ipsec: {me.name} -> {peer.name}, ESP {esp} in {mode} mode\n"
        "connections {\n"
        "  secperf {\n"
        "    version = 2\n"
        f"    local_addrs = {me.underlay}\n"
        f"    remote_addrs = {peer.underlay}\n"
        f"    proposals = {IKE_PROPOSAL}\n"
        f"    encap = {'yes' if libipsec else 'no'}\n"
        "    local {\n"
        "      auth = psk\n"
        f"      id = {me.underlay}\n"
        "    }\n"
        "    remote {\n"
        "      auth = psk\n"
        f"      id = {peer.underlay}\n"
        "    }\n"
        "    children {\n"
        "      secperf {\n"
        f"        local_ts = {local_ts}\n"
        f"        remote_ts = {remote_ts}\n"
        f"        esp_proposals = {esp}\n"
        f"        mode = {mode}\n"
        "      }\n"
        "    }\n"
        "  }\n"
        "}\n"
        "secrets {\n"
        "  ike-secperf {\n"
        f"    id-1 = {me.underlay}\n"
        f"    id-2 = {peer.underlay}\n"
        f"    secret = 0s{psk}\n"
        "  }\n"
        "}\n"
    )


class Ipsec(DaemonTunnel):
    kind = "ipsec"
    TOOLS = TOOLS
    server_first = False  # both charons start, then a initiates
    route_devices = False  # charon installs the routes (table 220) itself

    def __init__(self, cipher: str = "aes-256-gcm", mode: str = "tunnel") -> None:
        if cipher not in ESP_PROPOSALS:
            raise MechanismError(
                f"ipsec cipher {cipher!r} is not one secperf knows",
                fix=f"use one of {', '.join(ESP_PROPOSALS)}",
            )
        if mode not in MODES:
            raise MechanismError(f"ipsec mode {mode!r}", fix="use tunnel or transport")
        super().__init__("charon")
        self.cipher, self.mode = cipher, mode
        esp = kernel_has_esp()
        self.libipsec = not esp
        self._confs: dict[str, tuple[Path, Path, Path]] = {}  # strongswan.conf, swanctl, vici
        self._links_before: dict[str, set[str]] = {}

    @property
    def backend(self) -> str:
        return "kernel-libipsec" if self.libipsec else "xfrm"

    def write(self, a: TunnelEnd, b: TunnelEnd, files_dir: Path, name: str) -> list[Path]:
        psk = base64.b64encode(secrets.token_bytes(32)).decode()
        out = []
        for end, peer in ((a, b), (b, a)):
            stem = files_dir / f"{name}.{end.name}"
            vici = files_dir / f"{name}.{end.name}.vici"
            ss = Path(f"{stem}.strongswan.conf")
            ss.write_text(render_strongswan_conf(vici, self.libipsec))
            sw = write_private(
                Path(f"{stem}.swanctl.conf"),
                render_swanctl_conf(end, peer, ESP_PROPOSALS[self.cipher], self.mode,
                                    self.libipsec, psk),
            )  # fmt: skip
            self._confs[end.name] = (ss, sw, vici)
            out += [ss, sw]
        return out

    def _vici_answers(self, end: TunnelEnd) -> bool:
        return (
            self._confs[end.name][2].exists() and self._swanctl(end, "--stats", check=False) != ""
        )

    def _swanctl(self, end: TunnelEnd, *args: str, check: bool = True) -> str:
        ss, _, vici = self._confs[end.name]
        argv = ["env", f"STRONGSWAN_CONF={ss}", "swanctl", *args, "--uri", f"unix://{vici}"]
        proc = end.host.run(argv, check=False, timeout=30.0)
        if check and proc.returncode != 0:
            raise self._ds.failure(
                f"swanctl {' '.join(args)} failed in {end.name}: "
                f"{(proc.stderr or proc.stdout).strip()[-800:]}",
                fix="read charon's log above; the swanctl.conf is beside it",
            )
        return proc.stdout

    def prepare(self, a: TunnelEnd, b: TunnelEnd) -> None:
        if self.libipsec and self.mode == "transport":
            raise MechanismError(
                "ipsec transport mode needs the kernel's ESP transform, which this kernel "
                "lacks (CONFIG_INET_ESP); kernel-libipsec, the user-space fallback, carries "
                "tunnel mode only",
                fix='use mode = "tunnel" here, or a kernel with ESP (XFRM) for transport mode',
            )
        self._links_before = {e.name: _links(e.host) for e in (a, b)}

    def launch(self, end: TunnelEnd, peer: TunnelEnd, server: bool) -> None:
        if self.mode == "tunnel":
            for addr in end.host_prefixes():
                end.host.run(["ip", "addr", "add", addr, "dev", "lo"])
                self._ds.add_undo(end.host, ["ip", "addr", "del", addr, "dev", "lo"])
        ss, _, vici = self._confs[end.name]
        vici.unlink(missing_ok=True)
        log = self.files / f"{ss.name.removesuffix('.strongswan.conf')}.charon.log"
        argv = [*PRIVATE_RUN, "env", f"STRONGSWAN_CONF={ss}", CHARON]
        self._ds.spawn(end, argv, log, label="charon")

    def connect(self, a: TunnelEnd, b: TunnelEnd) -> None:
        for end in (a, b):
            wait_for(
                partial(self._vici_answers, end),
                self._ds,
                what=f"charon in {end.name} did not open its vici socket",
                fix="read charon's log above",
            )
            self._swanctl(end, "--load-all", "--file", str(self._confs[end.name][1]))
        self._swanctl(a, "--initiate", "--child", "secperf", "--timeout", "15")
        if self.libipsec:
            for end in (a, b):
                new = sorted(n for n in _links(end.host) - self._links_before[end.name]
                             if n.startswith("ipsec"))  # fmt: skip
                if not new:
                    raise self._ds.failure(
                        f"charon made no ipsec TUN device in {end.name}",
                        fix="check that /dev/net/tun exists and kernel-libipsec loaded",
                    )
                self._names[end.name] = new[0]

    def stop(self) -> None:
        super().stop()
        self._names.clear()

    def describe(self) -> dict[str, Any]:
        return {
            "implementation": "ipsec",
            # swanctl and charon come from one source package; charon has no version
            # flag (run here it would start a daemon), swanctl --version asks one.
            "version": version_of(["swanctl", "--help"], r"(\d+\.\d+\.\d+)"),
            "daemon": "strongSwan charon + swanctl",
            "backend": self.backend,
            "cipher": self.cipher,
            "esp_proposal": ESP_PROPOSALS[self.cipher],
            "ike_proposal": IKE_PROPOSAL,
            "mode": self.mode,
            "transport": "udp (ESP in UDP 4500)" if self.libipsec else "esp",
            "auth": "psk (per run)",
            "compression": "none",
        }


def _links(host: Host) -> set[str]:
    proc = host.run(["ip", "-o", "link", "show"], check=False)
    names = set()
    for line in proc.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.add(parts[1].strip().split("@")[0])
    return names
