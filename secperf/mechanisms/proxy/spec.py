"""The proxy kind's settings (ProxySpec) and the ports and limits its daemons use;
secperf.mechanisms.proxy explains each switch."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import Field, PlainValidator, field_validator, model_validator

from secperf.engine import DATA_PORTS
from secperf.mechanisms.base import (
    MechanismSpec,
)
from secperf.schema.fields import bounded
from secperf.schema.units import parse_size

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
    """The rule base: N−1 rules that never match (198.19.0.0/17 sources and destinations) and the
    one admitting the testbed; squid's `http_access` list (or the `rule_cache` helper's rule
    file) for HTTP, and an nft chain on the DUT's input path that every packet to ftp-proxy's
    ports walks for FTP.
    """
    match: Match = "last"
    """Where the rule that admits the testbed (198.18.0.0/16) sits."""
    dns_lookups: bool = True
    """Reverse look-ups of clients against the testbed's DNS server (dnsmasq on the DUT's
    loopback): the admitting rule also needs the client's name (`srcdomain .testbed.secperf`)
    and squid's name cache is off; `false`: squid resolves from its own hosts table of the
    testbed and asks no server.
    """
    cache: bool = True
    """Squid's memory object cache (64 MB); `false`: `cache deny all`."""
    logging: Logging = "file"
    """Squid's access log (verbose: with request and reply headers and debug level 2); ftp-proxy's
    log level ERR / INF / DBG.
    """
    cpus: int | None = Field(default=None, ge=1, le=2)
    """A cpuset of the first N CPUs for the proxies (v1 cpuset)."""
    memory: ProxyMemory = None  # bytes
    """A v1 cgroup memory limit for the proxies (`memory.limit_in_bytes`)."""
    deny: list[str] = Field(default_factory=list)
    """Destinations refused before every other rule (the proxy answers 403)."""
    # "circuit": dante (SOCKS5) instead of squid + ftp-proxy; clients name it.
    level: Level = "application"
    """`circuit`: dante (`danted`, SOCKS5 on port 1080 of every DUT address) instead of squid and
    ftp-proxy; needs `dns_lookups = false` and no `cache` key (below).
    """
    # Raptor's HTTP rule cache: the rule base in an external ACL helper whose verdicts
    # squid caches for RULE_CACHE_TTL_S (true) or not at all (false); None: http_access.
    rule_cache: bool | None = None
    """Raptor's HTTP rule cache: set, squid asks an external ACL helper (`rule_helper.py`, which
    walks the rule base in order) for each request's verdict and keeps its answers 60 s (`true`:
    the rule base consulted about once a minute per client and server) or not at all (`false`:
    `cache=0`, every request walks the rule base); unset, the rules are squid's own
    `http_access` list. Not with `level = "circuit"`.
    """

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
