"""This machine after scripts/setup.sh --all: no unit of a package setup installs is
enabled under /etc/systemd/system (unless the user's own link was there before, which
setup's record names as kept), and nothing new listens (ss -ltnu before and after).
Only the packages: SECPERF_SETUP_PACKAGES_ONLY skips the venv and the cargo build."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "scripts" / "setup.sh"
RECORD = Path("/var/lib/secperf/setup-disabled.txt")
UNIT = re.compile(r"/systemd/system/([^/]+\.(?:service|socket|timer|path|target|mount))$")


def _listeners() -> dict[str, str]:
    """Every listening TCP/UDP socket of this namespace: its address, with its program."""
    out = subprocess.run(
        ["ss", "-ltnuHp"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    found = {}
    for line in out:
        fields = line.split()
        program = re.search(r'users:\(\("([^"]+)"', line)
        found[f"{fields[0]} {fields[4]}"] = program.group(1) if program else "?"
    return found


def _package_files(packages: list[str]) -> list[str]:
    installed = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${Status}\\n", *packages],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    present = [line.split()[0] for line in installed if line.endswith("install ok installed")]
    listing = subprocess.run(
        ["dpkg-query", "-L", *present], capture_output=True, text=True, check=False
    )
    return listing.stdout.splitlines()


# it compares this namespace's listening sockets before and after: no other test may open one
@pytest.mark.serial
def test_after_setup_no_unit_of_its_packages_is_enabled_and_nothing_new_listens() -> None:
    before = _listeners()
    env = {**os.environ, "SECPERF_SETUP_PACKAGES_ONLY": "1"}
    done = subprocess.run(
        ["bash", str(SETUP), "--all"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    packages = subprocess.run(
        ["bash", str(SETUP), "--list", "--all"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "openssh-server" in packages and "nftables" in packages
    files = _package_files(packages)
    units = {m.group(1) for f in files if (m := UNIT.search(f))}
    assert "ssh.service" in units  # the listing found the packages' units
    kept = set()
    if RECORD.exists():
        kept = {
            line.split()[1] for line in RECORD.read_text().splitlines() if line.startswith("kept ")
        }
    enabled = []
    for link in Path("/etc/systemd/system").rglob("*"):
        if not link.is_symlink():
            continue
        target = os.path.basename(os.readlink(link))
        if (link.name in units or target in units) and str(link) not in kept:
            enabled.append(str(link))
    assert enabled == [], f"units of setup's packages enabled: {enabled}"
    # Programs of setup's packages that listen now and did not before (another
    # engineer's process on this shared machine is not setup's).
    programs = {os.path.basename(f) for f in files if "/bin/" in f or "/sbin/" in f}
    new = {a: p for a, p in _listeners().items() if a not in before and p in programs}
    assert new == {}, f"listening since setup: {new}"
