"""A lab of "remote" machines for the SSH backend's tests: namespaces that each run a
real OpenSSH server (Debian's openssh-server), wired as the standard plan
(client 198.18.1.2 – dut 198.18.1.1 | 198.18.2.1 – server 198.18.2.2), plus a
controller namespace `ctl` with a management link to each host (198.18.230.0/24,
one /30 per host), from which secperf runs: secperf reaches the hosts over SSH
only, as it would real machines. Keys (host and user) are generated per lab;
each host has its own work directory, so nothing passes between them through
this machine's shared filesystem. The lab is not built by secperf and is not in
any ledger: `close()` removes it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
HOSTS = ("client", "dut", "server")
PLAN = {  # host -> [(peer, its address/prefix on the link to that peer)]
    "client": [("dut", "198.18.1.2/24")],
    "dut": [("client", "198.18.1.1/24"), ("server", "198.18.2.1/24")],
    "server": [("dut", "198.18.2.2/24")],
}
ROUTES = {"client": "198.18.1.1", "server": "198.18.2.1"}


def sh(*argv: str, check: bool = True, input: str | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, input=input)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def sshd_usable() -> str | None:
    if not Path(SSHD).exists():
        return "needs openssh-server (scripts/setup.sh installs it)"
    if shutil.which("ssh-keygen") is None:
        return "needs ssh-keygen (openssh-client)"
    return None


@dataclass
class Lab:
    root: Path
    tag: str = field(default_factory=lambda: "sl" + secrets.token_hex(3)[:4])
    sshd: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    mgmt: dict[str, str] = field(default_factory=dict)
    made: list[str] = field(default_factory=list)

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    @property
    def ctl(self) -> str:
        return self.ns("ctl")

    def workdir(self, host: str) -> Path:
        return self.root / host / "work"

    @property
    def key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    def build(self) -> Lab:
        self.root.mkdir(parents=True, exist_ok=True)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        auth = self.root / "authorized_keys"
        auth.write_text((self.root / "id_ed25519.pub").read_text())
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        for host in ("ctl", *HOSTS):
            sh("ip", "netns", "add", self.ns(host))
            self.made.append(self.ns(host))
            sh("ip", "-n", self.ns(host), "link", "set", "lo", "up")
        for n, host in enumerate(HOSTS, start=1):
            for peer, addr in PLAN[host]:
                dev = f"{self.tag}{host[0]}{peer[0]}"
                if host < peer:
                    sh(
                        "ip",
                        "link",
                        "add",
                        dev,
                        "netns",
                        self.ns(host),
                        "type",
                        "veth",
                        "peer",
                        "name",
                        f"{self.tag}{peer[0]}{host[0]}",
                        "netns",
                        self.ns(peer),
                    )
                sh("ip", "-n", self.ns(host), "addr", "add", addr, "dev", dev)
                sh("ip", "-n", self.ns(host), "link", "set", dev, "up")
            # management: ctl .4n+1, host .4n+2
            mine, theirs = f"198.18.230.{4 * n + 2}", f"198.18.230.{4 * n + 1}"
            sh(
                "ip",
                "link",
                "add",
                f"{self.tag}m{host[0]}",
                "netns",
                self.ns(host),
                "type",
                "veth",
                "peer",
                "name",
                f"{self.tag}k{host[0]}",
                "netns",
                self.ctl,
            )
            sh(
                "ip",
                "-n",
                self.ns(host),
                "addr",
                "add",
                f"{mine}/30",
                "dev",
                f"{self.tag}m{host[0]}",
            )
            sh("ip", "-n", self.ctl, "addr", "add", f"{theirs}/30", "dev", f"{self.tag}k{host[0]}")
            sh("ip", "-n", self.ns(host), "link", "set", f"{self.tag}m{host[0]}", "up")
            sh("ip", "-n", self.ctl, "link", "set", f"{self.tag}k{host[0]}", "up")
            self.mgmt[host] = mine
            if host in ROUTES:
                sh("ip", "-n", self.ns(host), "route", "add", "default", "via", ROUTES[host])
        sh("ip", "netns", "exec", self.ns("dut"), "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        lines = []
        for host in HOSTS:
            d = self.root / host
            self.workdir(host).mkdir(parents=True)
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "hostkey"))
            lines.append(f"{self.mgmt[host]} {(d / 'hostkey.pub').read_text().strip()}")
            argv = [
                "ip", "netns", "exec", self.ns(host), SSHD, "-D", "-e", "-f", "/dev/null",
                "-o", f"ListenAddress={self.mgmt[host]}", "-p", "22", "-h", str(d / "hostkey"),
                "-o", f"AuthorizedKeysFile={auth}", "-o", "StrictModes=no",
                "-o", f"PidFile={d / 'sshd.pid'}", "-o", "PermitRootLogin=prohibit-password",
                "-o", "UsePAM=no", "-o", "PasswordAuthentication=no",
                # sshd runs each command through root's login shell, and bash sources
                # ~/.bashrc under sshd; this machine's root runs `pyenv init` there (a
                # session killed mid-rehash would leave pyenv's lock behind for every
                # root shell). A lab host has a home of its own, as a real one would.
                "-o", f"SetEnv=HOME={d}",
            ]  # fmt: skip
            log = open(d / "sshd.log", "wb")  # noqa: SIM115 - lives as long as sshd
            self.sshd[host] = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        self.known_hosts.write_text("\n".join(lines) + "\n")
        deadline = time.monotonic() + 10
        for host in HOSTS:
            while f"{self.mgmt[host]}:22" not in sh(
                "ip", "netns", "exec", self.ns(host), "ss", "-Htln"
            ):
                if time.monotonic() > deadline or self.sshd[host].poll() is not None:
                    raise RuntimeError(
                        f"sshd in {host} did not listen: "
                        f"{(self.root / host / 'sshd.log').read_text()}"
                    )
                time.sleep(0.02)
        return self

    def inventory(self, hosts: tuple[str, ...] = HOSTS, external: tuple[str, ...] = ()) -> str:
        """The [testbed.hosts.*] tables of a scenario run in this lab (`external`: hosts
        declared as external devices instead)."""
        out = []
        for host in hosts:
            addrs = [a.split("/")[0] for _p, a in PLAN[host]]
            ifs = ", ".join(f'{p} = "{self.tag}{host[0]}{p[0]}"' for p, _a in PLAN[host])
            if host in external:
                out.append(
                    f'[testbed.hosts.{host}]\nbackend = "external"\n'
                    + f"addresses = {addrs!r}\n".replace("'", '"')
                    + f"interfaces = {{ {ifs} }}\n"
                )
                continue
            out.append(
                f"[testbed.hosts.{host}]\n"
                f'backend = "ssh"\n'
                f'ansible_host = "{self.mgmt[host]}"\n'
                f'ansible_user = "root"\n'
                f'ansible_ssh_private_key_file = "{self.key}"\n'
                f'known_hosts = "{self.known_hosts}"\n'
                f'workdir = "{self.workdir(host)}"\n'
                f"addresses = {addrs!r}\n".replace("'", '"')
                + f"interfaces = {{ {ifs} }}\n"
            )
        return "\n".join(out)

    def secperf(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """Run the secperf CLI in the controller namespace (it reaches hosts over SSH)."""
        exe = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "secperf")
        return subprocess.run(
            ["ip", "netns", "exec", self.ctl, exe, *args],
            capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
            check=False,
        )  # fmt: skip

    def pids(self, host: str) -> list[int]:
        """Processes in a host's namespace other than its sshd listener."""
        out = sh("ip", "netns", "pids", self.ns(host), check=False).split()
        return [int(p) for p in out if int(p) != self.sshd[host].pid]

    def wait_quiet(self, timeout: float = 15.0) -> dict[str, list[str]]:
        """Poll until no host runs anything but its sshd listener; what still runs."""
        deadline = time.monotonic() + timeout
        while True:
            left = {h: [_cmdline(p) for p in self.pids(h)] for h in HOSTS}
            left = {h: v for h, v in left.items() if v}
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)

    def close(self) -> None:
        for proc in self.sshd.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        for ns in self.made:
            for pid in sh("ip", "netns", "pids", ns, check=False).split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            sh("ip", "netns", "del", ns, check=False)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return f"pid {pid} (gone)"
