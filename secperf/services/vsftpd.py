"""vsftpd as the FTP server of the proxy study (seed 001), started in a testbed host.

Like nginx (secperf.services.nginx) everything it reads and writes lives in one
directory of the run: the generated `vsftpd.conf`, its log, and the anonymous
root `ftp/` with the served files. It runs in the foreground (`background=NO`)
through the host's `spawn`, so it joins the host's cgroup and the ledger.

Ports: the control port FTP_PORT (5321) and the passive data range PASV_PORTS
(5330-5379) both lie inside the engine's data-port range
(secperf.mechanisms.base.DATA_PORTS), which every ACL the mechanisms write
already permits. Passive and active (PORT) transfers; anonymous, read-only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from secperf.engine import DATA_PORTS
from secperf.errors import SecperfError
from secperf.services.nginx import accepts, write_files
from secperf.services.ports import FTP_PASV_PORTS
from secperf.services.ports import FTP_PORT as FTP_PORT  # re-exported
from secperf.testbed.testbed import Host, ManagedProcess
from secperf.tools import Tool

PASV_PORTS = FTP_PASV_PORTS
assert DATA_PORTS[0] <= FTP_PORT <= DATA_PORTS[1]
assert DATA_PORTS[0] <= PASV_PORTS[0] <= PASV_PORTS[1] <= DATA_PORTS[1]
START_TIMEOUT_S = 10.0
FILES = "files"  # directory under the anonymous root, as for nginx


class VsftpdError(SecperfError):
    """vsftpd could not be configured or did not start."""


VSFTPD = Tool("vsftpd", "vsftpd", "the mix workload's FTP server")


def vsftpd_path() -> str:
    return VSFTPD.find()


def render_config(directory: Path, address: str, port: int = FTP_PORT) -> str:
    """The whole vsftpd.conf: anonymous read-only, passive on PASV_PORTS, logs in `directory`."""
    d = directory.resolve()
    lines = [
        "# written by secperf: one run's FTP server, in the server's namespace",
        "listen=YES",
        "listen_ipv6=NO",
        f"listen_address={address}",
        f"listen_port={port}",
        "background=NO",
        "anonymous_enable=YES",
        "no_anon_password=YES",
        "local_enable=NO",
        "write_enable=NO",
        f"anon_root={d}/ftp",
        "pasv_enable=YES",
        f"pasv_min_port={PASV_PORTS[0]}",
        f"pasv_max_port={PASV_PORTS[1]}",
        # The proxy (not the client) opens the data connection in proxied runs.
        "pasv_promiscuous=YES",
        "port_enable=YES",
        "connect_from_port_20=NO",
        # Namespaced already; vsftpd's own isolation and sandbox only add clone()s.
        "isolate=NO",
        "isolate_network=NO",
        "seccomp_sandbox=NO",
        "max_clients=0",
        "max_per_ip=0",
        "xferlog_enable=YES",
        "xferlog_std_format=NO",
        "log_ftp_protocol=NO",
        f"vsftpd_log_file={d}/vsftpd.log",
        "dirmessage_enable=NO",
        "use_localtime=NO",
        "secure_chroot_dir=/var/run/vsftpd/empty",
    ]
    return "\n".join(lines) + "\n"


def file_url(address: str, size: int, port: int = FTP_PORT) -> str:
    return f"ftp://{address}:{port}/{FILES}/{size}.bin"


@dataclass
class Vsftpd:
    host: Host
    directory: Path
    address: str
    port: int
    process: ManagedProcess

    @property
    def root(self) -> Path:
        return self.directory / "ftp"

    def alive(self) -> bool:
        return self.process.poll() is None

    def serve(self, sizes: list[int]) -> list[str]:
        """Make sure a file of each size is served; their paths under the root, in order."""
        return write_files(self.root, sizes)

    def log(self) -> str:
        path = self.directory / "vsftpd.log"
        return path.read_text(errors="replace") if path.is_file() else ""

    def stop(self) -> None:
        self.process.stop()


def start_vsftpd(host: Host, directory: Path, address: str, *, port: int = FTP_PORT) -> Vsftpd:
    """Start vsftpd in `host` serving `directory`/ftp; wait until `address`:`port` accepts."""
    binary = vsftpd_path()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ftp").mkdir(exist_ok=True)
    # vsftpd refuses to chroot into an anonymous root the ftp user may write.
    (directory / "ftp").chmod(0o755)
    Path("/var/run/vsftpd/empty").mkdir(parents=True, exist_ok=True)
    conf = directory / "vsftpd.conf"
    conf.write_text(render_config(directory, address, port))
    errors = directory / "stderr.log"
    with errors.open("w") as err:
        proc = host.spawn([binary, str(conf.resolve())], stdout=err, stderr=err, label="vsftpd")
    server = Vsftpd(host=host, directory=directory, address=address, port=port, process=proc)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not server.alive():
            break
        if accepts(host, address, port):
            return server
    proc.stop()
    detail = errors.read_text(errors="replace") if errors.is_file() else ""
    raise VsftpdError(
        f"vsftpd did not accept on {address}:{port} in {host.name} within "
        f"{START_TIMEOUT_S:.0f} s: {detail.strip()[-500:] or 'no output'}",
        where=str(conf),
        fix="check that the port is free in that host and that the config above loads",
    )
