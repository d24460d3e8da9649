"""Files for a daemon that drops root (squid runs as `proxy`): where it may write, and
how root writes beside it (docs/security.md).

The daemon's user gets a folder of its own outside the run directory, so that no
directory of the user's (the run directory under /root, say) has to be opened to it:
`/run/secperf-daemons/NAME/`, owned by root and writable by root only, holding the
files the daemon writes, each created by root and then given to its user. The user can
write those files and nothing else: it cannot add, rename or replace an entry of the
folder, so it cannot plant a link where root writes. Root's own files (a daemon's
stderr) stay in the run directory, opened without following a link. When the daemon
stops, its files are copied back into the run directory and the folder removed; the
folder is in the ledger before it exists.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from secperf.errors import MechanismError
from secperf.testbed.ledger import Ledger

RUN_ROOT = Path("/run/secperf-daemons")


def _owned_by_root(path: Path) -> None:
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise MechanismError(
            f"{path} is not a directory of root's that only root may write",
            where=str(path),
            fix=f"remove {path} (secperf makes it again)",
        )


def make_folder(
    ledger: Ledger | None,
    folder: Path,
    user: str,
    files: Sequence[str],
    copies: Sequence[Path] = (),
) -> None:
    """`folder` (under RUN_ROOT) made afresh for `user`: `files` created empty and
    given to the user, `copies` (files the daemon reads) copied in as root's."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise MechanismError(
            f"there is no user {user!r} for the daemon to run as",
            fix=f"install the package that makes it (its daemon runs as {user})",
        ) from None
    RUN_ROOT.mkdir(mode=0o755, exist_ok=True)
    _owned_by_root(RUN_ROOT)
    if ledger is not None:
        ledger.add("file", path=str(folder))
    if folder.exists() or folder.is_symlink():
        remove_folder(None, folder)
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    for name in files:
        fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.fchown(fd, pw.pw_uid, pw.pw_gid)
        finally:
            os.close(fd)
    for src in copies:
        shutil.copyfile(src, folder / src.name)
        (folder / src.name).chmod(0o644)


def open_nofollow(path: Path) -> IO[Any]:
    """`path` opened for writing (truncated) by root, refused if it is a link."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        if os.path.islink(path):
            raise MechanismError(
                f"{path} is a symbolic link: secperf does not write through it",
                where=str(path),
                fix="remove the link (someone put it in the run directory)",
            ) from None
        raise MechanismError(f"cannot write {path}: {exc.strerror}", where=str(path)) from None
    return os.fdopen(fd, "wb")


def collect(folder: Path, names: Sequence[str], into: Path) -> None:
    """Copy the daemon's files back into the run directory (a link is skipped)."""
    for name in names:
        try:
            fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # never written, or not a plain file
        with os.fdopen(fd, "rb") as src, open_nofollow(into / name) as dst:
            shutil.copyfileobj(src, dst)


def remove_folder(ledger: Ledger | None, folder: Path) -> None:
    """Remove the folder (a link in its place is removed, never followed)."""
    if folder.is_symlink():
        folder.unlink()
    elif folder.exists():
        shutil.rmtree(folder)
    if ledger is not None:
        ledger.remove("file", path=str(folder))
