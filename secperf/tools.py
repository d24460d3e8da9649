"""The programs secperf starts: what each is for (`Tool`, the rows of `secperf doctor`
and of a scenario's preflight) and where each is: its own binaries (built from engine/ by
`make setup`) and the system's tools (on PATH, or in /usr/sbin, which a root shell's
PATH does not always hold: daemons such as nginx, vsftpd, dnsmasq, squid).

The bottom layer: it imports only secperf.errors, so the testbed, the engine driver
and the mechanisms can all ask it where a binary is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from secperf.errors import ToolMissingError

REPO_ROOT = Path(__file__).resolve().parent.parent
# The static build (glibc linked in, `make setup-all`): what remote hosts get, so a lab
# machine needs no particular glibc, only x86_64 Linux.
STATIC_ENGINE = REPO_ROOT / "engine" / "target" / "static" / "x86_64-unknown-linux-gnu" / "release"


@dataclass(frozen=True)
class Tool:
    """A program, the Debian package that brings it, and who needs it."""

    program: str
    package: str
    needed_for: str

    def find(self) -> str:
        """Its path (PATH, then /usr/sbin); missing, an error naming the package."""
        return find_program(self.program, purpose=self.needed_for, package=self.package)

    @property
    def present(self) -> bool:
        return _lookup(self.program) is not None


def _lookup(name: str) -> str | None:
    return shutil.which(name) or (
        f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").is_file() else None
    )


def find_program(name: str, *, purpose: str, package: str) -> str:
    """The path of `name`; a missing one is an error that says which package installs it."""
    found = _lookup(name)
    if found is None:
        raise ToolMissingError(
            f"{name} is not installed ({purpose})",
            fix=f"apt-get install -y --no-install-recommends {package}",
        )
    return found


def built_binary(name: str, env_var: str, what: str) -> str:
    """One of this checkout's Rust binaries: $ENV_VAR, the release build, or PATH."""
    env = os.environ.get(env_var)
    if env:
        if not Path(env).is_file():
            raise ToolMissingError(
                f"{env_var} points to {env}, which does not exist",
                fix=f"unset {env_var} or point it at a built {name}",
            )
        return env
    built = REPO_ROOT / "engine" / "target" / "release" / name
    if built.is_file():
        return str(built)
    found = shutil.which(name)
    if found:
        return found
    raise ToolMissingError(
        f"{name} ({what}) is not built",
        fix="run `make setup` (it builds engine/ with cargo build --release)",
    )


def engine_path() -> str:
    """secperf-engine: $SECPERF_ENGINE, this checkout's release build, or PATH."""
    return built_binary("secperf-engine", "SECPERF_ENGINE", "the traffic engine")


def remote_engine_file() -> str:
    """The engine binary to copy to remote hosts: $SECPERF_REMOTE_ENGINE, the static
    build, or (a static build is missing) the same binary that runs here."""
    env = os.environ.get("SECPERF_REMOTE_ENGINE")
    if env:
        if not Path(env).is_file():
            raise ToolMissingError(
                f"SECPERF_REMOTE_ENGINE points to {env}, which does not exist",
                fix="unset it or point it at a built secperf-engine",
            )
        return env
    static = STATIC_ENGINE / "secperf-engine"
    return str(static) if static.is_file() else engine_path()


def nfq_path() -> str:
    """The NFQUEUE daemon (the appliance's and the IPS's): $SECPERF_NFQ, this
    checkout's release build, or PATH."""
    return built_binary("secperf-nfq", "SECPERF_NFQ", "the appliance's daemon")


# The one way secperf installs Debian packages: no service started, no unit left enabled
# (the links an install made are removed and recorded); scripts/setup.sh calls it too.
QUIET_INSTALL = REPO_ROOT / "scripts" / "quiet-apt-install.sh"


def install_packages(packages: list[str]) -> None:
    """Install `packages` through scripts/quiet-apt-install.sh (as root)."""
    if not packages:
        return
    if not QUIET_INSTALL.is_file():
        raise ToolMissingError(
            f"{QUIET_INSTALL} is missing (secperf installs through it)",
            fix="run secperf from its checkout, or apt-get install the packages yourself: "
            + " ".join(packages),
        )
    if os.geteuid() != 0:
        raise ToolMissingError(
            "installing " + " ".join(packages) + " needs root",
            fix="run `secperf doctor --install` as root",
        )
    done = subprocess.run(["bash", str(QUIET_INSTALL), *packages], check=False)
    if done.returncode != 0:
        raise ToolMissingError(
            f"installing {' '.join(packages)} failed (exit {done.returncode})",
            where=str(QUIET_INSTALL),
            fix="read apt-get's message above; the packages may not exist on this release",
        )
