"""A lab of "remote" machines for the SSH backend's tests: namespaces that each run a
real OpenSSH server (Debian's openssh-server), wired and addressed as a secperf
Topology says (the standard plan by default: client 198.18.1.2 – dut 198.18.1.1 |
198.18.2.1 – server 198.18.2.2; a switch is a bridge in a namespace), plus a
controller namespace `ctl` with a management link to each host (198.18.230.0/24,
one /30 per host), from which secperf runs: secperf reaches the hosts over SSH
only, as it would real machines. Keys (host and user) are generated per lab;
each host has its own work directory, so nothing passes between them through
this machine's shared filesystem. The lab is not built by secperf and is not in
any ledger: `close()` removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from secperf.plan.inventory import plan_addresses
from secperf.testbed.commands import run_ip_batch
from secperf.testbed.links import bridge_lines, host_ip_lines
from secperf.testbed.topology import Topology

SSHD = "/usr/sbin/sshd"
HOSTS = ("client", "dut", "server")  # the standard plan's hosts


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
    topology: Topology = field(default_factory=Topology.standard)
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

    @property
    def hosts(self) -> tuple[str, ...]:
        """The lab's machines (a switch is a bridge, with no sshd)."""
        return tuple(h.name for h in self.topology.hosts if not h.is_switch)

    def _ifname(self, link_no: int, end: int) -> str:
        return f"{self.tag}{link_no}{'ab'[end]}"

    def interfaces(self, host: str) -> dict[str, str]:
        """Peer -> the host's interface toward it."""
        out = {}
        for n, link in enumerate(self.topology.links):
            if host in link.ends():
                out[link.peer(host)] = self._ifname(n, link.ends().index(host))
        return out

    def build(self) -> Lab:
        topo = self.topology
        self.root.mkdir(parents=True, exist_ok=True)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        auth = self.root / "authorized_keys"
        auth.write_text((self.root / "id_ed25519.pub").read_text())
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        for host in ("ctl", *topo.names):
            sh("ip", "netns", "add", self.ns(host))
            self.made.append(self.ns(host))
            sh("ip", "-n", self.ns(host), "link", "set", "lo", "up")
        # the test network, wired and addressed as secperf's plan says (the lab's job)
        for n, link in enumerate(topo.links):
            a, b = link.ends()
            sh("ip", "link", "add", self._ifname(n, 0), "netns", self.ns(a), "type", "veth",
               "peer", "name", self._ifname(n, 1), "netns", self.ns(b))  # fmt: skip
        for spec in topo.hosts:
            ifs = {
                lk.name: self._ifname(n, lk.ends().index(spec.name))
                for n, lk in enumerate(topo.links)
                if spec.name in lk.ends()
            }
            if spec.is_switch:
                run_ip_batch(self.ns(spec.name), bridge_lines(f"{self.tag}br", list(ifs.values())))
            else:
                run_ip_batch(self.ns(spec.name), host_ip_lines(topo, spec.name, ifs))
            if spec.forwarding:
                sh("ip", "netns", "exec", self.ns(spec.name), "sysctl", "-q", "-w",
                   "net.ipv4.ip_forward=1")  # fmt: skip
        # management: ctl .4n+1, host .4n+2, one /30 each
        lines = []
        for n, host in enumerate(self.hosts, start=1):
            mine, theirs = f"198.18.230.{4 * n + 2}", f"198.18.230.{4 * n + 1}"
            here, there = f"{self.tag}m{n}", f"{self.tag}k{n}"
            sh("ip", "link", "add", here, "netns", self.ns(host), "type", "veth",
               "peer", "name", there, "netns", self.ctl)  # fmt: skip
            sh("ip", "-n", self.ns(host), "addr", "add", f"{mine}/30", "dev", here)
            sh("ip", "-n", self.ctl, "addr", "add", f"{theirs}/30", "dev", there)
            sh("ip", "-n", self.ns(host), "link", "set", here, "up")
            sh("ip", "-n", self.ctl, "link", "set", there, "up")
            self.mgmt[host] = mine
            d = self.root / host
            self.workdir(host).mkdir(parents=True)
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "hostkey"))
            lines.append(f"{mine} {(d / 'hostkey.pub').read_text().strip()}")
            argv = [
                "ip", "netns", "exec", self.ns(host), SSHD, "-D", "-e", "-f", "/dev/null",
                "-o", f"ListenAddress={mine}", "-p", "22", "-h", str(d / "hostkey"),
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
        for host in self.hosts:
            listen = f"{self.mgmt[host]}:22"
            while listen not in sh("ip", "netns", "exec", self.ns(host), "ss", "-Htln"):
                if time.monotonic() > deadline or self.sshd[host].poll() is not None:
                    log_text = (self.root / host / "sshd.log").read_text()
                    raise RuntimeError(f"sshd in {host} did not listen: {log_text}")
                time.sleep(0.02)
        return self

    def inventory(self, hosts: tuple[str, ...] = (), external: tuple[str, ...] = ()) -> str:
        """The [testbed.hosts.*] tables of a scenario run in this lab (`external`: hosts
        declared as external devices instead)."""
        out = []
        for host in hosts or self.hosts:
            addrs = json.dumps(plan_addresses(self.topology, host, 4))
            ifs = ", ".join(f'"{p}" = "{i}"' for p, i in self.interfaces(host).items())
            if host in external:
                out.append(
                    f'[testbed.hosts.{host}]\nbackend = "external"\n'
                    f"addresses = {addrs}\ninterfaces = {{ {ifs} }}\n"
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
                f"addresses = {addrs}\n"
                f"interfaces = {{ {ifs} }}\n"
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
        sshd = self.sshd.get(host)
        return [int(p) for p in out if sshd is None or int(p) != sshd.pid]

    def wait_quiet(self, timeout: float = 15.0) -> dict[str, list[str]]:
        """Poll until no host runs anything but its sshd listener; what still runs."""
        deadline = time.monotonic() + timeout
        while True:
            left = {h: [_cmdline(p) for p in self.pids(h)] for h in self.hosts}
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


@contextlib.contextmanager
def built_lab(root: Path) -> Iterator[Lab]:
    """A standard lab under `root` for a module's tests (skips where sshd or root is
    missing); removed after, also when a test fails."""
    why = sshd_usable()
    if why is not None or os.geteuid() != 0:
        pytest.skip(why or "needs root")
    lab = Lab(root).build()
    try:
        yield lab
    finally:
        lab.close()


def scenario(lab: Lab, path: Path, body: str, inventory: str | None = None) -> Path:
    """A scenario file at `path` (named after it, two rounds) over the lab's hosts, or
    over `inventory` when given."""
    path.write_text(
        f'name = "{path.stem}"\n[repeat]\nmin = 2\nmax = 2\n{body}\n'
        + (inventory if inventory is not None else lab.inventory())
    )
    return path


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return f"pid {pid} (gone)"
