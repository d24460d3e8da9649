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
  from 198.19.0.0/17, which no testbed host has) and the one that admits the
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
folder of its own (services/privdrop.py: root's, under /run/secperf-daemons), copied
back into the run directory when it stops: no directory of the run changes hands.
squid keeps shared memory in /dev/shm outside the namespace: each variant's squid
gets its own service name (`-n`), so the segments never clash between runs.
"""

from __future__ import annotations

import time
from pathlib import Path

from secperf.errors import MechanismError
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    RenderedFile,
    apply_files,
)
from secperf.mechanisms.proxy.config import (
    RULE_HELPER_SOURCE,
    daemon_binary,
    render_danted,
    render_ftp_proxy,
    render_nft,
    render_rule_file,
    render_squid,
    service_name,
    squid_copies,
    squid_dir,
    squid_writes,
)
from secperf.mechanisms.proxy.spec import (
    DNS_ADDRESS,
    FORWARD_PORT,
    FTP_PROXY_PORT,
    READY_TIMEOUT_S,
    RULE_FILE,
    RULE_HELPER,
    SOCKS_PORT,
    STOP_TIMEOUT_S,
    ProxySpec,
)
from secperf.mechanisms.squid import Squid
from secperf.services import dns, privdrop
from secperf.services.nginx import accepts
from secperf.testbed import cgroups
from secperf.testbed.hosts import Host, ManagedProcess
from secperf.testbed.ledger import Ledger


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
        self._squid: Squid | None = None

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
            self._squid.stop(self.directory(ctx))
            self._squid = None
        if self.dns_server is not None:  # its query log comes back, its folder goes
            self.dns_server.stop()
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
        # squid drops to the proxy user: it writes in a folder of its own, nothing else.
        self._squid = Squid(service_name(ctx))
        proc = self._squid.start(
            dut,
            binary=daemon_binary("squid", "squid"),
            conf=d / "squid.conf",
            out_dir=d,
            writes=squid_writes(self.spec),
            copies=squid_copies(self.spec, d),
        )
        self._squid.wait(dut, FORWARD_PORT, d / "squid.stderr")
        self._confine(proc)

    def _start_danted(self, dut: Host, d: Path) -> None:
        binary = daemon_binary("danted", "dante-server")
        conf = d / "danted.conf"
        pid = (d / "danted.pid").resolve()
        argv = [binary, "-f", str(conf.resolve()), "-N", "1", "-p", str(pid)]
        # dante writes its errors (a config it rejects) to its log, not to stderr.
        self._launch(dut, argv, "danted", SOCKS_PORT, d, log=d / "danted.log")

    def socks_endpoint(self, ctx: MechanismContext) -> str | None:
        """ADDR:PORT the clients name as their SOCKS proxy (circuit level only)."""
        if self.spec.level != "circuit" or ctx.topology is None:
            return None
        host = ctx.hosts[0] if ctx.hosts else "dut"
        return f"{ctx.topology.primary_address(host)}:{SOCKS_PORT}"

    def _start_ftp_proxy(self, dut: Host, d: Path) -> None:
        binary = daemon_binary("ftp-proxy", "ftp-proxy")
        conf = d / "ftp-proxy.conf"
        argv = [binary, "-d", "-n", "-f", str(conf.resolve())]
        self._launch(dut, argv, "ftp-proxy", FTP_PROXY_PORT, d)

    def _launch(
        self, dut: Host, argv: list[str], label: str, port: int, d: Path, log: Path | None = None
    ) -> None:
        """Start a daemon with its output in `d`/LABEL.stderr (never through a link),
        wait until it accepts on `port` (its errors read from `log`, that file unless
        said) and move it into the proxy's limits."""
        out = d / f"{label}.stderr"
        with privdrop.open_nofollow(out) as err:
            proc = dut.spawn(argv, stdout=err, stderr=err, label=label)
        self._procs.append(proc)
        self._wait(dut, proc, port, log or out, label)
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
        squid = [self._squid.proc] if self._squid is not None and self._squid.proc else []
        return [p for p in [*self._procs, *squid] if p.poll() is None]


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
    # squid and ftp-proxy started before each test (the kept seed001 runs: 2-4 s a test
    # beyond the mix's fetches)
    apply_s=2.0,
    forwarding_only=True,
)
