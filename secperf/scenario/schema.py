"""The scenario file's schema: what every key means, its type and its default.

A scenario is data only. These models validate it strictly (an unknown key is
an error, `"3"` is not an int) so that a typo stops the run before any traffic.
`docs/scenario-format.md` documents every key; keep the two in step.

Adding a mechanism kind: write a model with `kind: Literal["..."]` and add it to the
`Mechanism` registry at the bottom of its section. A workload kind lives in its own
module with its model (secperf/workloads/README-kind.md), listed in
secperf.workloads.registry.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    BaseModel,
    Field,
    PlainValidator,
    ValidationInfo,
    field_validator,
    model_validator,
)

from secperf.scenario.fields import (
    Name,
    NonNegativeDuration,
    PositiveDuration,
    StrictModel,
    VariantName,
    bounded,
    one_or_sweep,
    parse_count,
    rule_file,
)
from secperf.scenario.registry import KindRegistry
from secperf.scenario.testbed import (
    Testbed,
    TopologySection,
)
from secperf.scenario.units import (
    parse_size,
    plain_number,
    toml_repr,
)
from secperf.workloads.base import WorkloadSpec
from secperf.workloads.registry import WORKLOADS

# ---------------------------------------------------------------- testbed, repeat, timing


class Repeat(StrictModel):
    min: int = Field(default=3, ge=2)
    max: int = Field(default=10, le=1000)
    confidence: float = Field(default=0.95, ge=0.5, le=0.999)
    halfwidth_pct: float = Field(default=2.0, gt=0)
    # Seed of each round's shuffled order; absent: a fresh one per run (run.json keeps it).
    seed: int | None = Field(default=None, ge=0, lt=2**63)

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence_is_a_fraction(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool) and 1 < value <= 100:
            raise ValueError(
                f"confidence is a fraction, not a percentage: write {plain_number(value / 100)} "
                f"for {plain_number(value)} %"
            )
        return value

    @field_validator("max")
    @classmethod
    def _max_at_least_min(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("min")
        if isinstance(low, int) and value < low:
            raise ValueError(f"max ({value}) must be at least min ({low})")
        return value


class Timing(StrictModel):
    duration: PositiveDuration = 5.0
    warmup: NonNegativeDuration = 1.0


# ---------------------------------------------------------------- mechanisms


RuleCount = Annotated[
    int | list[int],
    PlainValidator(one_or_sweep(bounded(parse_count, 0, 65_536, "a rule count"))),
]


Placement = Annotated[str | list[str], Field(min_length=1)]


class MechanismBase(StrictModel):
    """Keys every mechanism has: where it runs.

    `on` is a host name ("dut", the default; "server" puts a host firewall on the
    target itself), a list of names (the same mechanism on each), "ends" (the
    workload's client and server hosts) or "gateways" (every host with role
    gateway). The runner resolves it against the testbed graph."""

    kind: str  # each kind's model narrows it to its Literal
    on: Placement = "dut"

    @field_validator("on")
    @classmethod
    def _placement_names(cls, value: str | list[str]) -> str | list[str]:
        for name in [value] if isinstance(value, str) else value:
            if not re.fullmatch(r"[a-z][a-z0-9-]{0,19}", name):
                raise ValueError(
                    f"on = {name!r} is not a host name: write a host of [topology] "
                    '(e.g. "dut", "server"), "ends" or "gateways"'
                )
        return value


class AclMechanism(MechanismBase):
    """An nftables/iptables filter of `rules` rules on the DUT's forward path."""

    # Keys that take a list: the variant then expands into one variant per value.
    sweepable: ClassVar[tuple[str, ...]] = ("rules",)

    kind: Literal["acl"]
    rules: RuleCount
    layout: Literal["linear", "set"] = "linear"
    entries: Literal["standard", "extended"] = "extended"
    match: Literal["first", "last"] = "last"
    backend: Literal["nft", "iptables-legacy", "iptables-nft"] = "nft"
    stateful: bool = False
    # Deny the last client-side emulated host just before the permits (document
    # 004's rejected stream: a latency workload's `rejected_stream` sends from it).
    exclude_one: bool = False
    # With an attacker in the testbed: permit its "allowed" flood port (9), never port 19.
    flood_permit: bool = True


class CustomMechanism(MechanismBase):
    """A rule file the user wrote, loaded as is on the DUT."""

    kind: Literal["custom"]
    file: Path = Field(strict=False)
    format: Literal["nft", "iptables"]
    backend: Literal["iptables-legacy", "iptables-nft"] = "iptables-nft"

    @field_validator("file")
    @classmethod
    def _resolve(cls, value: Path, info: ValidationInfo) -> Path:
        # Relative to the scenario file (the loader passes its directory).
        context = info.context if isinstance(info.context, dict) else {}
        base = context.get("base_dir")
        resolved = value if value.is_absolute() else Path(base or Path.cwd()) / value
        if context.get("check_files", True) and not resolved.is_file():
            raise ValueError(f"rule file {str(value)!r} not found (looked for {resolved})")
        return resolved


class NatMechanism(MechanismBase):
    """Address translation on the DUT: static 1:1, a pool, or PAT (masquerade)."""

    kind: Literal["nat"]
    mode: Literal["static", "pool", "pat"]
    backend: Literal["nft", "iptables-legacy", "iptables-nft"] = "nft"
    pool_size: int = Field(default=16, ge=1, le=200)


class ApplianceMechanism(MechanismBase):
    """Document 000's security appliance on the DUT: a stateful filter (the inside
    opens connections, the outside cannot), PAT towards the server side, and a
    daemon on NFQUEUE that logs every new connection. Without its daemon nothing
    new passes (fail-closed), unless `fail_open` asks the kernel to bypass it."""

    kind: Literal["appliance"]
    queue: int = Field(default=0, ge=0, le=65535)
    nat: bool = True
    fail_open: bool = False


class SynproxyMechanism(MechanismBase):
    """nftables synproxy on the DUT for the server's TCP ports (RFC 3511 §5.5): the DUT
    answers SYNs with cookies. The options it promises must be the server's: by default
    they are read from the server's namespace when the rules are loaded (MSS from its
    link MTU, window scale from its tcp_rmem / rmem_max, timestamps and SACK from its
    sysctls); a key given here overrides what was read."""

    kind: Literal["synproxy"]
    mss: int | None = Field(default=None, ge=536, le=65495)
    wscale: int | None = Field(default=None, ge=0, le=14)
    timestamp: bool | None = None
    sack_perm: bool | None = None


# -- VPN tunnels (secperf.mechanisms.vpn implements them; docs/methodology.md, "VPN tunnels")

VPN_IMPLEMENTATIONS = ("wireguard", "openvpn", "ipsec", "tinc", "vtun")
# Per implementation: the ciphers secperf runs, the first being its default.
VPN_CIPHERS: dict[str, tuple[str, ...]] = {
    "wireguard": ("chacha20-poly1305",),
    "openvpn": ("aes-256-gcm", "aes-128-gcm", "chacha20-poly1305", "aes-256-cbc", "none"),
    "ipsec": ("aes-256-gcm", "aes-128-gcm", "chacha20-poly1305", "aes-256-cbc", "none"),
    "tinc": ("aes-256-cbc", "aes-128-cbc", "blowfish", "none"),
    "vtun": ("aes-128-ecb", "none"),
}
# Ciphers an implementation has but that do not work on this kind of machine (FIELD-NOTES).
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
    "digest": ("tinc",),
    "compression_level": ("tinc", "vtun"),
}
PPTP_REASON = (
    "PPTP cannot run here: pppd needs the kernel's PPP driver (/dev/ppp, CONFIG_PPP with "
    "MPPE) and GRE, which this kind of machine's kernel lacks and cannot load as modules "
    '(docs/methodology.md, "VPN tunnels")'
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


class VpnMechanism(MechanismBase):
    """A VPN tunnel: a real daemon at each end, keys and certificates made per run.

    `on` says where its two ends go: "ends" (the default) = the workload's client
    and server themselves (host-to-host), "gateways" = the testbed's gateway pair
    with the path between them (site-to-site), or a list of the two host names."""

    # Keys that take a list (document 003's tables): one variant per value, e.g.
    # cipher = ["none", "aes-128-gcm", "aes-256-gcm"] -> NAME[cipher=none], ...
    sweepable: ClassVar[tuple[str, ...]] = ("cipher", "compression")

    on: Placement = "ends"
    kind: Literal["vpn"]
    implementation: Literal["wireguard", "openvpn", "ipsec", "tinc", "vtun", "pptp"]
    # None: the implementation's default (VPN_CIPHERS); a list is a sweep
    cipher: str | list[str] | None = None
    compression: VpnCompression | list[VpnCompression] = "none"
    compression_level: int | None = Field(default=None, ge=1, le=9)
    digest: Literal["sha256", "sha1", "none"] | None = None
    mode: Literal["tunnel", "transport"] | None = None
    transport: Literal["udp", "tcp"] | None = None
    auth: Literal["tls", "static"] | None = None

    @model_validator(mode="after")
    def _fits_the_implementation(self) -> VpnMechanism:
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
                '"aes-256-cbc" or "none" with auth = "static"'
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
        if impl == "tinc":
            params["digest"] = self.digest
        if impl == "ipsec":
            params["mode"] = self.mode
        return params


def _proxy_memory(value: object) -> int | None:
    return (
        None
        if value is None
        else bounded(parse_size, 16 * 2**20, 64 * 2**30, "a memory limit")(value)
    )


ProxyMemory = Annotated[int | None, PlainValidator(_proxy_memory)]


class ProxyMechanism(MechanismBase):
    """Document 001's application-proxy firewall on the DUT: squid (HTTP) and ftp-proxy
    (FTP) intercepting transparently, with the paper's switches: the rule base size and
    where the admitting rule sits, reverse DNS look-ups of clients against a testbed DNS
    server, the object cache, access logging, the proxy's CPUs and a memory limit."""

    kind: Literal["proxy"]
    rules: int = Field(default=4, ge=1, le=10_000)
    match: Literal["first", "last"] = "last"
    dns_lookups: bool = True
    cache: bool = True
    logging: Literal["off", "file", "verbose"] = "file"
    cpus: int | None = Field(default=None, ge=1, le=2)
    memory: ProxyMemory = None
    deny: list[str] = Field(default_factory=list)
    # "circuit": dante (SOCKS5) instead of squid + ftp-proxy; clients name it.
    level: Literal["application", "circuit"] = "application"

    @model_validator(mode="after")
    def _circuit_switches(self) -> ProxyMechanism:
        if self.level == "circuit" and (self.dns_lookups or not self.cache):
            raise ValueError(
                'level = "circuit" (dante) makes no DNS look-ups here and has no cache: '
                "set dns_lookups = false and leave cache out"
            )
        return self

    @field_validator("deny")
    @classmethod
    def _deny_addresses(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                net = ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(
                    f"deny entry {item!r} is not an address or network: write e.g. "
                    '"198.18.2.3" or "198.18.2.0/24"'
                ) from None
            if net.version != 4:
                raise ValueError(f"deny entry {item!r}: the proxy intercepts IPv4 only")
        return value


def _ips_rules(value: object, info: ValidationInfo) -> Path | int:
    """`rules`: a rule file (relative to the scenario; parsed now, so a bad rule
    is reported as file:line before any run) or a count of rules to generate."""
    if isinstance(value, bool):
        raise ValueError("rules must be a rule file or a number of rules to generate")
    if isinstance(value, int):
        if not 1 <= value <= 100_000:
            raise ValueError(f"rules = {value}: generate 1..100000 rules")
        return value
    if not isinstance(value, str | Path):
        raise ValueError("rules must be a rule file or a number of rules to generate")
    return rule_file(value, info)


def _ips_rules_or_sweep(value: object, info: ValidationInfo) -> Path | int | list[int]:
    """A rule file, a count, or a list of counts (a rule-count sweep)."""
    if not isinstance(value, list | tuple):
        return _ips_rules(value, info)
    if not value:
        raise ValueError("a sweep list needs at least one value")
    counts: list[int] = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int):
            raise ValueError(f"item {i}: a rule-count sweep lists numbers of rules to generate")
        _ips_rules(item, info)  # the bounds check
        counts.append(item)
    if len(set(counts)) != len(counts):
        raise ValueError("a rule-count sweep lists each count once")
    return counts


IpsRules = Annotated[Path | int, PlainValidator(_ips_rules)]
IpsRulesSweep = Annotated[Path | int | list[int], PlainValidator(_ips_rules_or_sweep)]
ReassemblyBytes = Annotated[
    int, PlainValidator(bounded(parse_size, 64, 64 * 1024**2, "a reassembly bound"))
]


class IpsMechanism(MechanismBase):
    """Intrusion prevention inline (document 004 §V): every packet through the host is
    matched against a Snort-subset rule file before it passes. `engine = "nfq"`:
    secperf-nfq on NFQUEUE with Hyperscan (user space, fail closed); `"fwsnort"`: the
    same rules as iptables string matches (kernel). `rules` is a file or a count of
    rules to generate (rule-count sweeps take a list)."""

    sweepable: ClassVar[tuple[str, ...]] = ("rules",)

    kind: Literal["ips"]
    engine: Literal["nfq", "fwsnort"] = "nfq"
    rules: IpsRulesSweep = Path("rules/secperf-attacks.rules")
    mode: Literal["inline"] = "inline"
    queue: int = Field(default=0, ge=0, le=65535)
    # Bounded per-flow TCP reassembly (engine nfq): a pattern split across segments
    # matches; `reassembly_bytes` of each flow direction, `reassembly_flows` at once.
    reassembly: bool = False
    reassembly_bytes: ReassemblyBytes = 1024**2
    reassembly_flows: int = Field(default=4096, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _reassembly_needs_nfq(self) -> IpsMechanism:
        if self.reassembly and self.engine != "nfq":
            raise ValueError(
                'reassembly = true needs engine = "nfq" (fwsnort matches each packet alone)'
            )
        return self


class FastpathMechanism(MechanismBase):
    """The DUT's fast path (document 004's CEF): an nftables flowtable on the forwarding
    host's interfaces. Established flows are offloaded from the forward path: their
    packets skip the forward hook (and every filter and NFQUEUE rule there)."""

    kind: Literal["fastpath"]


class ManagementHost(StrictModel):
    """An SSH destination that runs an external device's commands (Ansible's names)."""

    ansible_host: str
    ansible_port: int = Field(default=22, ge=1, le=65535)
    ansible_user: str = "root"
    ansible_ssh_private_key_file: str | None = None
    known_hosts: str | None = None
    host_key_checking: bool = True


class ExternalMechanism(MechanismBase):
    """A variant of a device secperf does not configure: `apply` / `remove` shell
    commands (here, or on `manager` over SSH), else the user is asked at each change."""

    kind: Literal["external"]
    apply: str | None = None
    remove: str | None = None
    manager: ManagementHost | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> ExternalMechanism:
        if (self.apply is None) != (self.remove is None):
            raise ValueError(
                "give apply and remove together (the commands that put the variant on "
                "the device and take it off), or neither (secperf then asks the user)"
            )
        if self.manager is not None and self.apply is None:
            raise ValueError("manager runs the apply / remove commands: give them too")
        return self


class IdsMechanism(MechanismBase):
    """Intrusion detection on a mirror (004 §V, promiscuous mode): the routers in `on`
    copy every packet they receive (nft netdev dup) to the host with role "ids" in
    `on`, where secperf-nfq reads a packet socket and only alerts."""

    on: Placement = Field(default_factory=lambda: ["dut", "ids"])
    kind: Literal["ids"]
    rules: IpsRules = Path("rules/secperf-attacks.rules")


@dataclass(frozen=True)
class _Plain:
    name: str
    model: type[BaseModel]


MECH_REG = KindRegistry(
    "mechanism",
    [
        _Plain(get_args(m.model_fields["kind"].annotation)[0], m)
        for m in (
            AclMechanism,
            CustomMechanism,
            NatMechanism,
            ApplianceMechanism,
            SynproxyMechanism,
            VpnMechanism,
            ProxyMechanism,
            IpsMechanism,
            IdsMechanism,
            FastpathMechanism,
            ExternalMechanism,
        )
    ],
)
Mechanism = Annotated[MechanismBase, MECH_REG]


class Variant(StrictModel):
    description: str = ""
    # Empty = a plain forwarding DUT: the cost of the hop itself (against
    # baseline = "direct"), or an A/A check of the noise (against "forward").
    mechanisms: list[Mechanism] = Field(default_factory=list)
    # What the DUT host is in this variant: its namespace, or a VM ([testbed.vm]) on
    # the same links with the same addresses. The mechanisms run wherever it is.
    backend: Literal["namespace", "vm"] = "namespace"

    @field_validator("mechanisms")
    @classmethod
    def _one_acl(cls, mechs: list[Any]) -> list[Any]:
        # Each ACL renders its own complete filter (permits, then the default drop) into
        # the one table and chain of the variant: a second one would sit behind the
        # first's permits and never be evaluated. Refuse it rather than measure nothing.
        acls = [i for i, m in enumerate(mechs) if isinstance(m, AclMechanism)]
        if len(acls) > 1:
            raise ValueError(
                f'mechanisms[{acls[0]}] and mechanisms[{acls[1]}] are both kind = "acl": one '
                "variant takes one ACL (a second would come after the first's permits and never "
                "be evaluated); give it the total rule count, or put each ACL in its own variant"
            )
        return mechs

    def expand(self, name: str) -> list[tuple[str, list[Any], dict[str, object]]]:
        """One (name, mechanisms, swept values) per combination of the listed values.

        A variant without lists is itself: [(name, mechanisms, {})]. With
        `rules = [1, 10]` it is `name[rules=1]` and `name[rules=10]`.
        """
        axes: list[tuple[int, str, list[object]]] = [
            (i, key, list(value))
            for i, mech in enumerate(self.mechanisms)
            for key in getattr(mech, "sweepable", ())
            if isinstance(value := getattr(mech, key), list)
        ]
        if not axes:
            return [(name, list(self.mechanisms), {})]
        out = []
        for combo in itertools.product(*(values for _, _, values in axes)):
            mechs = list(self.mechanisms)
            swept: dict[str, object] = {}
            for (i, key, _), value in zip(axes, combo, strict=True):
                mechs[i] = mechs[i].model_copy(update={key: value})
                swept[key] = value
            label = " ".join(f"{k}={v}" for k, v in swept.items())
            out.append((f"{name}[{label}]", mechs, swept))
        return out


# ---------------------------------------------------------------- workloads

Workload = Annotated[WorkloadSpec, WORKLOADS]


# ---------------------------------------------------------------- the scenario


class Scenario(StrictModel):
    name: Name
    description: str = ""
    testbed: Testbed = Field(default_factory=Testbed)
    topology: TopologySection | None = None
    repeat: Repeat = Field(default_factory=Repeat)
    timing: Timing = Field(default_factory=Timing)
    variants: dict[VariantName, Variant]
    workloads: list[Workload]
    # Where the scenario came from; set by the loader, never read from the file.
    source: Path | None = Field(default=None, exclude=True, strict=False)

    @model_validator(mode="before")
    @classmethod
    def _apply_timing_defaults(cls, data: Any) -> Any:
        """Workloads without duration/warmup take them from [timing]."""
        if not isinstance(data, dict):
            return data
        try:
            timing = Timing.model_validate(data.get("timing", {}))
        except ValueError:
            return data  # reported where [timing] is validated
        workloads = data.get("workloads")
        if isinstance(workloads, list):
            data = {
                **data,
                "workloads": [
                    {"duration": timing.duration, "warmup": timing.warmup, **w}
                    if isinstance(w, dict)
                    else w
                    for w in workloads
                ],
            }
        return data

    @field_validator("variants")
    @classmethod
    def _at_least_one_variant(cls, value: dict[str, Variant]) -> dict[str, Variant]:
        if not value:
            raise ValueError("a scenario needs at least one variant: add a [variants.NAME] table")
        return value

    @model_validator(mode="after")
    def _workload_variants_exist(self) -> Scenario:
        for i, w in enumerate(self.workloads):
            unknown = [v for v in w.variants if v not in self.variants]
            if unknown:
                raise ValueError(
                    f"workloads[{i}] ({w.name}).variants names {', '.join(unknown)}, which "
                    f"[variants] does not have: use some of {', '.join(self.variants)}"
                )
        return self

    @model_validator(mode="after")
    def _workloads_fit_the_testbed(self) -> Scenario:
        """What each workload's kind asks of the scenario: several generators only where
        the kind merges them, floods on IPv4, and the kind's own checks (its `validate`)."""
        several = [k.name for k in WORKLOADS if k.generators]
        for i, w in enumerate(self.workloads):
            kind = WORKLOADS.of(w)
            if w.generators > 1 and not kind.generators:
                raise ValueError(
                    f"workloads[{i}].generators = {w.generators}: kind {w.kind!r} runs from "
                    f"one host; several generators drive {', '.join(several)} only"
                )
            if self.testbed.family == "ipv6" and kind.floods(w):
                raise ValueError(
                    f"workloads[{i}] ({w.name}) floods from the attacker, and floods are IPv4 "
                    'only: set family = "ipv4" in [testbed], or move this workload to a '
                    "scenario of its own"
                )
            refused = kind.validate(w, self.testbed, self.topology) if kind.validate else None
            if refused is not None:
                key = f".{refused.key}" if refused.key else f" ({w.name})"
                raise ValueError(f"workloads[{i}]{key} {refused.message}")
        return self

    @field_validator("workloads")
    @classmethod
    def _workloads_named_uniquely(cls, value: list[WorkloadSpec]) -> list[WorkloadSpec]:
        if not value:
            raise ValueError("a scenario needs at least one workload: add a [[workloads]] table")
        explicit: dict[str, int] = {}
        for i, workload in enumerate(value):
            if workload.derived_name:
                continue
            if workload.name in explicit:
                raise ValueError(
                    f"workloads[{explicit[workload.name]}] and workloads[{i}] are both named "
                    f"{toml_repr(workload.name)}; give each workload its own name"
                )
            explicit[workload.name] = i
        # Derived names that collide get -2, -3, … in file order.
        taken = set(explicit)
        for workload in value:
            if not workload.derived_name:
                continue
            base, n = workload.name, 1
            while workload.name in taken:
                n += 1
                workload.name = f"{base}-{n}"
            taken.add(workload.name)
        return value

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (sizes in bytes, rates in bits/s, durations in s) that
        `from_json_dict` reads back; the runner embeds it in run.json."""
        return self.model_dump(mode="json")

    @classmethod
    def from_json_dict(cls, data: dict[str, Any], *, check_files: bool = False) -> Scenario:
        """Rebuild a scenario embedded in a run directory (rule files may be gone)."""
        return cls.model_validate(data, context={"check_files": check_files})
