"""Finding the programs secperf starts: on PATH, or in /usr/sbin, which a root
shell's PATH does not always hold (daemons such as nginx, vsftpd, dnsmasq, squid)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from secperf.errors import ToolMissingError


@dataclass(frozen=True)
class Tool:
    """A program secperf needs: which Debian package brings it, and who needs it."""

    program: str
    package: str
    needed_for: str


def find_program(name: str, *, purpose: str, package: str) -> str:
    """The path of `name`; a missing one is an error that says which package installs it."""
    found = shutil.which(name) or (
        f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").is_file() else None
    )
    if found is None:
        raise ToolMissingError(
            f"{name} is not installed ({purpose})",
            fix=f"apt-get install -y --no-install-recommends {package}",
        )
    return found
