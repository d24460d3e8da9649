"""The proxy kind's configuration files: squid's, ftp-proxy's, dante's, the rule
helper and its rule file, and the DUT's nft table; secperf.mechanisms.proxy starts
the daemons with them."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from secperf.mechanisms import squid
from secperf.mechanisms.base import (
    MechanismContext,
)
from secperf.mechanisms.proxy.spec import (
    CACHE_MEM_MB,
    DNS_ADDRESS,
    FORWARD_PORT,
    FTP_PASV_PORTS,
    FTP_PROXY_PORT,
    INTERCEPT_PORT,
    PYTHON,
    RULE_CACHE_TTL_S,
    RULE_FILE,
    RULE_HELPER,
    SOCKS_PORT,
    ProxySpec,
)
from secperf.services import dns
from secperf.services.ports import FTP_PORT, HTTP_PORT
from secperf.tools import find_program


def daemon_binary(name: str, package: str) -> str:
    return find_program(name, purpose="the proxy mechanism runs it on the DUT", package=package)


def filler_net(i: int) -> str:
    """The i-th never-matching address, from 198.19.0.0/17 (reserved for ACL generators;
    secperf.testbed.topology.ACL_RESERVED_NET4)."""
    return f"198.19.{(i // 250) % 128}.{i % 250 + 1}/32"


def service_name(ctx: MechanismContext) -> str:
    """squid's -n: names its /dev/shm segments and its folder; unique per run (table)
    and variant."""
    return squid.service(ctx.table, ctx.name)


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
    return squid.folder(service_name(ctx))


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
