"""nginx as the web server of `http` workloads, started in a testbed host.

Everything it writes (config, error log, pid file, temp dirs, the served files)
lives in one directory of the run; nothing under /etc or /var. It runs in the
foreground (`daemon off;`) as a ManagedProcess, so stopping it (or the testbed's
teardown) reaches its workers through the process group.

It listens on HTTP_PORT on every address of its host: 5380 lies inside the
engine's data-port range (secperf.mechanisms.base.DATA_PORTS, 5300–5399), which
every ACL the mechanisms write already permits. The engine server skips the
port when it picks a data port, since nginx holds it. With certificates
(`tls`), it also serves HTTPS on HTTPS_PORT (5381, in the same range): TLS 1.2
and 1.3, every cipher suite OpenSSL offers by default, a shared session cache
and session tickets, so the client's settings decide what is negotiated.
"""

from __future__ import annotations

import hashlib
import random
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from secperf.engine import DATA_PORTS
from secperf.errors import SecperfError
from secperf.services import pki, privdrop
from secperf.services.pki import Issued
from secperf.services.ports import HTTP_PORT as HTTP_PORT  # re-exported
from secperf.services.ports import HTTPS_PORT as HTTPS_PORT  # re-exported
from secperf.testbed.testbed import Host, ManagedProcess
from secperf.tools import Tool

assert DATA_PORTS[0] <= HTTP_PORT <= DATA_PORTS[1], "nginx must listen inside the ACL permit range"
assert DATA_PORTS[0] <= HTTPS_PORT <= DATA_PORTS[1], "nginx must listen inside the ACL permit range"
START_TIMEOUT_S = 10.0
NGINX_USER = "www-data"  # the workers' (Debian's base-passwd has it)
FILES = "files"  # URL prefix and directory under the web root
# `/k<n>/<file>` serves the same files on connections nginx closes after n requests
# (keepalive_requests in a location of its own, so that one server serves every n).
MAX_PER_CONNECTION = 100
# Connections the one worker takes (each a descriptor; twice as many allowed, for the
# files it opens): RFC 9411 §7.5/§7.9's concurrent connections up to ~120 k. nginx
# allocates a connection's structures up front, ~60 MB for this many.
NGINX_CONNECTIONS = 131_072
# Descriptors a worker needs beside its connections: listeners, logs, the files of
# the responses under way.
NGINX_FD_MARGIN = 256


class NginxError(SecperfError):
    """nginx could not be configured or did not start."""


NGINX = Tool("nginx", "nginx-light", "http workloads serve their files with it")


def nginx_path() -> str:
    return NGINX.find()


def file_name(size: int) -> str:
    return f"{size}.bin"


def url_for(size: int, per_connection: int | None = None) -> str:
    prefix = FILES if per_connection is None else f"k{per_connection}"
    return f"/{prefix}/{file_name(size)}"


def write_files(root: Path, sizes: list[int], per_connection: int | None = None) -> list[str]:
    """Write one file per size (random, incompressible; same bytes every run); return URLs."""
    directory = root / FILES
    directory.mkdir(parents=True, exist_ok=True)
    urls = []
    for size in sizes:
        path = directory / file_name(size)
        if not path.is_file() or path.stat().st_size != size:
            path.write_bytes(random.Random(size).randbytes(size))
        urls.append(url_for(size, per_connection))
    return urls


def _missing_modules(binary: str) -> set[str]:
    out = subprocess.run([binary, "-V"], capture_output=True, text=True, check=False)
    flags = (out.stdout + out.stderr).split()
    return {
        f.removeprefix("--without-http_").removesuffix("_module")
        for f in flags
        if f.startswith("--without-http_")
    }


def render_config(
    directory: Path,
    port: int,
    *,
    ipv6: bool,
    missing: set[str],
    tls: Issued | None = None,
    tls_resumption: bool = True,
    own: Path | None = None,
) -> str:
    """The whole nginx.conf: the master's files (pid, log) in `directory`, what the
    workers read and write (web root, temp dirs) in `own`, the folder of NGINX_USER's
    (`directory` when not given); HTTPS on HTTPS_PORT too when `tls` (the server's
    certificate and key, read by the master as root) is given."""
    d = directory.resolve()
    w = (own or directory).resolve()
    temps = [f"client_body_temp_path {w}/tmp/body;", f"proxy_temp_path {w}/tmp/proxy;"]
    for module in ("fastcgi", "uwsgi", "scgi"):
        if module not in missing:
            temps.append(f"{module}_temp_path {w}/tmp/{module};")
    listens = [f"listen {port} reuseport backlog=4096;"]
    if ipv6:
        listens.append(f"listen [::]:{port} ipv6only=on reuseport backlog=4096;")
    https: list[str] = []
    if tls is not None:
        https = [f"listen {HTTPS_PORT} ssl reuseport backlog=4096;"]
        if ipv6:
            https.append(f"listen [::]:{HTTPS_PORT} ssl ipv6only=on reuseport backlog=4096;")
        https += [
            f"ssl_certificate {tls.cert.resolve()};",
            f"ssl_certificate_key {tls.key.resolve()};",
            "ssl_protocols TLSv1.2 TLSv1.3;",
            # Resumption off: every handshake is a full one (certificate and signature),
            # whatever the client offers; a client cannot be trusted to resume nothing
            # (wrk, through OpenSSL's SSL_clear, offers the last session again).
            *(
                ("ssl_session_cache shared:secperf:16m;", "ssl_session_tickets on;")
                if tls_resumption
                else ("ssl_session_cache off;", "ssl_session_tickets off;")
            ),
        ]
    lines = [
        "# written by secperf: one run's web server, in the server's namespace",
        # The workers drop to an unprivileged user; they read the web root in a folder
        # of root's under /run/secperf-daemons (services/privdrop.py), not the run's.
        f"user {NGINX_USER};",
        "worker_processes 1;",
        f"worker_rlimit_nofile {2 * NGINX_CONNECTIONS};",
        f"pid {d}/nginx.pid;",
        f"error_log {d}/error.log warn;",
        f"events {{ worker_connections {NGINX_CONNECTIONS}; }}",
        "http {",
        "    access_log off;",
        # No sendfile: with it nginx sends a response's header and body as two writes,
        # which TCP_CORK (tcp_nopush) joins but holds back on kept-alive connections
        # (4 KiB, 8 connections: 18 k fetches/s corked, 78 k uncorked), and without
        # the cork a small response costs two segments (1 KiB, 10 a connection: 56-59 k);
        # read into its buffers, nginx writes header and body at once: 84-86 k in both
        # cases, and 256 KiB and a connection per fetch no slower (bench/nginx_configs.py,
        # docs/performance.md). The server, not the path, set those rates.
        "    sendfile off;",
        "    keepalive_requests 1000000;",
        "    default_type application/octet-stream;",
        *(f"    {t}" for t in temps),
        "    server {",
        *(f"        {x}" for x in listens),
        *(f"        {x}" for x in https),
        f"        root {w}/www;",
        *(
            f"        location /k{n}/ {{ alias {w}/www/{FILES}/; keepalive_requests {n}; }}"
            for n in range(1, MAX_PER_CONNECTION + 1)
        ),
        "    }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def accepts(host: Host, address: str, port: int) -> bool:
    family = "AF_INET6" if ":" in address else "AF_INET"
    probe = (
        "import socket,sys\n"
        f"s=socket.socket(socket.{family});s.settimeout(0.5)\n"
        f"sys.exit(s.connect_ex(({address!r},{port})))\n"
    )
    return host.run(["python3", "-c", probe], check=False, timeout=5).returncode == 0


@dataclass
class Nginx:
    """A running nginx: its directory, web root and process."""

    host: Host
    directory: Path
    port: int
    process: ManagedProcess
    address: str
    # HTTPS: the server's certificate and key (None: plain HTTP only).
    tls: Issued | None = None
    # The CA that signed `tls` (the clients trust it).
    ca: Issued | None = None
    urls: dict[int, str] = field(default_factory=dict)
    # The workers' folder (web root, temp dirs): root's, under privdrop.RUN_ROOT.
    own: Path | None = None

    @property
    def root(self) -> Path:
        return (self.own or self.directory) / "www"

    def alive(self) -> bool:
        return self.process.poll() is None

    def serve(self, sizes: list[int], per_connection: int | None = None) -> list[str]:
        """Make sure a file of each size is served; their URLs, in order (on
        connections closed after `per_connection` requests, when given)."""
        urls = write_files(self.root, sizes, per_connection)
        if per_connection is None:
            self.urls.update(zip(sizes, urls, strict=True))
        return urls

    def stop(self) -> None:
        self.process.stop()
        if self.own is not None:
            privdrop.remove_folder(self.host.ledger, self.own)

    def connection_limit(self) -> int:
        """The most connections its worker can hold: worker_connections, or fewer where
        the worker's open-file limit is lower (nginx cannot raise RLIMIT_NOFILE's hard
        limit without CAP_SYS_RESOURCE, and says so only in its error log)."""
        workers = self.host.run(["pgrep", "-P", str(self.process.pid)], check=False)
        limits = []
        for pid in workers.stdout.split():
            text = self.host.run(["cat", f"/proc/{pid}/limits"], check=False).stdout
            m = re.search(r"^Max open files\s+(\d+)", text, re.MULTILINE)
            if m:
                limits.append(int(m.group(1)))
        if not limits:
            return NGINX_CONNECTIONS  # not readable (a lab host's nginx): as configured
        return max(0, min(NGINX_CONNECTIONS, min(limits) - NGINX_FD_MARGIN))

    def error_log(self) -> str:
        path = self.directory / "error.log"
        return path.read_text(errors="replace")[-2000:] if path.is_file() else ""


def start_nginx(
    host: Host,
    directory: Path,
    address: str,
    *,
    port: int = HTTP_PORT,
    ipv6: bool = False,
    tls: Issued | None = None,
    tls_resumption: bool = True,
) -> Nginx:
    """Start nginx in `host` serving `directory`/www; wait until `address`:`port` accepts
    (and HTTPS_PORT too, with `tls`; `tls_resumption` False: no session is ever resumed)."""
    binary = nginx_path()
    directory.mkdir(parents=True, exist_ok=True)
    # The workers' folder: root's and writable by root only; nginx's master makes its
    # temp dirs in tmp/ and gives them to the workers.
    own = privdrop.RUN_ROOT / (
        "nginx-" + hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]
    )
    privdrop.make_folder(host.ledger, own, NGINX_USER, ())
    for sub in ("www", "tmp"):
        (own / sub).mkdir(mode=0o755)
    conf = directory / "nginx.conf"
    conf.write_text(
        render_config(
            directory,
            port,
            ipv6=ipv6,
            missing=_missing_modules(binary),
            tls=tls,
            tls_resumption=tls_resumption,
            own=own,
        )
    )
    errors = directory / "stderr.log"
    with errors.open("w") as err:
        proc = host.spawn(
            # -e: the log before the config is read; -p: no default prefix under /usr/share.
            [
                binary,
                "-p",
                str(directory.resolve()),
                "-e",
                str((directory / "error.log").resolve()),
                "-c",
                str(conf.resolve()),
                "-g",
                "daemon off;",
            ],
            stderr=err,
            label="nginx",
        )
    server = Nginx(
        host=host, directory=directory, port=port, process=proc, address=address, tls=tls, own=own
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not server.alive():
            break
        if accepts(host, address, port) and (tls is None or accepts(host, address, HTTPS_PORT)):
            return server
    server.stop()
    detail = (errors.read_text(errors="replace") if errors.is_file() else "") + server.error_log()
    raise NginxError(
        f"nginx did not accept on {address}:{port} in {host.name} within {START_TIMEOUT_S:.0f} s: "
        f"{detail.strip()[-500:] or 'no output'}",
        where=str(conf),
        fix="check that the port is free in that host and the config above loads (`nginx -t -c`)",
    )


# The one nginx of each testbed host, keyed by (testbed prefix, host name).
_SHARED: dict[tuple[str, str], Nginx] = {}


def testbed_nginx(prefix: str, host: Host, root: Path, address: str) -> Nginx:
    """The nginx of a testbed's host, started the first time a workload needs it and
    shared by every workload after it (http, mix, ...). Every nginx of secperf listens
    on HTTP_PORT with `reuseport`, so a second one in the same host would silently take
    half the new connections and answer 404 for files only the first one serves. It
    listens on both families whichever workload starts it (every testbed interface has
    its 2001:2::/48 address too, and a later workload may run over IPv6), and serves
    HTTPS too, with a CA and a certificate made for it (`ca` set; the certificate
    names SERVER_NAME, which the engine checks, so one fits both families)."""
    key = (prefix, host.name)
    server = _SHARED.get(key)
    if server is not None and server.alive():
        return server
    certs = root / "pki"
    ca = pki.make_ca(certs, "server-ca", "secperf server CA")
    server = start_nginx(
        host,
        root / "nginx",
        address,
        ipv6=True,
        tls=pki.issue(certs, ca, "server", [address]),
    )
    server.ca = ca
    _SHARED[key] = server
    return server


def forget_testbed(prefix: str) -> None:
    """Stop and forget a testbed's nginx servers (tests that reuse nothing)."""
    for key in [k for k in _SHARED if k[0] == prefix]:
        _SHARED.pop(key).stop()
