"""The `vpn` mechanism's scenario entry: which implementation, and its keys.

What each implementation takes and what this machine cannot run is checked here,
so that a scenario that cannot work stops at `secperf check` with the reason
(docs/studies/003.md; secperf.mechanisms.vpn runs the tunnels.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, PlainValidator, model_validator

from secperf.mechanisms.base import MechanismSpec, Placement
from secperf.schema.fields import bounded
from secperf.schema.units import parse_size, toml_repr

VPN_IMPLEMENTATIONS = ("wireguard", "openvpn", "ipsec", "tinc", "vtun")
# Per implementation: the ciphers secperf runs, the first being its default.
VPN_CIPHERS: dict[str, tuple[str, ...]] = {
    "wireguard": ("chacha20-poly1305",),
    "openvpn": ("aes-256-gcm", "aes-128-gcm", "chacha20-poly1305", "aes-256-cbc", "bf-cbc", "none"),
    "ipsec": ("aes-256-gcm", "aes-128-gcm", "chacha20-poly1305", "aes-256-cbc", "none"),
    "tinc": ("aes-256-cbc", "aes-128-cbc", "blowfish", "none"),
    "vtun": ("aes-128-ecb", "none"),
}
# Ciphers an implementation has but that do not work on this kind of machine (FIELD-NOTES).
# OpenVPN's AEAD ciphers: their own tag authenticates (no `auth`, so no `digest`).
OPENVPN_AEAD = ("aes-256-gcm", "aes-128-gcm", "chacha20-poly1305")
VPN_REFUSED_CIPHERS: dict[str, dict[str, str]] = {
    "vtun": {
        "blowfish": "vtund 3.0.4 segfaults with Blowfish (its `encrypt yes`)",
        "aes-256-cbc": "vtun's aes256cbc tunnel dies under load",
    },
}
VPN_COMPRESSION: dict[str, tuple[str, ...]] = {
    "wireguard": ("none",),
    "openvpn": ("none", "lz4", "lzo"),
    "ipsec": ("none",),
    "tinc": ("none", "zlib", "lzo"),
    "vtun": ("none", "lzo", "zlib"),
}
VPN_AEAD = ("aes-256-gcm", "aes-128-gcm", "chacha20-poly1305")
# Which implementations take each optional key (any other is an error, not ignored).
VPN_KEYS: dict[str, tuple[str, ...]] = {
    "mode": ("ipsec",),
    "transport": ("openvpn", "tinc", "vtun"),
    "auth": ("openvpn",),
    "digest": ("tinc", "openvpn"),
    "compression_level": ("tinc", "vtun"),
    # the daemon's UDP socket buffers (OpenVPN sndbuf/rcvbuf, tinc UDPSndBuf/UDPRcvBuf)
    "socket_buffer": ("openvpn", "tinc"),
}
PPTP_REASON = (
    "PPTP cannot run here: pppd needs the kernel's PPP driver (/dev/ppp, CONFIG_PPP with "
    "MPPE) and GRE, which this kind of machine's kernel lacks and cannot load as modules "
    "(docs/studies/003.md"
)


VpnCompression = Literal["none", "lz4", "lzo", "zlib"]


def _sweep_items(key: str, value: object) -> list[Any]:
    """A mechanism key's values: the one value, or a sweep list's (non-empty, no repeats)."""
    if not isinstance(value, list):
        return [value]
    if not value:
        raise ValueError(f"{key}: a sweep list needs at least one value")
    if len(set(map(repr, value))) != len(value):
        raise ValueError(f"{key}: a sweep list repeats a value: {toml_repr(list(value))}")
    return list(value)


def _daemon_buffer(value: object) -> int | None:
    if value is None:
        return None
    return bounded(parse_size, 4096, 2**31 - 1, "a socket buffer")(value)


DaemonBuffer = Annotated[int | None, PlainValidator(_daemon_buffer)]


class VpnSpec(MechanismSpec):
    """A VPN tunnel: a real daemon at each end, keys and certificates made per run.

    `on` says where its two ends go: "ends" (the default) = the workload's client
    and server themselves (host-to-host), "gateways" = the testbed's gateway pair
    with the path between them (site-to-site), or a list of the two host names."""

    # Keys that take a list (document 003's tables): one variant per value, e.g.
    # cipher = ["none", "aes-128-gcm", "aes-256-gcm"] -> NAME[cipher=none], ...
    sweepable: ClassVar[tuple[str, ...]] = ("cipher", "compression")

    on: Placement = "ends"
    """The tunnel's two ends: the workload's client and server themselves (host-to-host, the
    paper's setup) or a gateway pair with the path between them (site-to-site); a single host
    (`"dut"`) is an error.
    """
    kind: Literal["vpn"] = "vpn"
    implementation: Literal["wireguard", "openvpn", "ipsec", "tinc", "vtun", "pptp"]
    """Which VPN daemon runs at each end."""
    # None: the implementation's default (VPN_CIPHERS); a list is a sweep
    cipher: str | list[str] | None = None
    """The data cipher; `none` = encryption off. OpenVPN with `auth = "static"` defaults to
    `aes-256-cbc`. vtun's `blowfish` and `aes-256-cbc` are refused (they crash here).
    """
    compression: VpnCompression | list[VpnCompression] = "none"
    """Compression in the tunnel."""
    compression_level: int | None = Field(default=None, ge=1, le=9)
    """The compressor's level."""
    digest: Literal["sha256", "sha1", "none"] | None = None
    """The packet MAC: tinc's, OpenVPN's data-channel HMAC (`auth`); `cipher = "none"` with `digest
    = "sha256"` measures the MAC alone.
    """
    mode: Literal["tunnel", "transport"] | None = None
    """ESP mode; transport needs the kernel's ESP transform (refused with kernel-libipsec)."""
    transport: Literal["udp", "tcp"] | None = None
    """What carries the tunnel."""
    auth: Literal["tls", "static"] | None = None
    """Certificates made per run, or one static key; static with an AEAD cipher is an error."""
    # Both UDP socket buffers of each end's daemon, in bytes (None: the system's
    # default, 208 KiB here). A daemon held to a CPU quota runs in bursts (5 ms of
    # every 100 ms at 5 %); between them, what arrives waits in its receive buffer and
    # what it sent in a burst waits in its send buffer behind the link's shaper. The
    # default buffers overflow there and lose packets that a slow, evenly running CPU
    # would only delay (docs/studies/003.md. The kernel caps a value
    # at net.core.rmem_max / wmem_max (4 MiB here, read-only in a namespace).
    socket_buffer: DaemonBuffer = None
    """Both UDP socket buffers of each end's daemon. A daemon held to a CPU quota runs in bursts;
    between them its receive buffer fills, and in a burst its send buffer fills behind a shaped
    link: with the default buffers the kernel drops there what a slow, evenly running CPU would
    only delay. The kernel caps it at `net.core.rmem_max`/`wmem_max` (read-only in a namespace:
    the machine's, 4 MiB here); `ss -m` in the end's host shows twice the value (the kernel's
    bookkeeping).
    """

    @model_validator(mode="after")
    def _fits_the_implementation(self) -> VpnSpec:
        impl = self.implementation
        if impl == "pptp":
            raise ValueError(PPTP_REASON)
        if isinstance(self.on, list) and len(self.on) != 2:
            raise ValueError(
                f"a tunnel has two ends: on = {self.on!r} names {len(self.on)} hosts; "
                'write "ends", "gateways" or two host names'
            )
        if self.on == "dut":
            raise ValueError(
                'a tunnel has two ends, not one host: on = "ends" (the client and the server), '
                '"gateways" (a gateway pair) or two host names'
            )
        for key, takers in VPN_KEYS.items():
            if getattr(self, key) is not None and impl not in takers:
                raise ValueError(
                    f"{key} does not apply to {impl} (only to {', '.join(takers)}): remove it"
                )
        ciphers = _sweep_items("cipher", self.cipher)
        compressions = _sweep_items("compression", self.compression)
        levelled = [c for c in compressions if c in ("zlib", "lzo")]
        if self.compression_level is not None and not levelled:
            raise ValueError('compression_level needs compression = "zlib" (or "lzo" for vtun)')
        for cipher, compression in itertools.product(ciphers, compressions):
            self._check_one(cipher, compression)
        return self

    def _check_one(self, cipher: str | None, compression: str) -> None:
        """One point of the (cipher x compression) sweep fits the implementation."""
        impl = self.implementation
        runs = cipher or ("aes-256-cbc" if self.auth == "static" else "aes-256-gcm")
        if impl == "openvpn" and self.digest is not None and runs in OPENVPN_AEAD:
            raise ValueError(
                f"openvpn digest with {cipher or 'the default AEAD cipher'}: an AEAD cipher "
                "authenticates with its own tag; use digest with a CBC cipher or none"
            )
        refused = VPN_REFUSED_CIPHERS.get(impl, {})
        if cipher in refused:
            raise ValueError(
                f"{impl} cipher {cipher!r} is refused: {refused[cipher]} on this kind "
                f"of machine; use one of {', '.join(VPN_CIPHERS[impl])}"
            )
        if cipher is not None and cipher not in VPN_CIPHERS[impl]:
            raise ValueError(
                f"{impl} has no cipher {cipher!r}: use one of {', '.join(VPN_CIPHERS[impl])}"
            )
        if compression not in VPN_COMPRESSION[impl]:
            raise ValueError(
                f"{impl} has no compression {compression!r}: use one of "
                f"{', '.join(VPN_COMPRESSION[impl])}"
            )
        if impl == "tinc" and compression == "lzo" and self.compression_level is not None:
            raise ValueError("tinc's lzo has no level (it runs LZO at its best, tinc level 11)")
        if impl == "openvpn" and self.auth == "static" and cipher in VPN_AEAD:
            raise ValueError(
                f"openvpn static-key mode cannot use {cipher}: it has no AEAD ciphers "
                '(GCM and ChaCha20-Poly1305 need TLS mode); use auth = "tls", or cipher = '
                '"aes-256-cbc", "bf-cbc" or "none" with auth = "static"'
            )
        if impl == "ipsec" and compression != "none":
            raise ValueError("ipsec has no compression here (IPComp is not set up): remove it")

    @property
    def effective_cipher(self) -> str:
        """The cipher that runs: the given one, or the implementation's default (an
        OpenVPN static key defaults to aes-256-cbc, the only one it can use)."""
        if isinstance(self.cipher, list) or isinstance(self.compression, list):
            raise ValueError("a swept vpn mechanism runs as its expanded variants, one per value")
        if self.cipher is not None:
            return self.cipher
        if self.implementation == "openvpn" and self.auth == "static":
            return "aes-256-cbc"
        return VPN_CIPHERS[self.implementation][0]

    def implementation_params(self) -> dict[str, Any]:
        """Keyword arguments for the implementation's class (secperf.mechanisms.vpn)."""
        impl = self.implementation
        params: dict[str, Any] = {"cipher": self.effective_cipher}
        if impl in ("openvpn", "tinc", "vtun"):
            params["compression"] = self.compression
            params["transport"] = self.transport
        if impl in ("tinc", "vtun"):
            # a sweep's compression = "none" point runs without a level
            levelled = self.compression in ("zlib", "lzo")
            params["compression_level"] = self.compression_level if levelled else None
        if impl == "openvpn":
            params["auth"] = self.auth
        if impl in ("openvpn", "tinc"):
            params["socket_buffer"] = self.socket_buffer
            params["digest"] = self.digest
        if impl == "ipsec":
            params["mode"] = self.mode
        return params
