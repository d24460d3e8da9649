"""The VM image cache, trusted only as far as it is checked (docs/security.md).

The image secperf boots as root is built from files in a cache under the user's home
(secperf.testbed.hosts.vmimage.cache_root), so nothing in it is taken on trust:

- the cache directories are the running user's own (root's, for a run), mode 0700, and
  no link: one that belongs to someone else, or that others may write, is refused (one
  only readable by others is closed to 0700);
- every .deb, cached or just downloaded, must have the SHA256 that apt's signed index
  gives for that package and version (`apt-cache show PKG=VER`, its `SHA256` field);
- apt downloads as its sandbox user (`_apt`) into a folder of that user's outside the
  cache, and the files are checked and moved into the cache by root;
- the kernel and initramfs carry their SHA256 in the image's manifest, checked each
  time the image is used.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from secperf.errors import TestbedError

APT_SANDBOX_USER = "_apt"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def private_dir(path: Path) -> Path:
    """`path` made (mode 0700) if missing; refused unless it is a directory of this
    user's that no one else may write or enter, and not a link."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    me = os.geteuid()
    fix = f"remove {path} (secperf makes it again, mode 0700), or point SECPERF_CACHE elsewhere"
    if not stat.S_ISDIR(st.st_mode):
        raise TestbedError(f"the VM cache {path} is not a directory (a link?)", fix=fix)
    if st.st_uid != me:
        raise TestbedError(
            f"the VM cache {path} belongs to uid {st.st_uid}, not to uid {me} who boots "
            "its image: whoever owns it could change what runs in the VM",
            fix=fix,
        )
    if st.st_mode & 0o022:
        raise TestbedError(
            f"the VM cache {path} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): "
            "what is in it may not be what secperf put there",
            fix=fix,
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)  # readable by others, written by no one else: closed now
    return path


def check_deb(path: Path, package: str, version: str, sha256: str) -> None:
    """Refuse a .deb whose SHA256 is not the one apt's signed index gives."""
    got = sha256_file(path)
    if got != sha256:
        raise TestbedError(
            f"{path} is not {package} {version} as apt's signed index has it: its SHA256 is "
            f"{got}, the index says {sha256}",
            where=str(path),
            fix=f"remove {path} (secperf downloads it again); if it comes back, check the "
            "mirror and run `apt-get update`",
        )


@contextmanager
def sandboxed_download_dir() -> Iterator[Path]:
    """A fresh folder apt's sandbox user may write (outside the cache, which is root's
    alone), removed afterwards; root's own when that user does not exist."""
    folder = Path(tempfile.mkdtemp(prefix="secperf-apt-"))
    try:
        try:
            pw = pwd.getpwnam(APT_SANDBOX_USER)
        except KeyError:
            pw = None
        if pw is not None and os.geteuid() == 0:
            os.chown(folder, pw.pw_uid, pw.pw_gid)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def take_deb(src: Path, into: Path, package: str, version: str, sha256: str) -> Path:
    """Copy a downloaded .deb into the cache as root's (never following a link), check
    its SHA256 there, and return its path in the cache."""
    if src.is_symlink() or not src.is_file():
        raise TestbedError(f"apt-get download left {src}, which is not a plain file")
    dst = into / src.name
    tmp = into / f".{src.name}.part"
    tmp.unlink(missing_ok=True)
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f_in, open(tmp, "xb") as f_out:
        shutil.copyfileobj(f_in, f_out)
    try:
        check_deb(tmp, package, version, sha256)
    except TestbedError:
        tmp.unlink(missing_ok=True)
        raise
    tmp.chmod(0o600)
    os.replace(tmp, dst)
    return dst


def check_boot_files(manifest: dict[str, object], files: dict[str, Path]) -> None:
    """The kernel and initramfs are the ones the image was built with (their SHA256 in
    the manifest); refused otherwise, and when the manifest names none."""
    for key, path in files.items():
        want = manifest.get(f"{key}_sha256")
        if not isinstance(want, str) or sha256_file(path) != want:
            raise TestbedError(
                f"the VM image's {path.name} does not match its manifest's SHA256 (changed "
                "since it was built, or built before images carried one)",
                where=str(path),
                fix=f"remove {path.parent} (secperf builds the image again)",
            )
