"""A VM host's parts, as data and pure functions: its settings ([testbed.vm]), the
qemu command line, the names of its taps, bridges and NICs, how a command and the
files it names map into the guest, and the guest's /proc/stat. No side effects
(apart from trying to open /dev/kvm): the guest itself is hosts/vmguest.py.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from secperf.errors import TestbedError
from secperf.testbed.hosts.vmimage import NFQ_GUEST_PATH, Image

Accel = Literal["auto", "kvm", "tcg"]
# Paths a guest has of its own: never carried in from the host.
SYSTEM_DIRS = ("/usr/", "/bin/", "/sbin/", "/lib/", "/etc/", "/proc/", "/sys/", "/dev/", "/run/")


@dataclass(frozen=True)
class VmSettings:
    """How the VM host is built (scenario [testbed.vm])."""

    accel: Accel = "auto"
    cpus: int = 1
    memory_mb: int = 256
    boot_timeout: float = 120.0
    build_timeout: float = 600.0
    kvm_timeout: float = 20.0


# qemu's seccomp filter: no obsolete system calls, no fork or exec, no changes to its
# scheduling or limits; raising privileges stays allowed, for -runas to drop them.
QEMU_SANDBOX = "on,obsolete=deny,spawn=deny,resourcecontrol=deny"
QEMU_USER = "nobody"


def data_mac(n: int) -> str:
    """The guest NIC on the host's n-th link (its MAC names it inside the guest)."""
    return f"52:54:00:5e:c0:{n:02x}"


def tap_name(prefix: str, n: int | str) -> str:
    return f"{prefix}-V{n}"


def bridge_name(prefix: str, n: int) -> str:
    return f"{prefix}-B{n}"


def qemu_argv(
    *,
    image: Image,
    accel: str,
    settings: VmSettings,
    serial_log: Path,
    taps: Sequence[tuple[str, str]],
    name: str,
) -> list[str]:
    """The qemu command line: no default devices, serial console to a file, the
    kernel and initramfs given directly, one virtio NIC per (tap, MAC); confined by
    seccomp (QEMU_SANDBOX) and, once its files and devices are open, running as
    QEMU_USER, not root."""
    argv = [
        "qemu-system-x86_64",
        "-name",
        name,
        "-sandbox",
        QEMU_SANDBOX,
        "-runas",
        QEMU_USER,
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-monitor",
        "none",
        "-serial",
        f"file:{serial_log}",
        "-no-reboot",
        "-machine",
        "pc",
        "-smp",
        str(settings.cpus),
        "-m",
        str(settings.memory_mb),
        "-kernel",
        str(image.kernel),
        "-initrd",
        str(image.initrd),
        "-append",
        "console=ttyS0 panic=-1 quiet",
    ]
    if accel == "kvm":
        argv += ["-accel", "kvm", "-cpu", "host"]
    else:
        argv += ["-accel", "tcg,thread=multi" if settings.cpus > 1 else "tcg"]
    for i, (tap, mac) in enumerate(taps):
        argv += [
            "-netdev",
            f"tap,id=n{i},ifname={tap},script=no,downscript=no",
            "-device",
            f"virtio-net-pci,netdev=n{i},mac={mac}",
        ]
    return argv


def kvm_usable() -> str | None:
    """None if /dev/kvm opens for read/write, else why not."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
    except OSError as exc:
        return f"/dev/kvm: {exc.strerror}"
    os.close(fd)
    return None


def parse_proc_stat(text: str) -> dict[str, int]:
    """The aggregate `cpu` line of /proc/stat, in USER_HZ ticks per field."""
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            return {n: int(v) for n, v in zip(names, parts[1:], strict=False)}
    raise TestbedError("the guest's /proc/stat has no cpu line")


def guest_cpu_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
    """The guest's CPU between two /proc/stat readings: busy fraction and its parts."""
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    total = sum(delta.values())
    busy = total - delta.get("idle", 0) - delta.get("iowait", 0)
    return {
        "ticks": delta,
        "busy_fraction": (busy / total) if total > 0 else None,
        "softirq_fraction": (delta.get("softirq", 0) / total) if total > 0 else None,
    }


def guest_argv(argv: Sequence[str], programs: dict[str, str] | None = None) -> list[str]:
    """argv as the guest runs it: the appliance daemon from the image, a program by its
    path in the image (`programs`, from the image's manifest: the guest's busybox sh
    would run its own applet for a bare `ip`), else by name (a busybox applet)."""
    out = list(argv)
    if not out:
        return out
    base = Path(out[0]).name
    if base == "secperf-nfq":
        out[0] = NFQ_GUEST_PATH
    elif programs and base in programs:
        out[0] = programs[base]
    elif out[0].startswith("/") and not out[0].startswith(SYSTEM_DIRS):
        out[0] = base
    return out


def carried_files(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(host files to copy into the guest before the command, paths the command may
    write that come back to the host after it): absolute arguments outside the
    system dirs that exist as files / whose directory exists on the host."""
    carry_in: list[str] = []
    carry_out: list[str] = []
    for arg in argv[1:]:
        if not arg.startswith("/") or arg.startswith(SYSTEM_DIRS):
            continue
        path = Path(arg)
        if path.is_file():
            carry_in.append(arg)
        elif path.parent.is_dir() and not path.exists():
            carry_out.append(arg)
    return carry_in, carry_out
