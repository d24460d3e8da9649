"""The scenario's [testbed] and [topology] sections: where the hosts run and how they join.

`[testbed]` holds the path's settings (link rate, family, offloads, CPU pinning, the
VM) and the inventory of hosts that run elsewhere (`[testbed.hosts]`, an inventory
file); `[topology]` the graph when the standard client - dut - server plan is not
enough. docs/scenario-format.md documents every key.
"""

from __future__ import annotations

import re
import tomllib
from ipaddress import ip_address
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, ValidationInfo, field_validator, model_validator

from secperf.errors import TestbedError
from secperf.schema.fields import Rate, StrictModel, bounded
from secperf.schema.units import parse_duration
from secperf.testbed.hosts.registry import BACKENDS
from secperf.testbed.hosts.remote_workdir import plain_path_problem
from secperf.testbed.hosts.ssh_transport import DEFAULT_WORKDIR, WATCHDOG_S
from secperf.testbed.topology import check_testbed_address

BootDuration = Annotated[float, PlainValidator(bounded(parse_duration, 1, 3600, "a time-out"))]
WatchdogDuration = Annotated[
    float, PlainValidator(bounded(parse_duration, 2, 3600, "a watchdog deadline"))
]


class VmSection(StrictModel):
    """The DUT as a virtual machine (`[testbed.vm]`; variants choose it with
    `backend = "vm"`): how it is accelerated, its CPUs and memory, and the time-outs
    of building its image and booting it (docs/scenario-format.md)."""

    accel: Literal["auto", "kvm", "tcg"] = "auto"
    """`kvm`: hardware virtualization (fails if /dev/kvm does not work); `tcg`: qemu's emulator;
    `auto`: KVM if /dev/kvm opens and the guest comes up within `kvm_timeout`, else TCG;
    run.json (`vm`) and the report say which ran and why.
    """
    cpus: int = Field(default=1, ge=1, le=16)
    """The guest's virtual CPUs (the paper's VM had 1)."""
    memory_mb: int = Field(default=256, ge=128, le=65536)
    """The guest's memory in MB (the paper's: 256)."""
    boot_timeout: BootDuration = 120.0
    """From starting qemu to the guest's agent answering; past it the run stops with an error
    naming the step (boot or agent).
    """
    build_timeout: BootDuration = 600.0
    """Building the image when it is not cached (download included)."""
    kvm_timeout: BootDuration = 20.0
    """With `accel = "auto"`: how long KVM gets before the fall-back to TCG."""


class InventoryHost(StrictModel):
    """One host of [testbed.hosts]: where it runs (docs/scenario-format.md, "Remote
    hosts"): a backend of secperf.testbed.hosts.registry that an inventory may name
    (a namespace on this machine, the default; a machine secperf logs in to, named
    with Ansible's inventory variables; a device secperf runs nothing on)."""

    backend: str = BACKENDS.default.name
    """`namespace`: a namespace here (`"local"`, its older word, is accepted as an alias); `ssh`: a
    Linux machine secperf logs in to; `external`: a device secperf runs nothing on (variants of
    `kind = "external"` change it).
    """
    ansible_host: str | None = None  # the management address or DNS name sshd answers on
    """The management address or DNS name its sshd answers on (never a test address)."""
    ansible_port: int = Field(default=22, ge=1, le=65535)
    """Sshd's port."""
    ansible_user: str = "root"
    """The login; the DUT's firewall and conntrack, and the engine's floods, need root."""
    # A private key file; absent: the user's ssh-agent (and ~/.ssh's default keys).
    # Never a password: there is no key for one.
    ansible_ssh_private_key_file: str | None = None
    """The private key; relative to the scenario file. There is no key for a password."""
    # Host keys to trust (OpenSSH known_hosts format); absent: ~/.ssh/known_hosts.
    known_hosts: str | None = None
    """Host keys to trust (OpenSSH format); a host whose key is missing is refused, and the error
    says `ssh-keyscan`.
    """
    # Ansible's name. false: a host's key is trusted on first use and saved in
    # ~/.config/secperf/known_hosts; a key that differs from the saved one is refused.
    host_key_checking: bool = True
    """Ansible's name. false: a host whose key is unknown is trusted on first use and its key saved
    in `$XDG_CONFIG_HOME/secperf/known_hosts` (else `~/.config/secperf/known_hosts`); a
    different key for it later is refused (docs/security.md).
    """
    # Where secperf keeps the engine and the run's files on that host: root's own,
    # writable by no one else (made with mode 0700 when missing).
    workdir: str = DEFAULT_WORKDIR
    """Secperf's directory on the host: the engine (`secperf-engine`), the run's ledger
    (`PREFIX.ledger.jsonl`) and files (`PREFIX/`). It and every directory above it must be
    root's (or the login user's) and writable by no one else (a sticky root-owned parent such as
    `/tmp` is fine); made with mode 0700 when missing, refused otherwise (docs/security.md).
    """
    # The host's watchdog stops what the run started there and puts its firewall back
    # when no heartbeat comes from the controller for this long (a dead link).
    watchdog: WatchdogDuration = WATCHDOG_S
    """2 s … 1 h: the host's watchdog stops what the run started there and puts its firewall back
    when its session closes or no heartbeat comes from secperf for this long (a dead link).
    """
    # The test addresses of the host (the plan's, docs/scenario-format.md): traffic
    # goes to these only, and `secperf check` finds each on the host.
    addresses: list[str] = Field(default_factory=list)
    """The host's test addresses: every address the plan gives the host must be here (traffic goes
    to declared addresses only), each in 198.18.0.0/15 or 2001:2::/48 outside 198.19.0.0/17;
    `secperf check` finds each on the host.
    """
    # The interface toward each neighbour in the graph: { dut = "eth1" }.
    interfaces: dict[str, str] = Field(default_factory=dict)
    """The interface cabled to each neighbour, e.g. `{ client = "eth1", server = "eth2" }`
    (recorded in run.json, read for counters).
    """
    # Leave <workdir>/secperf-engine for the next run (it is checked by sha256).
    keep_engine: bool = True
    """Leave `<workdir>/secperf-engine` for the next run (it is replaced when its sha256 differs
    from this machine's).
    """

    @field_validator("backend")
    @classmethod
    def _a_backend(cls, value: str) -> str:
        return BACKENDS.canonical(value, inventory=True)

    @field_validator("workdir")
    @classmethod
    def _absolute_workdir(cls, value: str) -> str:
        path = value.rstrip("/") if value != "/" else value
        problem = plain_path_problem(path)
        if problem is not None or path in ("/", "/tmp", "/var/tmp", "/root", "/var/lib"):
            raise ValueError(
                f"workdir = {value!r}: give {problem or 'a directory of secperf’s own'} "
                f'(e.g. "{DEFAULT_WORKDIR}"); everything a run leaves there is removed'
            )
        return path

    @field_validator("addresses")
    @classmethod
    def _test_addresses(cls, value: list[str]) -> list[str]:
        for addr in value:
            try:
                check_testbed_address(ip_address(addr))
            except (ValueError, TestbedError) as exc:
                raise ValueError(f"address {addr!r}: {getattr(exc, 'message', exc)}") from None
        return value

    @model_validator(mode="after")
    def _ssh_needs_destination(self) -> InventoryHost:
        kind = BACKENDS.get(self.backend)
        if kind.logs_in and not self.ansible_host:
            raise ValueError(
                f'backend = "{self.backend}" needs ansible_host (the address sshd answers on)'
            )
        if kind.lab and not self.addresses:
            raise ValueError(
                f'backend = "{self.backend}" needs addresses: the test addresses traffic may go to '
                "on that host (secperf check lists the plan's)"
            )
        return self


PLACEMENTS = ("one", "split", "shared")


def _placement(value: object) -> str | dict[str, str] | None:
    """`cpus`: "one", "split", "shared", or a map host -> CPU list ("0", "1", "0-1")."""
    if value is None or value in PLACEMENTS:
        return value
    if isinstance(value, dict):
        if not value:
            raise ValueError(
                'cpus = {} places nothing: name hosts ({ client = "0" }) or write '
                '"one", "split" or "shared"'
            )
        out: dict[str, str] = {}
        for host, text in value.items():
            if not isinstance(text, str) or not re.fullmatch(
                r"\d+(-\d+)?(,\d+(-\d+)?)*", text.replace(" ", "")
            ):
                raise ValueError(
                    f'cpus.{host} = {text!r} is not a CPU list: write e.g. "0", "1" or "0-1"'
                )
            out[str(host)] = text
        return out
    raise ValueError(
        f'cpus = {value!r} is not a placement: write "one" (every process of the testbed '
        'on one CPU), "split" (the DUT on CPUs of its own), "shared" (anywhere) or a map '
        '{ HOST = "CPU list" }'
    )


CpuPlacement = Annotated[str | dict[str, str] | None, PlainValidator(_placement)]


class Testbed(StrictModel):
    __test__ = False  # not a pytest test class

    # The inventory: host name -> how to reach it (absent: a namespace here).
    hosts: dict[str, InventoryHost] = Field(default_factory=dict)
    """Where each host of the graph runs: a namespace here (the default), a machine over SSH, or an
    external device; see "Remote hosts" below.
    """
    # An inventory file of its own ([hosts.NAME] tables, the same keys), relative to
    # the scenario: one lab's inventory shared by many scenarios. Its relative key
    # and known_hosts paths are relative to it; [testbed.hosts] may not repeat a host.
    inventory: str | None = None
    """An inventory file of its own, holding `[hosts.NAME]` tables with the same keys (one lab's
    inventory shared by many scenarios); relative to the scenario, and its relative key and
    known_hosts paths relative to it; a host may not be in both.
    """

    @model_validator(mode="before")
    @classmethod
    def _read_inventory(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("inventory"), str):
            return data
        context = info.context if isinstance(info.context, dict) else {}
        if context.get("check_files") is False:
            return data  # a scenario rebuilt from run.json: its hosts are merged already
        base = Path(context.get("base_dir") or Path.cwd())
        path = Path(data["inventory"]).expanduser()
        path = path if path.is_absolute() else base / path
        try:
            loaded = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ValueError(
                f"inventory {data['inventory']!r}: cannot read {path}: {exc}"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"inventory {path} is not TOML: {exc}") from None
        hosts = loaded.get("hosts")
        if set(loaded) - {"hosts"} or not isinstance(hosts, dict):
            raise ValueError(
                f"inventory {path} must hold [hosts.NAME] tables only "
                f"(found {', '.join(sorted(loaded)) or 'nothing'})"
            )
        own = dict(data.get("hosts") or {})
        for name, entry in hosts.items():
            if name in own:
                raise ValueError(
                    f"host {name!r} is in both [testbed.hosts] and inventory {path}: keep one"
                )
            if isinstance(entry, dict):
                entry = dict(entry)
                for key in ("ansible_ssh_private_key_file", "known_hosts"):
                    value = entry.get(key)
                    if isinstance(value, str) and not Path(value).expanduser().is_absolute():
                        entry[key] = str(path.parent / value)
            own[name] = entry
        return {**data, "hosts": own}

    link_rate: Rate = Field(
        default=None, description="Every link's rate (tbf shaping); unset: unlimited."
    )
    baseline: Literal["forward", "direct"] = "forward"
    """What each variant is compared against: `forward` = the same path through the DUT with no
    mechanism (plain forwarding); `direct` = client and server on one link, no DUT.
    """
    family: Literal["ipv4", "ipv6"] = "ipv4"
    """Address family of the testbed (198.18.0.0/15 or 2001:2::/48)."""
    # Extra addresses beside the client and the server (document 004's 100 hosts a side).
    emulated_hosts: int = Field(default=0, ge=0, le=200)
    """Extra addresses beside the client (198.18.1.10 …) and the server (198.18.2.10 …), for
    workloads that spread traffic over many hosts (document 004's 100 hosts a side); ACL permits
    and NAT then cover each side's whole link.
    """
    # Segmentation/receive offloads (TSO, GSO, GRO) on every veth: "on" leaves the
    # kernel's veth defaults (TCP crosses the DUT as ~64 KB super-packets), "off"
    # turns them off so the DUT sees and filters every wire-size packet.
    offloads: Literal["on", "off"] = "on"
    """TSO, GSO and GRO on the testbed's veths: `"on"` leaves the kernel's defaults (a TCP stream
    crosses the DUT as ~64 KB super-packets, one rule evaluation each); `"off"` turns them off
    on every veth (`ethtool -K`, needs ethtool) so the DUT sees every wire-size packet. Use
    `"off"` when the figures claim a per-packet cost; run.json records the setting and what
    `ethtool -k` read back (docs/methodology.md, "Offloads").
    """
    # Where the testbed's processes run (secperf.testbed.placement): "one" (every
    # process on one CPU, the machine's noise on the others), "split" (the DUT on CPUs
    # of its own, its receive processing steered there; 3+ CPUs), "shared" (anywhere),
    # or host -> CPU list ("0", "1", "0-1"). Absent: "one" on a namespace testbed,
    # nothing on real hosts. `pin` is the map form's older name (read into cpus).
    cpus: CpuPlacement = None
    """Where the testbed's processes run (docs/methodology.md, "Placement"). `"one"`: every process
    the testbed starts (engines, daemons, servers, a VM's qemu) in one cpuset on the last CPU
    this process may use, and secperf's own process on the others: the kernel's forwarding
    follows the processes (a veth hands packets on in the sender's softirq), so a rate is the
    CPU cost of the whole path per unit of work. `"split"`: the DUT (every forwarding host) on
    the last CPU with its interfaces' receive processing steered there (RPS), the end hosts on
    the CPU before it, secperf on the rest; needs at least 3 CPUs and is refused otherwise.
    `"shared"`: no placement. A table, e.g. `{ client = "0", server = "0", dut = "1" }` (lists
    as cpuset writes them: `"0"`, `"0-1"`, `"0,2"`), puts each named host's processes on those
    CPUs; the kernel's forwarding work is not moved by it (a variant's `rps` mechanism, below,
    moves a host's receive processing). A host the testbed lacks or a CPU this machine does not
    have stops the run before anything is built; on real hosts (`[testbed.hosts]`) only
    `"shared"` is accepted. run.json records the placement (`placement`).
    """
    # Host -> CPU quota as a fraction of one CPU (0.5 = half of one CPU, 2 = two CPUs):
    # its processes (a daemon) held to that share by the kernel's CFS bandwidth control.
    cpu_quota: dict[str, Annotated[float, Field(ge=0.01, le=256)]] = Field(default_factory=dict)
    """Hold a host's processes to that share of one CPU (`0.5` = half a CPU, `2` = two CPUs), 0.01
    … the machine's CPUs: the kernel's CFS bandwidth control (cgroup v1 `cpu.cfs_quota_us` over
    a 100 ms `cpu.cfs_period_us`, v2 `cpu.max`), e.g. `{ dut = 0.25 }` puts a user-space
    mechanism's daemons in the CPU-bound regime a slow machine had. It caps processes only:
    forwarding and netfilter work in softirq is charged to whatever task it interrupts, not held
    by the DUT's quota (docs/methodology.md, "Regime controls"). Namespace hosts only.
    """
    # The VM that variants with backend = "vm" use as the DUT (defaults: the paper's
    # 1 core, 256 MB; accel auto = KVM where it works, else TCG).
    vm: VmSection = Field(default_factory=VmSection)
    """The VM that variants with `backend = "vm"` use as the DUT ([testbed.vm] below)."""

    @model_validator(mode="before")
    @classmethod
    def _pin_is_cpus(cls, data: Any) -> Any:
        """`pin = { client = "0" }` is the map form of `cpus`, under its older name."""
        if not isinstance(data, dict) or "pin" not in data:
            return data
        if data.get("cpus") is not None:
            raise ValueError(
                "both pin and cpus place the hosts: keep cpus (pin is its older name for "
                'the map form, cpus = { client = "0" })'
            )
        rest = {k: v for k, v in data.items() if k != "pin"}
        return {**rest, "cpus": data["pin"]} if data["pin"] else rest

    def placement_setting(self, lab: bool) -> str | dict[str, str] | None:
        """The placement to build with: the scenario's, else "one" on a namespace
        testbed and none on real hosts (each runs on its own CPUs)."""
        if self.cpus is not None:
            return self.cpus
        return None if lab else "one"

    @property
    def pin(self) -> dict[str, str]:
        """The map form of `cpus` (host -> CPU list), empty for the named placements."""
        return dict(self.cpus) if isinstance(self.cpus, dict) else {}

    @property
    def rate_bps(self) -> int | None:
        return self.link_rate


HostRole = Literal["client", "server", "dut", "gateway", "attacker", "ids", "switch"]
HostName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,19}$")]
QueueDuration = Annotated[
    float | None, PlainValidator(bounded(parse_duration, 0.001, 10, "a queue"))
]


class TopologyHost(StrictModel):
    """One host of the graph: its name, role and zone (routers have none)."""

    name: HostName
    """The host's name (lowercase letters, digits, '-'; at most 20 characters)."""
    role: HostRole
    """What the host is: an end host (`client`, `server`, `attacker`), a forwarding host (`dut`,
    `gateway`), an `ids` on a mirror, or a `switch`.
    """
    zone: str | None = None
    """The zone an end host belongs to (routers have none)."""


class TopologyLink(StrictModel):
    """One link: the two hosts it joins, its rate, queue and offloads."""

    between: list[HostName] = Field(min_length=2, max_length=2)
    """The two hosts the link joins."""
    rate: Rate = None
    """The link's rate (tbf); unset: [testbed] link_rate."""
    queue: QueueDuration = None
    """The shaper's queue, as the time it holds at the link's rate; unset: the default queue."""
    offloads: Literal["on", "off"] | None = None
    """TSO, GSO and GRO on this link's veths; unset: [testbed] offloads."""


class TopologyZone(StrictModel):
    """A zone's LAN: N client and M server hosts on a switch, joined to `router`.

    The hosts are named `<zone>-c1..`, `<zone>-s1..`; the switch `<zone>-sw`; each
    host's link to the switch has `rate` (else [testbed] link_rate)."""

    clients: int = Field(default=0, ge=0, le=50)
    """Client hosts of the zone, named `<zone>-c1` …"""
    servers: int = Field(default=0, ge=0, le=50)
    """Server hosts of the zone, named `<zone>-s1` …"""
    router: HostName = "dut"
    """The host the zone's switch is joined to."""
    rate: Rate = None
    """Each host's link to the switch; unset: [testbed] link_rate."""

    @model_validator(mode="after")
    def _not_empty(self) -> TopologyZone:
        if self.clients + self.servers == 0:
            raise ValueError("a zone needs at least one client or server host")
        return self


class TopologySection(StrictModel):
    """The testbed graph (docs/scenario-format.md, [topology]). Absent: the
    standard client – dut – server plan."""

    hosts: list[TopologyHost] = Field(default_factory=list)
    """`name`: `[a-z][a-z0-9-]*`, at most 20 characters; `role`: `client`, `server`, `dut`,
    `gateway` (these two forward), `attacker`, `ids`, or `switch` (an Ethernet bridge with no
    address: every host linked to it shares one subnet); `zone`: any name (`inside`, `outside`,
    `dmz`, …), optional.
    """
    links: list[TopologyLink] = Field(default_factory=list)
    """`between = ["a", "b"]`, two hosts; `rate`: this link's rate (else `[testbed] link_rate`,
    else unlimited); `queue`: how long a shaped link may buffer (a duration, 1 ms … 10 s;
    default 50 ms, 500 ms below 1 Mbit/s); `offloads`: `"on"`/`"off"` for this link (else
    `[testbed] offloads`).
    """
    zones: dict[HostName, TopologyZone] = Field(default_factory=dict)
    """Zones by name: each a LAN of client and server hosts on a switch, joined to a router
    ([topology.zones.NAME] below).
    """

    @model_validator(mode="after")
    def _something(self) -> TopologySection:
        if not self.hosts and not self.zones:
            raise ValueError("[topology] needs hosts (with links) or zones")
        return self
