"""A TLS-inspecting proxy on the DUT: squid with ssl-bump (Debian's squid-openssl).

An nft `redirect` in the DUT's prerouting sends every forwarded TCP connection to
nginx's HTTPS port (HTTPS_PORT) to squid's `https_port ... intercept ssl-bump`.
squid peeks at the client's hello (the SNI) and then, by `mode`:

- `bump`: decrypts. It opens its own TLS connection to the server, makes a
  certificate for the server's name signed by the run's proxy CA (made in
  render(), its key root's, 0600 inside the run directory, in the ledger from
  apply on and removed at teardown; `security_file_certgen` keeps the generated
  ones in a database in squid's own folder), and answers the client with it; each
  request is seen in clear, logged with its URL path, and re-encrypted toward
  the server. Clients must trust the proxy CA (`trusted_ca`).
- `splice`: looks at the SNI only and passes the bytes through: the client sees
  the server's own certificate; the log holds one line per connection, no path.

squid does not verify the server's certificate (the server's CA is the
workload's, made per run too); `cache deny all`, so every request goes to the
server. What the proxy cost is reported after each test (`observe`): squid's
CPU seconds and its helpers', its memory, and the connections it logged, with
CPU and memory per connection.

squid runs in the foreground through `host.spawn` (the DUT's cgroup and the
ledger) and stops in `release()`, through secperf.mechanisms.squid (the proxy
kind's squid too): it drops to `proxy` and writes only in a folder of its own,
root's, under /run/secperf-daemons; no directory of the run changes hands.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from secperf.errors import MechanismError
from secperf.mechanisms.base import (
    Mechanism,
    MechanismContext,
    MechanismKind,
    MechanismSpec,
    RenderedFile,
    apply_files,
)
from secperf.mechanisms.squid import Squid, give_tree
from secperf.mechanisms.squid import folder as squid_folder
from secperf.mechanisms.squid import service as squid_service
from secperf.services import pki
from secperf.services.ports import HTTPS_PORT
from secperf.testbed.hosts import Host, ManagedProcess
from secperf.testbed.procfs import rss_bytes
from secperf.tools import Tool, find_program

FORWARD_PORT = 3138  # squid insists on one plain http_port; never used by the tests
INTERCEPT_PORT = 3139
CERT_DB_MB = 16
CERTGEN = Path("/usr/lib/squid/security_file_certgen")
CLK_TCK = 100
WRITES = ("cache.log", "squid.pid", "access.log")

Mode = Literal["bump", "splice"]


class TlsInspectSpec(MechanismSpec):
    """A TLS-inspecting proxy on the DUT (squid ssl-bump): `bump` decrypts and
    re-encrypts every HTTPS connection with a per-run CA the clients trust; `splice`
    reads the SNI only and passes the connection through."""

    kind: Literal["tls_inspect"] = "tls_inspect"
    mode: Mode = "bump"
    """`bump`: decrypt every HTTPS connection, see each request, re-encrypt toward the server;
    `splice`: read the client's SNI only and pass the connection through.
    """


def service_name(ctx: MechanismContext) -> str:
    """squid's -n: names its /dev/shm segments and its folder; unique per run (table)
    and variant."""
    return squid_service(ctx.table, ctx.name, "tls")


def render_squid(spec: TlsInspectSpec, d: Path, own: Path) -> str:
    """squid's config: it reads the CA in `d` (as root, before it drops), and writes
    only in `own`, its folder (secperf.mechanisms.squid)."""
    d = d.resolve()
    action = "bump" if spec.mode == "bump" else "splice"
    fmt = "%ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %<a %ssl::>sni %ssl::bump_mode"
    return (
        "\n".join(
            [
                f"# written by secperf: tls_inspect mode={spec.mode}",
                f"http_port 127.0.0.1:{FORWARD_PORT}",
                f"https_port {INTERCEPT_PORT} intercept ssl-bump "
                f"tls-cert={d}/proxy-ca.pem tls-key={d}/proxy-ca.key "
                "generate-host-certificates=on dynamic_cert_mem_cache_size=16MB",
                f"sslcrtd_program {CERTGEN} -s {own}/ssl_db -M {CERT_DB_MB}MB",
                "sslcrtd_children 4 startup=1 idle=1",
                # The server's CA is the workload's: the proxy does not verify it.
                "tls_outgoing_options flags=DONT_VERIFY_PEER",
                "sslproxy_cert_error allow all",
                "acl step1 at_step SslBump1",
                "acl step2 at_step SslBump2",
                "ssl_bump peek step1",
                *(["ssl_bump stare step2"] if spec.mode == "bump" else []),
                f"ssl_bump {action} all",
                f"pid_filename {own}/squid.pid",
                f"cache_log {own}/cache.log",
                f"coredump_dir {own}",
                "cache_store_log none",
                "cache_mem 0 MB",
                "cache deny all",
                "logfile_rotate 0",
                "shutdown_lifetime 1 seconds",
                "visible_hostname secperf-tls-inspect",
                "cache_effective_user proxy",
                # The name the clients send as SNI resolves here, not by DNS.
                f"hosts_file {own}/hosts",
                "dns_nameservers 127.0.0.1",
                "client_persistent_connections on",
                "server_persistent_connections on",
                "forwarded_for delete",
                "via off",
                "debug_options ALL,1",
                f"logformat secperf {fmt}",
                f"access_log stdio:{own}/access.log secperf",
                "acl testbed src 198.18.0.0/15",
                "http_access allow testbed",
                "http_access deny all",
            ]
        )
        + "\n"
    )


def render_nft(table: str) -> str:
    return (
        "# secperf tls_inspect: forwarded HTTPS connections go to squid\n"
        f"table ip {table} {{\n"
        "  chain prerouting {\n"
        "    type nat hook prerouting priority dstnat; policy accept;\n"
        f"    tcp dport {HTTPS_PORT} redirect to :{INTERCEPT_PORT}\n"
        "  }\n"
        "}\n"
    )


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # utime, stime, cutime, cstime: fields 14-17 (1-based), 12-15 after the comm.
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parts = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(parts[1]) == pid:
            out.append(int(stat.parent.name))
    return out


class TlsInspect(Mechanism):
    spec: TlsInspectSpec

    def __init__(self, spec: TlsInspectSpec) -> None:
        super().__init__(spec)
        self._squid: Squid | None = None
        self._dir: Path | None = None
        self._cpu0 = 0.0
        self._lines0 = 0

    @staticmethod
    def directory(ctx: MechanismContext) -> Path:
        return ctx.files_dir / f"{ctx.name}.tls_inspect"

    # -- files ---------------------------------------------------------------------
    def render(self, ctx: MechanismContext) -> list[RenderedFile]:
        if ctx.plan.family != 4:
            raise MechanismError(
                "tls_inspect intercepts IPv4 only for now",
                fix="set testbed.family = 4 for tls_inspect variants",
            )
        if ctx.hook != "forward":
            raise MechanismError(
                "tls_inspect intercepts forwarded traffic: put it on a host that forwards",
                fix='set on = "dut" (or a gateway)',
            )
        d = self.directory(ctx)
        d.mkdir(parents=True, exist_ok=True)
        if not (d / "proxy-ca.pem").is_file():
            pki.make_ca(d, "proxy-ca", f"secperf inspecting proxy CA {ctx.table} {ctx.name}")
        own = squid_folder(service_name(ctx))
        (d / "squid.conf").write_text(render_squid(self.spec, d, own))
        (d / "hosts").write_text(f"{ctx.plan.server_addr} {pki.SERVER_NAME}\n")
        nft = ctx.files_dir / f"{ctx.name}.nft"
        nft.write_text(render_nft(f"{ctx.table}_tlsi"))
        return [RenderedFile(nft, "nft")]

    def backends(self) -> set[str]:
        return {"nft"}

    def trusted_ca(self, ctx: MechanismContext) -> Path | None:
        """The run's proxy CA: bumped connections carry certificates it signed."""
        return self.directory(ctx) / "proxy-ca.pem"

    # -- life cycle ------------------------------------------------------------------
    def apply(self, dut: Host, ctx: MechanismContext) -> None:
        self.release(dut, ctx)
        try:
            self._start_squid(dut, ctx, self.directory(ctx))
            apply_files(dut, ctx.rendered, "nft", ctx.plan.family)
        except BaseException:
            self.release(dut, ctx)
            raise

    def release(self, dut: Host, ctx: MechanismContext) -> None:
        """Stop squid (and its helpers); the redirect goes with reset_dut."""
        if self._squid is not None:
            self._squid.stop(self.directory(ctx))
            self._squid = None

    def _start_squid(self, dut: Host, ctx: MechanismContext, d: Path) -> None:
        binary = find_program(
            "squid", purpose="the tls_inspect mechanism runs it on the DUT", package="squid-openssl"
        )
        if not CERTGEN.is_file():
            raise MechanismError(
                f"{CERTGEN} is missing: this squid cannot make certificates (ssl-bump)",
                fix="apt-get install -y --no-install-recommends squid-openssl",
            )
        # The CA key: root's and 0600 (squid reads it before it drops), gone at teardown.
        key = d / "proxy-ca.key"
        ledger = dut.ledger
        if ledger is not None and not any(
            e["type"] == "file" and e.get("path") == str(key) for e in ledger.live_entries()
        ):
            ledger.add("file", path=str(key))
        for path in (key, d / "proxy-ca.pem"):
            os.chown(path, 0, 0, follow_symlinks=False)
            os.chmod(path, 0o600, follow_symlinks=False)

        def certificate_db(own: Path) -> None:
            # A fresh database per start (it caches certificates of the CA), made by root
            # in the folder no one else can write yet, then given to squid's helpers.
            db = own / "ssl_db"
            made = dut.run(
                [str(CERTGEN), "-c", "-s", str(db), "-M", f"{CERT_DB_MB}MB"], check=False
            )
            if made.returncode != 0:
                raise MechanismError(
                    f"security_file_certgen could not make its database: {made.stderr[-300:]}",
                    where=str(db),
                )
            give_tree(db)

        self._squid = Squid(service_name(ctx), label="squid")
        self._squid.start(
            dut,
            binary=binary,
            conf=d / "squid.conf",
            out_dir=d,
            writes=WRITES,
            copies=[d / "hosts"],
            prepare=certificate_db,
            fix="check that squid is squid-openssl (`squid -v` shows --with-openssl)",
        )
        self._dir = self._squid.dir
        # The plain port: a probe of the intercept port has no original destination,
        # and squid 5 stops accepting there after it.
        self._squid.wait(dut, FORWARD_PORT, d / "squid.stderr")
        self._cpu0, self._lines0 = self._cpu(), self._log_lines()

    # -- what it cost ------------------------------------------------------------------
    def _proc(self) -> ManagedProcess | None:
        proc = self._squid.proc if self._squid is not None else None
        return proc if proc is not None and proc.poll() is None else None

    def _pids(self) -> list[int]:
        proc = self._proc()
        return [] if proc is None else [proc.pid, *_children(proc.pid)]

    def _cpu(self) -> float:
        return sum(c for c in (_cpu_seconds(p) for p in self._pids()) if c is not None)

    def _log_lines(self) -> int:
        if self._dir is None:
            return 0
        log = self._dir / "access.log"
        if not log.is_file():
            return 0
        with log.open("rb") as f:
            return sum(1 for _ in f)

    def observe(self) -> dict[str, Any] | None:
        """squid's CPU (with its helpers) and log lines since the last test, its memory
        now, and both per connection it logged."""
        pids = self._pids()
        if not pids:
            return None
        cpu, lines = self._cpu(), self._log_lines()
        used, conns = cpu - self._cpu0, lines - self._lines0
        self._cpu0, self._lines0 = cpu, lines
        memory = rss_bytes(pids) or 0
        return {
            "kind": "tls_inspect",
            "mode": self.spec.mode,
            "cpu_seconds": used,
            "memory_bytes": memory,
            "logged": conns,
            # Bump logs one line a request, splice one a connection: per logged line.
            "cpu_us_per_logged": used * 1e6 / conns if conns else None,
            "memory_bytes_per_logged": memory / conns if conns else None,
        }

    # -- DaemonMechanism -----------------------------------------------------------------
    def daemons(self) -> list[ManagedProcess]:
        proc = self._proc()
        return [] if proc is None else [proc]


KIND = MechanismKind(
    name="tls_inspect",
    model=TlsInspectSpec,
    runtime=TlsInspect,
    known_tools=(
        Tool("squid", "squid-openssl", "tls_inspect"),
        Tool("openssl", "openssl", "tls_inspect's CA"),
    ),
    forwarding_only=True,
)
