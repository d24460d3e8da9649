"""Document 001's application-proxy firewall, built from real proxies on the DUT.

The paper loaded Raptor (an application-level proxy firewall) with HTTP and FTP.
secperf runs, in the DUT namespace:

- squid for HTTP, intercepting transparently: an nft `redirect` in the DUT's
  prerouting sends every forwarded TCP connection to nginx's port (HTTP_PORT) to
  squid's `http_port ... intercept`; squid opens its own connection to the server,
  so the server sees the DUT's address. A forward port (FORWARD_PORT) is open too.
- Debian's `ftp-proxy` (SuSE proxy-suite) for FTP, transparent the same way
  (`AllowTransProxy`): connections to vsftpd's FTP_PORT go to the proxy, which
  connects to the original destination in passive mode and offers the client
  passive ports on the DUT (FTP_PASV_PORTS).
- dnsmasq (secperf.services.dns) on the DUT's loopback with every testbed host's
  forward and PTR records, squid's only name server.

`level = "circuit"` runs dante (`danted`, SOCKS5) instead: a circuit-level proxy
the clients must name (the mix workload then opens every connection, HTTP, FTP
control and passive data, through it with SOCKS5 CONNECT); no interception, no
DNS server (dante would ask the host's resolver, outside the testbed, so
`dns_lookups` must be off), no cache. Its rule base, logging, cpus and memory
work as for squid.

The switches the paper turned, one key each:
- `rules`: N squid `http_access` rules; N-1 never match (sources and destinations
  from 198.19.0.0/16, which no testbed host has) and the one that admits the
  testbed comes `first` or `last` (`match`); anything else is denied. `deny` lists
  destination addresses refused before every other rule (for tests and demos).
  ftp-proxy has no rule base of its own: the same N rules are an nft chain on the
  DUT's input path that every packet to ftp-proxy's ports (control and passive data)
  walks, the paper's FTP daemon, which checked "each packet via the rule base".
- `rule_cache` (Raptor's HTTP rule cache, `-f`): set, squid asks an external ACL
  helper (a small program of this module that walks the N rules in order) for each
  request's verdict, and keeps the helper's answers for 60 s (`true`: the paper's
  "rule base checked once a minute") or keeps none (`false`: every request walks the
  rule base); unset, squid's own `http_access` list holds the rules, as before.
- `dns_lookups`: on, the admitting rule also needs the client's reverse name to be
  in the testbed's domain (`srcdomain`), and squid's name cache is off
  (`fqdncache_size 0`), so every request makes a PTR look-up against dnsmasq, like
  a proxy that resolves every client; off, squid asks no name server at all.
- `cache`: squid's memory object cache (64 MB) on, or `cache deny all`.
- `logging`: "off" (no access log), "file" (squid's access log, ftp-proxy's log),
  "verbose" (also request and reply headers, and squid's debug level 2).
- `cpus` (1 or 2: a cpuset of the first CPUs) and `memory` (a v1 cgroup memory
  limit) confine both proxies; their CPU time still counts for the DUT's host.

Each daemon is started in the foreground through `host.spawn` (the host's cgroup
and the ledger) and stopped in `release()`; every file is in the run directory.
squid, which drops to the `proxy` user, writes its pid, cache log and access log in a
folder of its own (mechanisms/privdrop.py: root's, under /run/secperf-daemons), copied
back into the run directory when it stops: no directory of the run changes hands.
squid keeps shared memory in /dev/shm outside the namespace: each variant's squid
gets its own service name (`-n`), so the segments never clash between runs.
"""

from __future__ import annotations

import ipaddress
import re
import time
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PlainValidator, field_validator, model_validator

from secperf.engine import DATA_PORTS
from secperf.errors import MechanismError
from secperf.mechanisms import privdrop
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
    apply_files,
)
from secperf.schema.fields import bounded
from secperf.schema.units import parse_size
from secperf.services import dns
from secperf.services.nginx import accepts
from secperf.services.ports import FTP_PORT, HTTP_PORT
from secperf.testbed import cgroups
from secperf.testbed.hosts import Host, ManagedProcess
from secperf.testbed.ledger import Ledger
from secperf.tools import find_program

FORWARD_PORT = 3128
INTERCEPT_PORT = 3129
FTP_PROXY_PORT = 2121
SOCKS_PORT = 1080
# ftp-proxy binds each passive port without SO_REUSEADDR, so a port stays unusable
# while a closed transfer on it sits in TIME_WAIT (60 s): a range of 58 ports failed
# ~6 % of fetches at 12 virtual clients. 10000 ports hold ~160 FTP fetches/s. They lie
# outside the engine's ports, so an engine workload beside the proxy is not caught.
FTP_PASV_PORTS = (40000, 49999)
assert FTP_PASV_PORTS[1] < 61000 and not (DATA_PORTS[0] <= FTP_PASV_PORTS[1] <= DATA_PORTS[1])
DNS_ADDRESS = "127.0.0.1"
CACHE_MEM_MB = 64
RULE_CACHE_TTL_S = 60  # Raptor's HTTPD rule cache "is updated by the rule base once per minute"
PYTHON = "/usr/bin/python3"  # runs the rule helper as squid's user (the venv may be unreadable)
RULE_HELPER = "rule_helper.py"
RULE_FILE = "rules.txt"
READY_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0

Match = Literal["first", "last"]
Level = Literal["application", "circuit"]
Logging = Literal["off", "file", "verbose"]


def _proxy_memory(value: object) -> int | None:
    return (
        None
        if value is None
        else bounded(parse_size, 16 * 2**20, 64 * 2**30, "a memory limit")(value)
    )


ProxyMemory = Annotated[int | None, PlainValidator(_proxy_memory)]


class ProxySpec(MechanismSpec):
    """Document 001's application-proxy firewall on the DUT: squid (HTTP) and ftp-proxy
    (FTP) intercepting transparently, with the paper's switches: the rule base size and
    where the admitting rule sits, reverse DNS look-ups of clients against a testbed DNS
    server, the object cache, access logging, the proxy's CPUs and a memory limit."""

    kind: Literal["proxy"] = "proxy"
    rules: int = Field(default=4, ge=1, le=10_000)
    match: Match = "last"
    dns_lookups: bool = True
    cache: bool = True
    logging: Logging = "file"
    cpus: int | None = Field(default=None, ge=1, le=2)
    memory: ProxyMemory = None  # bytes
    deny: list[str] = Field(default_factory=list)
    # "circuit": dante (SOCKS5) instead of squid + ftp-proxy; clients name it.
    level: Level = "application"
    # Raptor's HTTP rule cache: the rule base in an external ACL helper whose verdicts
    # squid caches for RULE_CACHE_TTL_S (true) or not at all (false); None: http_access.
    rule_cache: bool | None = None

    @model_validator(mode="after")
    def _circuit_switches(self) -> ProxySpec:
        if self.level == "circuit" and self.rule_cache is not None:
            raise ValueError('level = "circuit" (dante) has no rule cache: leave rule_cache out')
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


def _binary(name: str, package: str) -> str:
    return find_program(name, purpose="the proxy mechanism runs it on the DUT", package=package)


def filler_net(i: int) -> str:
    """The i-th never-matching address, from 198.19.0.0/16 (reserved for ACL generators)."""
    return f"198.19.{(i // 250) % 250}.{i % 250 + 1}/32"


def service_name(ctx: MechanismContext) -> str:
    """squid's -n: names its /dev/shm segments; unique per run (table) and variant."""
    return re.sub(r"[^A-Za-z0-9]", "", f"{ctx.table}{ctx.name}")[:48]


SHM_DIR = Path("/dev/shm")
SHM_SEGMENTS = ("cf__metadata.shm", "cf__queues.shm", "cf__readers.shm")


def shm_paths(ctx: MechanismContext) -> list[Path]:
    """The shared-memory files squid makes under its service name, outside the
    namespace; recorded in the ledger before squid starts and removed at release."""
    return [SHM_DIR / f"{service_name(ctx)}-{seg}" for seg in SHM_SEGMENTS]


# squid's external ACL helper for `rule_cache`: reads "SRC DST" lines, answers OK or ERR
# from the first rule of the rule file that matches (none: ERR), one line each, in order.
RULE_HELPER_SOURCE = """\
import ipaddress
import sys

rules = []
with open(sys.argv[1]) as f:
    for line in f:
        verdict, src, dst = line.split()
        rules.append((verdict == "allow", ipaddress.ip_network(src), ipaddress.ip_network(dst)))
for line in sys.stdin:
    answer = "ERR"
    try:
        src, dst = (ipaddress.ip_address(x) for x in line.split()[:2])
    except ValueError:
        src = dst = None
    if src is not None:
        for allow, s, d in rules:
            if src in s and dst in d:
                answer = "OK" if allow else "ERR"
                break
    sys.stdout.write(answer + "\\n")
    sys.stdout.flush()
"""


ANY = "0.0.0.0/0"


def rule_lines(proxy: ProxySpec) -> list[tuple[str, str]]:
    """The rule base as (source, destination) pairs, all admitting: N-1 that never
    match and the testbed's, first or last as `match` says."""
    fillers = [(filler_net(2 * i), filler_net(2 * i + 1)) for i in range(proxy.rules - 1)]
    admit = ("198.18.0.0/16", ANY)
    return [admit, *fillers] if proxy.match == "first" else [*fillers, admit]


def render_rule_file(proxy: ProxySpec) -> str:
    return "".join(f"allow {s} {d}\n" for s, d in rule_lines(proxy))


def squid_copies(proxy: ProxySpec, directory: Path) -> list[Path]:
    """The files squid reads, copied into its folder."""
    extra = [RULE_HELPER, RULE_FILE] if proxy.rule_cache is not None else []
    return [directory / name for name in ("hosts", *extra)]


def squid_writes(proxy: ProxySpec) -> tuple[str, ...]:
    """The files squid writes (its access log only when logging is on)."""
    return ("cache.log", "squid.pid", *(("access.log",) if proxy.logging != "off" else ()))


def squid_dir(ctx: MechanismContext) -> Path:
    """The folder squid writes in (privdrop.make_folder), one per run and variant."""
    return privdrop.RUN_ROOT / service_name(ctx)


def render_squid(proxy: ProxySpec, ctx: MechanismContext, directory: Path) -> str:
    """squid's config; it reads `directory`'s files as root, and writes only in its own
    folder (squid_dir)."""
    d = squid_dir(ctx)
    lines = [
        f"# written by secperf: proxy rules={proxy.rules} match={proxy.match} "
        f"dns_lookups={proxy.dns_lookups} cache={proxy.cache} logging={proxy.logging}",
        f"http_port {FORWARD_PORT}",
        f"http_port {INTERCEPT_PORT} intercept",
        f"pid_filename {d}/squid.pid",
        f"cache_log {d}/cache.log",
        f"coredump_dir {d}",
        "cache_store_log none",
        "logfile_rotate 0",
        "shutdown_lifetime 1 seconds",
        "visible_hostname secperf-proxy",
        "cache_effective_user proxy",
        f"dns_nameservers {DNS_ADDRESS}",
        "client_persistent_connections on",
        "server_persistent_connections on",
        "forwarded_for delete",
        "via off",
    ]
    if proxy.dns_lookups:
        lines += [
            "hosts_file none",
            "fqdncache_size 0",
            f"acl testbed_names srcdomain .{dns.DOMAIN}",
        ]
    else:
        # squid 5 still resolves each new client in the background now and then;
        # with the testbed's names in its own hosts table it needs no server to.
        lines += [f"hosts_file {d}/hosts"]
    if proxy.cache:
        lines += [
            f"cache_mem {CACHE_MEM_MB} MB",
            "maximum_object_size_in_memory 1 MB",
            "refresh_pattern . 60 100% 600 override-expire ignore-no-store ignore-private",
        ]
    else:
        lines += ["cache_mem 0 MB", "cache deny all"]
    if proxy.logging == "off":
        lines += ["access_log none", "debug_options ALL,0"]
    else:
        fmt = "%ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %<a %mt"
        if proxy.logging == "verbose":
            fmt += ' "%>h" "%<h"'
            lines += ["debug_options ALL,2"]
        else:
            lines += ["debug_options ALL,1"]
        lines += [f"logformat secperf {fmt}", f"access_log stdio:{d}/access.log secperf"]
    names = " testbed_names" if proxy.dns_lookups else ""
    if proxy.rule_cache is not None:
        # The rule base in a helper, its verdicts cached for a minute or not at all
        # (cache=0: squid keeps no entry, so every request asks the helper).
        keep = (
            f"ttl={RULE_CACHE_TTL_S} negative_ttl={RULE_CACHE_TTL_S}"
            if proxy.rule_cache
            else "ttl=0 negative_ttl=0 cache=0"
        )
        acls = [
            f"external_acl_type secperf_rules {keep} children-startup=2 children-max=8 "
            f"%SRC %DST {PYTHON} -S {d}/{RULE_HELPER} {d}/{RULE_FILE}",
            "acl rulebase external secperf_rules",
        ]
        if proxy.deny:
            acls.append("acl denied dst " + " ".join(proxy.deny))
        lines += acls
        if proxy.deny:
            lines.append("http_access deny denied")
        lines += [f"http_access allow rulebase{names}", "http_access deny all"]
        return "\n".join(lines) + "\n"
    # The rule base: the admitting rule first or last among `rules`.
    admit = "http_access allow testbed" + names
    fillers: list[str] = []
    acls = ["acl testbed src 198.18.0.0/16"]
    for i in range(proxy.rules - 1):
        acls += [f"acl r{i}s src {filler_net(2 * i)}", f"acl r{i}d dst {filler_net(2 * i + 1)}"]
        fillers.append(f"http_access allow r{i}s r{i}d")
    if proxy.deny:
        acls.append("acl denied dst " + " ".join(proxy.deny))
    lines += acls
    if proxy.deny:
        lines.append("http_access deny denied")
    lines += [admit, *fillers] if proxy.match == "first" else [*fillers, admit]
    lines += ["http_access deny all"]
    return "\n".join(lines) + "\n"


def render_ftp_proxy(proxy: ProxySpec, ctx: MechanismContext, directory: Path) -> str:
    d = directory.resolve()
    # Always a file of the run (never /dev/null: ftp-proxy replaces its log file,
    # device or not); logging off keeps only errors, no line per request.
    level = {"off": "ERR", "file": "INF", "verbose": "DBG"}[proxy.logging]
    return (
        "\n".join(
            [
                "# written by secperf: transparent FTP proxy on the DUT",
                "[-Global-]",
                "ServerType standalone",
                f"Port {FTP_PROXY_PORT}",
                "AllowTransProxy yes",
                # A sanity default the program insists on; transparent mode uses the
                # original destination of each connection instead.
                f"DestinationAddress {ctx.plan.server_addr}",
                f"DestinationPort {FTP_PORT}",
                "DestinationTransferMode passive",
                f"PassiveMinDataPort {FTP_PASV_PORTS[0]}",
                f"PassiveMaxDataPort {FTP_PASV_PORTS[1]}",
                # Each connection is a forked child that would start at the range's
                # first port: concurrent children collide and give up. Random ports.
                "SockBindRand yes",
                "MaxClients 512",
                "ForkLimit 100000",
                "TimeOut 60",
                f"LogDestination {d}/ftp-proxy.log",
                f"LogLevel {level}",
                f"PidFile {d}/ftp-proxy.pid",
            ]
        )
        + "\n"
    )


def render_danted(proxy: ProxySpec, ctx: MechanismContext, directory: Path) -> str:
    """dante's config: SOCKS5 on every DUT address, out by the route to each server;
    `rules` socks rules with the admitting one first or last, `deny` blocked first."""
    d = directory.resolve()
    topology = ctx.topology
    host = ctx.hosts[0] if ctx.hosts else "dut"
    outs = (
        sorted(
            {topology.address(host, lk.name) for lk in topology.links_of(host) if host in lk.addr4}
        )
        if topology is not None
        else [ctx.plan.server_addr]
    )
    log = {
        "off": "error",
        "file": "connect disconnect error",
        "verbose": "connect disconnect error iooperation",
    }[proxy.logging]
    lines = [
        f"# written by secperf: proxy level=circuit rules={proxy.rules} match={proxy.match} "
        f"logging={proxy.logging}",
        f"logoutput: {d}/danted.log",
        f"internal: 0.0.0.0 port = {SOCKS_PORT}",
        *(f"external: {a}" for a in outs),
        "external.rotation: route",
        "clientmethod: none",
        "socksmethod: none",
        "user.privileged: root",
        "user.unprivileged: nobody",
        "timeout.io: 60",
        f"debug: {1 if proxy.logging == 'verbose' else 0}",
        "client pass { from: 198.18.0.0/15 to: 0.0.0.0/0 log: error }",
        "client block { from: 0.0.0.0/0 to: 0.0.0.0/0 log: error }",
    ]
    for item in proxy.deny:
        net = ipaddress.ip_network(item, strict=False)  # dante wants the prefix length
        lines.append(f"socks block {{ from: 0.0.0.0/0 to: {net}\n  log: connect error\n}}")
    # One option a line: dante reads `command:` and `log:` as lists up to the next keyword.
    admit = (
        f"socks pass {{ from: 198.18.0.0/16 to: 198.18.0.0/16\n  command: connect\n  log: {log}\n}}"
    )
    fillers = [
        f"socks pass {{ from: {filler_net(2 * i)} to: {filler_net(2 * i + 1)}\n"
        "  command: connect\n}"
        for i in range(proxy.rules - 1)
    ]
    lines += [admit, *fillers] if proxy.match == "first" else [*fillers, admit]
    lines.append("socks block { from: 0.0.0.0/0 to: 0.0.0.0/0\n  log: connect error\n}")
    return "\n".join(lines) + "\n"


def render_nft(table: str, proxy: ProxySpec | None = None) -> str:
    """The redirect to the proxies and, with `proxy`, its rule base for FTP: a chain
    every packet to ftp-proxy's ports walks (the admitting rule first or last)."""
    ftp_rules = ""
    if proxy is not None:
        walk = "".join(
            f"    ip saddr {s}" + (f" ip daddr {d}" if d != ANY else "") + " accept\n"
            for s, d in rule_lines(proxy)
        )
        ftp_rules = (
            "  chain ftp_rules {\n"
            f"{walk}"
            "    drop\n"
            "  }\n"
            "  chain input {\n"
            "    type filter hook input priority filter; policy accept;\n"
            f"    tcp dport {{ {FTP_PROXY_PORT}, {FTP_PASV_PORTS[0]}-{FTP_PASV_PORTS[1]} }} "
            "jump ftp_rules\n"
            "  }\n"
        )
    return (
        f"# secperf proxy: forwarded HTTP and FTP connections go to the proxies\n"
        f"table ip {table} {{\n"
        "  chain prerouting {\n"
        "    type nat hook prerouting priority dstnat; policy accept;\n"
        f"    tcp dport {HTTP_PORT} redirect to :{INTERCEPT_PORT}\n"
        f"    tcp dport {FTP_PORT} redirect to :{FTP_PROXY_PORT}\n"
        # Clients that ignore the address in the proxy's PASV reply (curl by default)
        # connect to the server's address on the proxy's passive port: to the proxy.
        f"    tcp dport {FTP_PASV_PORTS[0]}-{FTP_PASV_PORTS[1]} redirect\n"
        "  }\n"
        f"{ftp_rules}"
        "}\n"
    )


def _cpu_list(n: int) -> list[int]:
    available = sorted(cgroups.available_cpus())
    if n > len(available):
        raise MechanismError(
            f"proxy cpus = {n}, but this machine gives secperf {len(available)} CPU(s)",
            fix=f"set cpus to at most {len(available)}",
        )
    return available[:n]


class Proxy(Mechanism):
    spec: ProxySpec

    def __init__(self, spec: ProxySpec) -> None:
        super().__init__(spec)
        self._procs: list[ManagedProcess] = []
        self._limits: cgroups.LimitGroup | None = None
        self.dns_server: dns.DnsServer | None = None
        self._shm: tuple[Ledger, list[Path]] | None = None
        self._squid: tuple[Ledger | None, Path] | None = None

    @staticmethod
    def directory(ctx: MechanismContext) -> Path:
        return ctx.files_dir / f"{ctx.name}.proxy"

    squid_dir = staticmethod(squid_dir)

    # -- files ---------------------------------------------------------------------
    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        if ctx.plan.family != 4:
            raise MechanismError(
                "the proxy mechanism intercepts IPv4 only for now",
                fix="set testbed.family = 4 for proxy variants",
            )
        if ctx.hook != "forward":
            raise MechanismError(
                "the proxy intercepts forwarded traffic: put it on a host that forwards",
                fix='set on = "dut" (or a gateway)',
            )
        d = self.directory(ctx)
        d.mkdir(parents=True, exist_ok=True)
        if self.spec.level == "circuit":
            if self.spec.dns_lookups or not self.spec.cache:
                raise MechanismError(
                    "the circuit-level proxy (dante) makes no DNS look-ups here and has no "
                    "cache: dns_lookups and cache do not apply to it",
                    fix='set dns_lookups = false and leave cache out for level = "circuit"',
                )
            (d / "danted.conf").write_text(render_danted(self.spec, ctx, d))
            return []
        (d / "squid.conf").write_text(render_squid(self.spec, ctx, d))
        topology = ctx.topology
        (d / "hosts").write_text(dns.render_hosts(topology) if topology is not None else "")
        if self.spec.rule_cache is not None:
            (d / RULE_HELPER).write_text(RULE_HELPER_SOURCE)
            (d / RULE_FILE).write_text(render_rule_file(self.spec))
        (d / "ftp-proxy.conf").write_text(render_ftp_proxy(self.spec, ctx, d))
        nft = ctx.files_dir / f"{ctx.name}.nft"
        nft.write_text(render_nft(f"{ctx.table}_proxy", self.spec))
        return [RenderedFile(nft, "nft")]

    def backends(self) -> set[str]:
        return {"nft"}

    # -- life cycle ------------------------------------------------------------------
    def apply(self, dut: Host, ctx: MechanismContext) -> None:
        self.release(dut, ctx)
        d = self.directory(ctx)
        try:
            self._start_limits(dut, ctx)
            if self.spec.level == "circuit":
                self._start_danted(dut, d)
                return
            if self.spec.dns_lookups:
                if ctx.topology is None:
                    raise MechanismError(
                        "the proxy's DNS server needs the testbed's topology for its records",
                        fix="apply the mechanism through the runner (it passes the topology)",
                    )
                self.dns_server = dns.start_dns(dut, d / "dns", DNS_ADDRESS, ctx.topology)
                self._procs.append(self.dns_server.process)
            self._start_squid(dut, ctx, d)
            self._start_ftp_proxy(dut, d)
            apply_files(dut, ctx.rendered, "nft", ctx.plan.family)
        except BaseException:
            self.release(dut, ctx)
            raise

    def release(self, dut: Host, ctx: MechanismContext) -> None:
        """Stop the proxies and the DNS server; the redirect goes with reset_dut."""
        while self._procs:
            self._procs.pop().stop(timeout=STOP_TIMEOUT_S)
        if self._squid is not None:  # its logs come back to the run directory
            ledger, own = self._squid
            privdrop.collect(own, ["access.log", "cache.log"], self.directory(ctx))
            privdrop.remove_folder(ledger, own)
            self._squid = None
        if self._shm is not None:  # squid leaves its segments behind when stopped
            ledger, paths = self._shm
            for path in paths:
                path.unlink(missing_ok=True)
                ledger.remove("file", path=str(path))
            self._shm = None
        self.dns_server = None
        if self._limits is not None:
            cgroups.remove_limits(_ledger(dut), self._limits)
            self._limits = None

    def _start_limits(self, dut: Host, ctx: MechanismContext) -> None:
        if self.spec.cpus is None and self.spec.memory is None:
            return
        self._limits = cgroups.create_limits(
            _ledger(dut),
            f"{dut.name}-proxy",
            cpus=_cpu_list(self.spec.cpus) if self.spec.cpus is not None else None,
            memory_bytes=self.spec.memory,
        )

    def _confine(self, proc: ManagedProcess) -> None:
        """Move a started daemon (and its helpers) into the cpuset and memory limit."""
        if self._limits is not None and not self._limits.adopt(proc.pid):
            raise MechanismError(
                f"{proc.label} (pid {proc.pid}) could not be moved into the proxy's cgroups",
                where=" ".join(str(d) for d in self._limits.dirs),
            )

    def _start_squid(self, dut: Host, ctx: MechanismContext, d: Path) -> None:
        binary = _binary("squid", "squid")
        # squid drops to the proxy user: it writes in a folder of its own, nothing else.
        own = squid_dir(ctx)
        privdrop.make_folder(
            dut.ledger, own, "proxy", squid_writes(self.spec), squid_copies(self.spec, d)
        )
        self._squid = (dut.ledger, own)
        conf = d / "squid.conf"
        check = dut.run([binary, "-k", "parse", "-f", str(conf.resolve())], check=False)
        if check.returncode != 0:
            raise MechanismError(
                f"squid rejects its generated config: {(check.stderr or check.stdout)[-500:]}",
                where=str(conf),
            )
        ledger = dut.ledger
        if ledger is not None:
            for path in shm_paths(ctx):
                ledger.add("file", path=str(path))
            self._shm = (ledger, shm_paths(ctx))
        with privdrop.open_nofollow(d / "squid.stderr") as err:
            proc = dut.spawn(
                [binary, "-N", "-n", service_name(ctx), "-f", str(conf.resolve())],
                stdout=err,
                stderr=err,
                label="squid",
            )
        self._procs.append(proc)
        self._wait(dut, proc, FORWARD_PORT, d / "squid.stderr", "squid")
        self._confine(proc)

    def _start_danted(self, dut: Host, d: Path) -> None:
        binary = _binary("danted", "dante-server")
        conf = d / "danted.conf"
        with (d / "danted.stderr").open("w") as err:
            proc = dut.spawn(
                [
                    binary,
                    "-f",
                    str(conf.resolve()),
                    "-N",
                    "1",
                    "-p",
                    str((d / "danted.pid").resolve()),
                ],
                stdout=err,
                stderr=err,
                label="danted",
            )
        self._procs.append(proc)
        # dante writes its errors (a config it rejects) to its log, not to stderr.
        self._wait(dut, proc, SOCKS_PORT, d / "danted.log", "danted")
        self._confine(proc)

    def socks_endpoint(self, ctx: MechanismContext) -> str | None:
        """ADDR:PORT the clients name as their SOCKS proxy (circuit level only)."""
        if self.spec.level != "circuit" or ctx.topology is None:
            return None
        host = ctx.hosts[0] if ctx.hosts else "dut"
        return f"{ctx.topology.primary_address(host)}:{SOCKS_PORT}"

    def _start_ftp_proxy(self, dut: Host, d: Path) -> None:
        binary = _binary("ftp-proxy", "ftp-proxy")
        conf = d / "ftp-proxy.conf"
        with (d / "ftp-proxy.stderr").open("w") as err:
            proc = dut.spawn(
                [binary, "-d", "-n", "-f", str(conf.resolve())],
                stdout=err,
                stderr=err,
                label="ftp-proxy",
            )
        self._procs.append(proc)
        self._wait(dut, proc, FTP_PROXY_PORT, d / "ftp-proxy.stderr", "ftp-proxy")
        self._confine(proc)

    @staticmethod
    def _wait(dut: Host, proc: ManagedProcess, port: int, log: Path, what: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if accepts(dut, "127.0.0.1", port):
                return
        said = log.read_text(errors="replace")[-800:] if log.is_file() else ""
        raise MechanismError(
            f"{what} did not accept on port {port} in {dut.name} within "
            f"{READY_TIMEOUT_S:.0f} s: {said.strip() or 'no output'}",
            where=str(log),
            fix=f"read {log.name}; check that the port is free on the DUT",
        )

    # -- DaemonMechanism -----------------------------------------------------------------
    def daemons(self) -> list[ManagedProcess]:
        return [p for p in self._procs if p.poll() is None]


def _ledger(dut: Host) -> Ledger:
    ledger = dut.ledger
    if ledger is None:
        raise MechanismError(
            f"host {dut.name} keeps no ledger: the proxy's cpus/memory need cgroups it records",
            fix="remove cpus and memory from the proxy on this host",
        )
    return ledger


KIND = MechanismKind(
    name="proxy",
    model=ProxySpec,
    runtime=Proxy,
    traits=frozenset({"proxies"}),
    forwarding_only=True,
)
