"""A lab host's work directory: where secperf keeps the engine, each run's ledger and
each run's files (docs/security.md).

root runs what lies there (the engine, even during `secperf check`) and trusts what it
reads there (a ledger names processes to kill and files to remove), so nobody else may
be able to change it. The work directory and every directory above it must belong to
root or the login user and be writable by no one else; a directory above it may be
world-writable only with the sticky bit and root as its owner (as /tmp: no one else
can then rename or remove root's entry in it). No component may be a symbolic link.
secperf makes a missing work directory with mode 0700; one that fails the check is
refused with the reason, never repaired.

The check runs on the host as one POSIX sh script (CHECK), before anything else there
and again by `secperf clean` before it reads a ledger.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed.hosts.ssh_transport import DEFAULT_WORKDIR, SshSpec, remote_run

# A plain absolute path: no shell metacharacters, no `..`, no empty components.
PLAIN_PATH = re.compile(r"/(?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_.-]+")


def plain_path_problem(path: str) -> str | None:
    """Why `path` is not a plain absolute path a work directory may be, or None."""
    if not PLAIN_PATH.fullmatch(path):
        return "a plain absolute path: letters, digits, `_`, `.`, `-` between slashes"
    if any(part in (".", "..") for part in path.split("/")):
        return "a path without `.` or `..` components"
    return None


# argv: sh -c CHECK secperf-workdir WORKDIR CREATE (1: make it if missing)
# Prints the reason and exits 3 when the directory is not safe.
CHECK = r"""
set -f
w=$1; create=$2; uid=$(id -u)
no() { printf '%s\n' "$1"; exit 3; }
case $w in /?*) ;; *) no "$w is not an absolute path";; esac
check() {  # check DIR ISWORKDIR
  [ -L "$1" ] && no "$1 is a symbolic link: give the real path"
  [ -d "$1" ] || no "$1 is not a directory"
  st=$(stat -c '%u %a' "$1") || no "cannot read the owner and mode of $1"
  set -- "$1" "$2" $st
  [ "$3" = 0 ] || [ "$3" = "$uid" ] || no "$1 belongs to uid $3, not to root or uid $uid"
  m=$((0$4))
  [ $((m & 18)) = 0 ] && return 0
  [ "$2" = 0 ] && [ "$3" = 0 ] && [ $((m & 512)) != 0 ] && return 0
  no "$1 is writable by group or others (mode $4)"
}
walk() {  # every existing component from / down; 1 when one is missing
  check / 0
  p=; rest=${w#/}; old=$IFS; IFS=/; set -- $rest; IFS=$old
  for c; do
    p=$p/$c
    [ -e "$p" ] || [ -L "$p" ] || return 1
    if [ "$p" = "$w" ]; then check "$p" 1; else check "$p" 0; fi
  done
  return 0
}
if ! walk; then
  [ "$create" = 1 ] || { echo missing; exit 0; }
  (umask 077 && mkdir -p -- "$w") || no "cannot make $w"
  walk || no "$w vanished"
fi
echo ok
"""


def check_workdir(client: Any, spec: SshSpec, *, create: bool, where: str) -> bool:
    """Run CHECK on the host behind `client` for `spec.workdir`; True if the directory
    exists (made now when `create`), False if it is missing; a TestbedError naming the
    reason if it is not safe."""
    problem = plain_path_problem(spec.workdir)
    if problem is not None:
        raise TestbedError(
            f"workdir {spec.workdir!r} is not {problem}",
            where=where,
            fix='give a plain absolute path, e.g. workdir = "/var/lib/secperf"',
        )
    argv = ["sh", "-c", CHECK, "secperf-workdir", spec.workdir, "1" if create else "0"]
    got = remote_run(client, shlex.join(argv), where=where)
    said = (got.stdout.strip().splitlines() or [""])[-1]
    if got.returncode == 0 and said in ("ok", "missing"):
        return said == "ok"
    raise TestbedError(
        f"work directory {spec.workdir} is not safe: {said or got.stderr.strip()}; root "
        "would run and trust what others could put there",
        where=where,
        fix=f"give a workdir of root's own (the default is {DEFAULT_WORKDIR}), or make each "
        "directory on its path root's and writable by root only (chown root DIR; chmod "
        "go-w DIR)",
    )
