"""The VM appliance's image: a Debian cloud kernel and a small initramfs, built by
secperf from Debian packages without installing anything on this machine.

`apt-get download` fetches the packages of the recipe (RECIPE_PACKAGES, and the
kernel that Debian's `linux-image-cloud-amd64` names) into the project's cache,
`dpkg -x` unpacks each into a staging tree, and secperf adds its own parts:

- `/init` (busybox's init with an inittab that runs `/etc/secperf/rc`): mounts,
  loads the virtio and netfilter modules, brings up the management NIC (found by
  its MAC address, IPv6 link-local fe80::2 only: never routed), starts the agent;
- the agent (`/etc/secperf/agent`, busybox `nc -ll -e`): one TCP connection per
  command (secperf.testbed.hosts.vmagent describes the protocol);
- `/sbin/modprobe`, a busybox-sh script that the kernel's module autoloader calls:
  it looks the requested name or alias up in tables computed here from every
  module's `.modinfo` and loads the module after its dependencies (insmod);
- `secperf-nfq`, the appliance's NFQUEUE daemon, from this checkout.

The initramfs is an uncompressed `newc` cpio written by `write_cpio` with every
mtime 0, so the same inputs give the same bytes. The image lives in
`<cache>/vm-image/<hash>/` where the hash covers the package names and versions,
the recipe version, secperf's own files and the daemon binary: a new package
version or recipe gives a new image, an unchanged one is reused. A build holds an
flock on `<cache>/vm-image/.lock` (released by the kernel when the builder dies)
and stages in a `tmp-<pid>` directory that a later build removes if its pid is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from secperf.errors import TestbedError
from secperf.testbed.hosts.vmcache import (
    check_boot_files,
    check_deb,
    private_dir,
    sandboxed_download_dir,
    sha256_file,
    take_deb,
)

RECIPE_VERSION = 1
KERNEL_META = "linux-image-cloud-amd64"
# What the guest runs (busybox for the shell, init and nc), the packet filters,
# conntrack, iproute2, and every shared library those and secperf-nfq need.
RECIPE_PACKAGES = (
    "busybox-static",
    "libc6",
    "libgcc-s1",
    "libstdc++6",
    "libhyperscan5",
    "nftables",
    "libnftables1",
    "libedit2",
    "libtinfo6",
    "libbsd0",
    "libmd0",
    "libjansson4",
    "libgmp10",
    "libmnl0",
    "libnftnl11",
    "libxtables12",
    "iptables",
    "libip4tc2",
    "libip6tc2",
    "libnetfilter-conntrack3",
    "libnfnetlink0",
    "conntrack",
    "iproute2",
    "libbpf1",
    "libelf1",
    "libcap2",
    "zlib1g",
)
# Kernel module trees the guest may load (the closure of their dependencies is added).
MODULE_DIRS = ("net/netfilter", "net/ipv4/netfilter", "net/ipv6/netfilter")
# IPVS (the kernel's load balancer) is netfilter's but no mechanism of secperf uses it.
MODULE_SKIP = ("net/netfilter/ipvs/",)
# Loaded at boot, before anything asks: the NIC drivers and the core of the filters.
PRELOAD_MODULES = ("virtio_pci", "virtio_net", "nf_tables", "nf_conntrack")
EXTRA_MODULES = ("virtio_pci", "virtio_net")
# Unpacked but of no use in the guest: documentation, locales, charset converters.
PRUNE = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/bash-completion",
    "usr/lib/x86_64-linux-gnu/gconv",
    "usr/share/zsh",
    # secperf-nfq links libhs only; the runtime-only library is a second copy.
    "usr/lib/x86_64-linux-gnu/libhs_runtime.so.5",
    "usr/lib/x86_64-linux-gnu/libhs_runtime.so.5.4.0",
    "etc/init.d",
    "etc/rc0.d",
)
AGENT_PORT = 7000
GUEST_MGMT_ADDR = "fe80::2"
HOST_MGMT_ADDR = "fe80::1"
MGMT_MAC = "52:54:00:5e:c0:ff"
CACHE_ENV = "SECPERF_CACHE"
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GUEST_LIBS = "/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu"
NFQ_GUEST_PATH = "/usr/local/bin/secperf-nfq"
READY_LINE = "secperf-agent ready"

INITTAB = """\
::sysinit:/etc/secperf/rc
::respawn:/etc/secperf/agent-server
::ctrlaltdel:/bin/poweroff -f
"""

RC = f"""\
#!/bin/sh
# secperf guest boot: busybox's applets, mounts, modules, the management NIC, then the
# agent (inittab). The applets are linked here, not when the image is built: a link
# that exists (a Debian package's program, secperf's modprobe) is kept.
/usr/bin/busybox --install -s
export PATH={GUEST_PATH}
export LD_LIBRARY_PATH={GUEST_LIBS}
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /run /tmp /var/run
echo /sbin/modprobe > /proc/sys/kernel/modprobe
echo "secperf-vm: init at $(cut -d' ' -f1 /proc/uptime) s"
for m in $(cat /etc/secperf/preload); do /sbin/modprobe "$m"; done
# (busybox sh runs its own applets first: Debian's iproute2 by its path)
/usr/bin/ip link set lo up
# The management NIC lives in a namespace of its own inside the guest: no rule that a
# mechanism loads in the guest's main namespace can cut the agent off, and the
# measured NICs carry only testbed traffic. The agent runs commands in the main one.
/usr/bin/ip netns add mgmt
for d in /sys/class/net/*; do
  if [ "$(cat "$d/address")" = "{MGMT_MAC}" ]; then
    n=${{d##*/}}
    /usr/bin/ip link set "$n" netns mgmt
    /usr/bin/ip -n mgmt link set lo up
    /usr/bin/ip -n mgmt link set "$n" up
    /usr/bin/ip -n mgmt addr add {GUEST_MGMT_ADDR}/64 dev "$n" nodad
  fi
done
mem=$(awk '/MemTotal/{{print $2}}' /proc/meminfo)
up=$(cut -d' ' -f1 /proc/uptime)
echo "secperf-vm: $(uname -r) up at $up s, $(nproc) cpu(s), $mem kB"
"""

AGENT_SERVER = f"""\
#!/bin/sh
export PATH={GUEST_PATH}
export LD_LIBRARY_PATH={GUEST_LIBS}
echo "{READY_LINE}" > /dev/console
exec /usr/bin/ip netns exec mgmt nc -ll -p {AGENT_PORT} -e /etc/secperf/agent
"""

# One TCP connection, one command: see secperf.testbed.hosts.vmagent for the host's side.
AGENT = f"""\
#!/bin/sh
export PATH={GUEST_PATH}
export LD_LIBRARY_PATH={GUEST_LIBS}
read -r op a b c || exit 0
d=/tmp/agent.$$
mkdir -p "$d"
trap 'rm -rf "$d"' EXIT
dec() {{ printf '%s' "$1" | base64 -d; }}
take() {{ if [ "$1" -gt 0 ]; then head -c "$1"; fi; }}
case "$op" in
run)
  take "$a" > "$d/cmd"
  timeout -s KILL "$b" nsenter -t 1 -n -m sh "$d/cmd" < /dev/null > "$d/out" 2> "$d/err"
  rc=$?
  set -- $(stat -c %s "$d/out" "$d/err")
  echo "$rc $1 $2"
  cat "$d/out" "$d/err"
  ;;
put)
  p=$(dec "$a")
  # (files go to the main namespace's file system: the agent's mount namespace is
  # ip netns exec's own, with the same /tmp and rootfs)
  mkdir -p "${{p%/*}}"
  take "$b" > "$p"
  chmod "$c" "$p"
  echo "0 0 0"
  ;;
get)
  p=$(dec "$a")
  if [ -f "$p" ]; then echo "0 $(wc -c < "$p") 0"; cat "$p"; else echo "1 0 0"; fi
  ;;
spawn)
  dec "$a" > "$d/cmd"
  e=/dev/null
  if [ "$b" != "-" ]; then e=$(dec "$b"); mkdir -p "${{e%/*}}"; fi
  nsenter -t 1 -n -m sh "$d/cmd" 2>>"$e" </dev/null &
  pid=$!
  # (an asynchronous list's stdin is /dev/null unless redirected: give it the socket)
  exec 3<&0
  (
    while read -r line; do
      if [ "$line" = TERM ]; then kill -TERM "$pid" 2>/dev/null; fi
    done
    kill -KILL "$pid" 2>/dev/null
  ) <&3 &
  exec 3<&-
  w=$!
  wait "$pid"
  kill -KILL "$w" 2>/dev/null
  ;;
esac
"""

# The kernel's module autoloader runs `/sbin/modprobe -q -- NAME`: load NAME (a module
# name or an alias, with `_`/`-` alike) and what it needs, in order.
MODPROBE = """\
#!/bin/sh
for n in "$@"; do case "$n" in -*) ;; *) name=$n ;; esac; done
[ -n "$name" ] || exit 1
want=$(echo "$name" | tr - _)
files=$(awk -v w="$want" '$1 == w { $1 = ""; print; exit }' /lib/modules/secperf.deps)
if [ -z "$files" ]; then
  mod=$(awk -v w="$want" 'w ~ $1 { print $2; exit }' /lib/modules/secperf.alias)
  [ -n "$mod" ] || exit 1
  files=$(awk -v w="$mod" '$1 == w { $1 = ""; print; exit }' /lib/modules/secperf.deps)
fi
for f in $files; do
  b=${f##*/}; b=${b%.ko}; b=$(echo "$b" | tr - _)
  grep -q "^$b " /proc/modules || insmod "/lib/modules/$f" || exit 1
done
"""


def cache_root() -> Path:
    """$SECPERF_CACHE, else $XDG_CACHE_HOME/secperf, else ~/.cache/secperf."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "secperf"


@dataclass(frozen=True)
class Recipe:
    """What an image is made of: package versions, secperf's files, the daemon."""

    packages: dict[str, str]  # name -> Debian version
    kernel_package: str
    nfq_sha256: str
    # name -> the .deb's SHA256 in apt's signed index (each .deb is checked against it;
    # not in the digest: a version has one)
    sha256: dict[str, str] = field(default_factory=dict)

    def files(self) -> dict[str, str]:
        """secperf's own files in the image (path -> text)."""
        return {
            "etc/inittab": INITTAB,
            "etc/secperf/rc": RC,
            "etc/secperf/agent-server": AGENT_SERVER,
            "etc/secperf/agent": AGENT,
            "sbin/modprobe": MODPROBE,
            "etc/secperf/preload": "\n".join(PRELOAD_MODULES) + "\n",
        }

    def digest(self) -> str:
        """The image's version: a hash of everything that goes into it (16 hex digits)."""
        doc = {
            "recipe": RECIPE_VERSION,
            "packages": dict(sorted(self.packages.items())),
            "kernel": self.kernel_package,
            "modules": [list(MODULE_DIRS), list(MODULE_SKIP), list(EXTRA_MODULES), list(PRUNE)],
            "files": self.files(),
            "nfq": self.nfq_sha256,
            # The build steps themselves: any change to this file is a new image.
            "builder": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        }
        blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def kernel_release(self) -> str:
        """`6.1.0-56-cloud-amd64` from `linux-image-6.1.0-56-cloud-amd64`."""
        return self.kernel_package.removeprefix("linux-image-")


@dataclass(frozen=True)
class Image:
    """A built image: its directory, kernel and initramfs."""

    path: Path
    digest: str
    kernel: Path
    initrd: Path
    manifest: dict[str, object]


def _apt(argv: list[str], *, cwd: Path | None = None, timeout: float = 300) -> str:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise TestbedError(
            f"image build: {argv[0]} not found",
            fix="the VM image is built from Debian packages: run on Debian with apt",
        ) from None
    except subprocess.TimeoutExpired:
        raise TestbedError(
            f"image build: {' '.join(argv[:3])} … timed out after {timeout:.0f} s",
            fix="check the package registry is reachable (apt-get update), then run again",
        ) from None
    if proc.returncode != 0:
        raise TestbedError(
            f"image build: {' '.join(argv[:4])} … failed: {proc.stderr.strip()[-800:]}",
            fix="run `apt-get update` (the recipe's packages must be known to apt), then again",
        )
    return proc.stdout


def parse_apt_show(text: str) -> dict[str, dict[str, str]]:
    """`apt-cache show` stanzas -> package -> {field: value} (the first stanza of each)."""
    out: dict[str, dict[str, str]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        name = fields.get("Package")
        if name and name not in out:
            out[name] = fields
    return out


def kernel_from_depends(depends: str) -> str:
    """The versioned kernel package a `linux-image-cloud-amd64` stanza depends on."""
    match = re.search(r"(linux-image-[0-9][^\s,(|]*-cloud-amd64)", depends)
    if not match:
        raise TestbedError(
            f"image build: {KERNEL_META} names no kernel package ({depends!r})",
            fix="run `apt-get update`; the Debian cloud kernel must be available",
        )
    return match.group(1)


def resolve_recipe(nfq: Path) -> Recipe:
    """Versions of the recipe's packages as apt knows them now (no network)."""
    meta = parse_apt_show(_apt(["apt-cache", "show", "--no-all-versions", KERNEL_META]))
    if KERNEL_META not in meta:
        raise TestbedError(
            f"image build: apt knows no {KERNEL_META}", fix="run `apt-get update`, then again"
        )
    kernel = kernel_from_depends(meta[KERNEL_META].get("Depends", ""))
    names = [*RECIPE_PACKAGES, kernel]
    shown = parse_apt_show(_apt(["apt-cache", "show", "--no-all-versions", *names]))
    missing = [n for n in names if n not in shown]
    if missing:
        raise TestbedError(
            f"image build: apt knows no {', '.join(missing)}",
            fix="run `apt-get update` (bookworm main and security), then again",
        )
    if not nfq.is_file():
        raise TestbedError(
            f"image build: the appliance daemon {nfq} does not exist",
            fix="build the engine: cargo build --release --manifest-path engine/Cargo.toml",
        )
    unsigned = [n for n in names if len(shown[n].get("SHA256", "")) != 64]
    if unsigned:
        raise TestbedError(
            f"image build: apt's index gives no SHA256 for {', '.join(unsigned)}",
            fix="run `apt-get update` (each .deb is checked against its signed index)",
        )
    return Recipe(
        packages={n: shown[n]["Version"] for n in names},
        kernel_package=kernel,
        nfq_sha256=sha256_file(nfq),
        sha256={n: shown[n]["SHA256"] for n in names},
    )


# -- kernel modules ----------------------------------------------------------------------


def modinfo(path: Path) -> dict[str, list[str]]:
    """A module's .modinfo strings (`depends`, `alias`, `name`), read from the file."""
    data = path.read_bytes()
    info: dict[str, list[str]] = {}
    for key in (b"depends", b"alias", b"name"):
        for m in re.finditer(rb"(?:^|\x00)" + key + rb"=([^\x00]*)", data):
            info.setdefault(key.decode(), []).append(m.group(1).decode(errors="replace"))
    return info


def module_tables(
    root: Path, wanted: Iterable[str], extra: Iterable[str]
) -> tuple[list[Path], dict[str, list[str]], list[tuple[str, str]]]:
    """The modules to keep (every .ko under `wanted` dirs and the `extra` names, with
    their dependencies), each module's load order (dependencies first), and
    (alias pattern, module) pairs for the autoloader."""
    kernel = root / "kernel"
    by_name: dict[str, Path] = {}
    for ko in kernel.rglob("*.ko"):
        by_name[ko.stem.replace("-", "_")] = ko
    infos: dict[str, dict[str, list[str]]] = {}

    def info(name: str) -> dict[str, list[str]]:
        if name not in infos:
            infos[name] = modinfo(by_name[name])
        return infos[name]

    start = {
        n
        for n, p in by_name.items()
        if any(str(p.relative_to(kernel)).startswith(d + "/") for d in wanted)
        and not any(str(p.relative_to(kernel)).startswith(d) for d in MODULE_SKIP)
    } | {e for e in extra if e in by_name}
    keep: set[str] = set()
    todo = sorted(start)
    while todo:
        name = todo.pop()
        if name in keep or name not in by_name:
            continue
        keep.add(name)
        deps = ",".join(info(name).get("depends", [""])).split(",")
        todo += [d.replace("-", "_") for d in deps if d]

    order: dict[str, list[str]] = {}

    def load_order(name: str, seen: tuple[str, ...] = ()) -> list[str]:
        if name in order:
            return order[name]
        out: list[str] = []
        deps = [d.replace("-", "_") for d in ",".join(info(name).get("depends", [""])).split(",")]
        for dep in deps:
            if dep and dep in keep and dep not in seen:
                for item in load_order(dep, (*seen, name)):
                    if item not in out:
                        out.append(item)
        out.append(str(by_name[name].relative_to(root)))
        order[name] = out
        return out

    for name in sorted(keep):
        load_order(name)
    aliases: list[tuple[str, str]] = []
    for name in sorted(keep):
        for alias in info(name).get("alias", []):
            aliases.append((glob_to_ere(alias.replace("-", "_")), name))
    return [by_name[n] for n in sorted(keep)], order, aliases


def glob_to_ere(pattern: str) -> str:
    """A module alias (a shell glob: `*`, `?`, `[...]`) as an anchored awk regex."""
    out = ["^"]
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            out.append(pattern[i : end + 1])
            i = end
        elif ch in ".^$+(){}|\\/":
            out.append("\\" + ch)
        else:
            out.append(ch)
        i += 1
    out.append("$")
    return "".join(out)


# -- cpio --------------------------------------------------------------------------------


def _cpio_header(name: str, mode: int, size: int, ino: int, nlink: int = 1) -> bytes:
    fields = [ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name) + 1, 0]
    head = "070701" + "".join(f"{v:08x}" for v in fields)
    raw = head.encode() + name.encode() + b"\x00"
    return raw + b"\x00" * (-len(raw) % 4)


def write_cpio(root: Path, out: Path) -> None:
    """A `newc` cpio of `root` (mtime 0, uid/gid 0, sorted): the same tree, the same bytes."""
    entries = sorted(root.rglob("*"), key=lambda p: str(p.relative_to(root)))
    with out.open("wb") as f:
        for ino, path in enumerate(entries, start=1):
            rel = str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(path).encode()
                f.write(_cpio_header(rel, st.st_mode, len(target), ino))
                f.write(target + b"\x00" * (-len(target) % 4))
            elif stat.S_ISDIR(st.st_mode):
                f.write(_cpio_header(rel, st.st_mode, 0, ino, nlink=2))
            elif stat.S_ISREG(st.st_mode):
                data = path.read_bytes()
                f.write(_cpio_header(rel, st.st_mode, len(data), ino))
                f.write(data + b"\x00" * (-len(data) % 4))
        f.write(_cpio_header("TRAILER!!!", 0, 0, 0))


# -- building ----------------------------------------------------------------------------


def _merge(src: Path, dst: Path) -> None:
    """Copy an unpacked package into the merged-/usr root (lib, bin, sbin -> usr/...)."""
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        parts = rel.parts
        if parts and parts[0] in ("lib", "bin", "sbin", "lib64"):
            rel = Path("usr", *parts)
        target = dst / rel
        if path.is_dir() and not path.is_symlink():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            target.unlink()
        if path.is_symlink():
            os.symlink(os.readlink(path), target)
        else:
            shutil.copy2(path, target)


def guest_programs(root: Path) -> dict[str, str]:
    """Program name -> its path in the guest, for every executable a package (or
    secperf) put in the image that is not busybox: the guest's busybox sh runs its own
    applet for a bare name (`ip`, `sysctl`), so the host names these by path."""
    found: dict[str, str] = {}
    for d in ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin"):
        for path in sorted((root / d).iterdir()) if (root / d).is_dir() else []:
            if path.name in found:
                continue
            real = path.resolve() if not path.is_symlink() else None
            if path.is_symlink():
                target = os.readlink(path)
                if target.endswith("busybox"):
                    continue
                real = (path.parent / target) if not target.startswith("/") else root / target[1:]
                real = Path(os.path.normpath(real))
                if real.is_symlink() and os.readlink(real).endswith("busybox"):
                    continue
            if real is not None and real.name != "busybox":
                found[path.name] = "/" + d + "/" + path.name
    return found


@contextlib.contextmanager
def _build_lock(base: Path, timeout: float) -> Iterator[None]:
    base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TestbedError(
                        f"image build: another build holds {base / '.lock'} for over "
                        f"{timeout:.0f} s",
                        fix="wait for the other secperf to finish its image build",
                    ) from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)  # releases the lock


def _remove_stale_staging(base: Path) -> None:
    for tmp in base.glob("tmp-*"):
        pid = tmp.name.removeprefix("tmp-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(tmp, ignore_errors=True)


def ensure_image(nfq: Path, *, timeout: float = 600.0, log: list[str] | None = None) -> Image:
    """The image for this recipe: from the cache, else built now (bounded by `timeout`)."""
    recipe = resolve_recipe(nfq)
    digest = recipe.digest()
    private_dir(cache_root())
    base = private_dir(cache_root() / "vm-image")
    final = base / digest
    if (final / "manifest.json").is_file():
        return _image(final)
    deadline = time.monotonic() + timeout
    with _build_lock(base, timeout):
        if (final / "manifest.json").is_file():  # built by another while we waited
            return _image(final)
        _remove_stale_staging(base)
        stage = base / f"tmp-{os.getpid()}"
        shutil.rmtree(stage, ignore_errors=True)
        try:
            _build(recipe, nfq, stage, base / "debs", deadline)
            stage.rename(final)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    if log is not None:
        log.append(f"built VM image {digest} in {final}")
    return _image(final)


def _image(path: Path) -> Image:
    """The built image at `path`, its kernel and initramfs checked against the manifest."""
    manifest = json.loads((path / "manifest.json").read_text())
    check_boot_files(manifest, {"vmlinuz": path / "vmlinuz", "initrd": path / "initrd.cpio"})
    return Image(
        path=path,
        digest=str(manifest["digest"]),
        kernel=path / "vmlinuz",
        initrd=path / "initrd.cpio",
        manifest=manifest,
    )


def _left(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TestbedError(
            f"image build timed out ({what})",
            fix="raise [testbed.vm] build_timeout, or check the package registry's speed",
        )
    return left


def _cached_debs(recipe: Recipe, debs: Path) -> dict[str, Path]:
    """The recipe's .debs already in the cache, each checked against its SHA256."""
    files: dict[str, Path] = {}
    for name, version in recipe.packages.items():
        epochless = version.split(":", 1)[-1]
        hits = sorted(debs.glob(f"{name}_*{epochless}_*.deb"))
        if hits:
            check_deb(hits[0], name, version, recipe.sha256[name])
            files[name] = hits[0]
    return files


def _download(recipe: Recipe, need: list[str], debs: Path, deadline: float) -> dict[str, Path]:
    """`apt-get download` as apt's sandbox user into a folder of its own, each .deb
    checked and moved into the cache (vmcache.take_deb)."""
    files: dict[str, Path] = {}
    with sandboxed_download_dir() as folder:
        _apt(
            ["apt-get", "download", "-q", *need],
            cwd=folder,
            timeout=_left(deadline, "apt-get download"),
        )
        for item in need:
            name, version = item.split("=", 1)
            epochless = version.split(":", 1)[-1]
            hits = sorted(folder.glob(f"{name}_*{epochless}_*.deb"))
            if not hits:
                raise TestbedError(
                    f"image build: apt-get download gave no .deb for {name} {version}",
                    fix="run `apt-get update`, then again",
                )
            files[name] = take_deb(hits[0], debs, name, version, recipe.sha256[name])
    return files


def _build(recipe: Recipe, nfq: Path, stage: Path, debs: Path, deadline: float) -> None:
    private_dir(debs)
    wanted = [f"{n}={v}" for n, v in sorted(recipe.packages.items())]
    files = _cached_debs(recipe, debs)
    need = [w for w in wanted if w.split("=")[0] not in files]
    if need:
        files.update(_download(recipe, need, debs, deadline))
    unpack = stage / "unpack"
    root = stage / "root"
    root.mkdir(parents=True)
    for name in sorted(files):
        _left(deadline, f"dpkg -x {name}")
        into = unpack / name
        into.mkdir(parents=True)
        _apt(["dpkg-deb", "-x", str(files[name]), str(into)], timeout=_left(deadline, "dpkg"))
        if name == recipe.kernel_package:
            continue
        _merge(into, root)
    for rel in PRUNE:
        victim = root / rel
        if victim.is_dir() and not victim.is_symlink():
            shutil.rmtree(victim)
        elif victim.exists() or victim.is_symlink():
            victim.unlink()
    for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib")):
        (root / link).symlink_to(target)
    (root / "lib64").symlink_to("usr/lib64")
    (root / "usr/lib64").mkdir(parents=True, exist_ok=True)
    if not (root / "usr/lib64/ld-linux-x86-64.so.2").exists():
        (root / "usr/lib64/ld-linux-x86-64.so.2").symlink_to(
            "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
        )
    # busybox's applets are linked at boot (RC: `busybox --install -s`, which keeps
    # what a Debian package brought): no program of the guest's runs here. The shell
    # the inittab's script needs is the one link made now.
    if not (root / "usr/bin/sh").exists():
        (root / "usr/bin/sh").symlink_to("/usr/bin/busybox")
    (root / "init").symlink_to("/usr/bin/busybox")
    for d in ("proc", "sys", "dev", "tmp", "run", "root", "var/run"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for rel, text in recipe.files().items():
        path = root / rel
        if rel.startswith("sbin/"):
            path = root / "usr" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if "/" in rel and not rel.endswith(("preload", "inittab")) else 0o644)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    (root / "etc/hostname").write_text("secperf-vm\n")
    nfq_dst = root / NFQ_GUEST_PATH.lstrip("/")
    nfq_dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(nfq, nfq_dst)
    # The kernel and the modules the guest may load.
    kroot = unpack / recipe.kernel_package
    release = recipe.kernel_release
    mods_src = kroot / "lib/modules" / release
    kept, order, aliases = module_tables(mods_src, MODULE_DIRS, EXTRA_MODULES)
    mods_dst = root / "usr/lib/modules"
    for ko in kept:
        dst = mods_dst / ko.relative_to(mods_src)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ko, dst)
    (mods_dst / "secperf.deps").write_text(
        "".join(f"{name} {' '.join(files_)}\n" for name, files_ in sorted(order.items()))
    )
    (mods_dst / "secperf.alias").write_text("".join(f"{a} {m}\n" for a, m in aliases))
    out = stage / "out"
    out.mkdir()
    shutil.copy2(kroot / "boot" / f"vmlinuz-{release}", out / "vmlinuz")
    _left(deadline, "writing the initramfs")
    write_cpio(root, out / "initrd.cpio")
    manifest = {
        "vmlinuz_sha256": sha256_file(out / "vmlinuz"),
        "initrd_sha256": sha256_file(out / "initrd.cpio"),
        "programs": guest_programs(root),
        "digest": recipe.digest(),
        "recipe": RECIPE_VERSION,
        "kernel": recipe.kernel_package,
        "packages": recipe.packages,
        "modules": len(kept),
        "initrd_bytes": (out / "initrd.cpio").stat().st_size,
        "nfq_sha256": recipe.nfq_sha256,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(unpack)
    shutil.rmtree(root)
    for item in out.iterdir():
        item.rename(stage / item.name)
    out.rmdir()
