"""Remote teardown: emptying an SSH host's ledger, by the running backend at the end
of a run (SshHost.close) or by `secperf clean` for a run that died (clean_remote);
and what a run saves of a host's state to put it back (SAVE, RESTORE), which the
host's watchdog (hosts/ssh_process.py) runs too when the controller is gone.

A remote ledger, `<workdir>/<prefix>.ledger.jsonl`, has the local ledger's add and
remove lines (secperf.testbed.ledger). Its work directory is checked first
(hosts/remote_workdir.py): a ledger others could have written is not trusted.
Teardown stops its live processes only while pid + starttime still match
(KILL_GROUP; a pid must be above 1), puts the host's state back as it was found
(RESTORE: the nftables ruleset, the iptables-legacy tables, the ipsets; SETTINGS: the
kernel settings a workload changed, as its `setting` lines say), and removes
the run's files (only paths strictly inside the work directory) and the ledger, all
over one SSH session.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from typing import Any

from secperf.errors import TestbedError
from secperf.testbed.hosts.remote_workdir import check_workdir
from secperf.testbed.hosts.ssh_transport import SshSpec, connect, remote_run
from secperf.testbed.ledger import confined, process_ids

# argv: sh -c KILL_GROUP kill PID STARTTIME: stop a group only while pid+starttime match.
KILL_GROUP = r"""
pid=$1; st=$2
case $pid in ''|*[!0-9]*) exit 0;; esac
case $st in ''|*[!0-9]*) exit 0;; esac
[ "$pid" -gt 1 ] && [ "$st" -gt 0 ] || exit 0
now=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)
[ "$now" = "$st" ] || exit 0
kill -s TERM -- "-$pid" 2>/dev/null || kill -s TERM "$pid" 2>/dev/null
i=0; while [ $i -lt 30 ] && kill -s 0 "$pid" 2>/dev/null; do sleep 0.1; i=$((i+1)); done
kill -s KILL -- "-$pid" 2>/dev/null; kill -s KILL "$pid" 2>/dev/null
exit 0
"""

# The host's packet-filter state as found, one file each in the run directory; a tool
# the host lacks (or whose kernel part is absent) has no file, and is not put back.
SAVED = ("before.nft", "before.iptables-legacy", "before.ip6tables-legacy", "before.ipset")

# argv: sh -c SAVE save RUNDIR
SAVE = r"""
d=$1; umask 077
if command -v nft >/dev/null; then
  nft list ruleset > "$d/before.nft" && nft -s list ruleset > "$d/before.nft.s" \
    || { echo "nft list ruleset failed" >&2; exit 1; }
fi
# a tool whose kernel part is absent saves nothing (and nothing is put back)
for t in iptables-legacy ip6tables-legacy; do
  command -v "$t-save" >/dev/null || continue
  "$t-save" > "$d/before.$t" 2>/dev/null || rm -f "$d/before.$t"
done
if command -v ipset >/dev/null; then
  ipset save > "$d/before.ipset" 2>/dev/null || rm -f "$d/before.ipset"
fi
exit 0
"""

# argv: sh -c RESTORE restore RUNDIR: put back what differs from the saved state; one
# line `restored WHAT` for each. Rules that use an ipset go before the sets, the sets
# come back before the rules that use them. Counters are not compared.
RESTORE = r"""
d=$1; fail=
# iptables-save without comments and counters; an empty built-in chain with policy
# ACCEPT is no rule at all (a table secperf emptied equals a table never loaded).
norm() {
  awk '/^#/ || /^COMMIT/ {next} /^\*/ {t=$0; next} {gsub(/\[[0-9]+:[0-9]+\]/, "[0:0]")}
       /^:[A-Z]+ ACCEPT \[0:0\]$/ {next} {print t " " $0}'
}
differs() {  # differs FILE NOW...
  f=$1; shift
  [ -f "$f" ] || return 1
  [ "$("$@" 2>/dev/null)" != "$(cat "$f")" ]
}
legacy_now() { "$1-save" 2>/dev/null | norm; }
have() { command -v "$1" >/dev/null; }
nft_d=; v4_d=; v6_d=; set_d=
have nft && [ -f "$d/before.nft.s" ] && differs "$d/before.nft.s" nft -s list ruleset && nft_d=1
for t in iptables-legacy ip6tables-legacy; do
  have "$t-save" && [ -f "$d/before.$t" ] || continue
  [ "$(legacy_now "$t")" = "$(norm < "$d/before.$t")" ] && continue
  [ "$t" = iptables-legacy ] && v4_d=1 || v6_d=1
done
have ipset && [ -f "$d/before.ipset" ] \
  && [ "$(ipset save 2>/dev/null | sort)" != "$(sort "$d/before.ipset")" ] && set_d=1
if [ -n "$set_d" ]; then
  have nft && [ -f "$d/before.nft" ] && { nft flush ruleset; nft_d=1; }
  for t in iptables-legacy ip6tables-legacy; do
    have "$t-restore" && [ -f "$d/before.$t" ] || continue
    printf '*filter\nCOMMIT\n*nat\nCOMMIT\n*mangle\nCOMMIT\n' | "$t-restore"
    [ "$t" = iptables-legacy ] && v4_d=1 || v6_d=1
  done
  if ipset destroy && ipset restore < "$d/before.ipset"; then echo "restored ipsets"
  else fail="$fail ipsets"; fi
fi
if [ -n "$nft_d" ]; then
  if nft flush ruleset && nft -f "$d/before.nft"; then echo "restored nft ruleset"
  else fail="$fail nft"; fi
fi
for t in iptables-legacy ip6tables-legacy; do
  [ "$t" = iptables-legacy ] && on=$v4_d || on=$v6_d
  [ -n "$on" ] || continue
  if "$t-restore" < "$d/before.$t"; then echo "restored $t tables"; else fail="$fail $t"; fi
done
[ -z "$fail" ] || { echo "could not put back:$fail" >&2; exit 1; }
exit 0
"""


# The kernel settings a run changes on a host (failclosed's forwarding switch, rfc2544's
# rps masks) and may put back: a path and a value of these shapes only, nothing else.
SETTING_PATH = re.compile(
    r"/proc/sys/net/[a-z0-9_]+(/[a-z0-9_]+)*"
    r"|/sys/class/net/[A-Za-z0-9_.:@-]+/queues/rx-[0-9]+/rps_cpus"
)
SETTING_VALUE = re.compile(r"[0-9a-f,]{1,64}")


def setting_problem(path: str, value: str) -> str | None:
    """Why a `setting` line with `path` and `value` would not be acted on, or None."""
    if not SETTING_PATH.fullmatch(path) or ".." in path:
        return f"{path!r} is not a /proc/sys/net setting or an interface's rps_cpus"
    if not SETTING_VALUE.fullmatch(value):
        return f"{value!r} is not a number or a CPU mask"
    return None


def setting_line(path: str, value: str) -> str:
    """The ledger line of a setting about to change (what SETTINGS reads back)."""
    return json.dumps({"op": "add", "type": "setting", "path": path, "value": value})


# argv: sh -c SETTINGS settings LEDGER: write back every `setting` line of the ledger, the
# newest first, so the value the run found first is the one left. The same shapes as
# setting_problem (the path through grep -x, the value in its own class); a line of any
# other shape is left alone. Run by teardown and by the watchdog (ssh_process.WATCHDOG).
SETTINGS = r"""
ledger=$1
re='/proc/sys/net/[a-z0-9_]+(/[a-z0-9_]+)*|/sys/class/net/[A-Za-z0-9_.:@-]+/queues/rx-[0-9]+/rps_cpus'
p='^{"op": *"add", *"type": *"setting", *"path": *"\([^" ]*\)", *"value": *"\([0-9a-f,]*\)"}$'
sed -n "s/$p/\1 \2/p" "$ledger" 2>/dev/null | tac | while read -r path value; do
  case $path in *..*) continue;; esac
  printf '%s\n' "$path" | grep -qxE "$re" || continue
  [ -n "$value" ] && [ ${#value} -le 64 ] || continue
  [ -e "$path" ] || continue
  [ "$(cat "$path" 2>/dev/null)" != "$value" ] || continue
  if printf '%s\n' "$value" > "$path"; then echo "restored $path $value"
  else echo "could not put back $path" >&2; fi
done
exit 0
"""


def restore_settings(client: Any, ledger: str, *, where: str, name: str) -> list[str]:
    """Write back the settings the ledger names (SETTINGS); what was put back."""
    argv = ["sh", "-c", SETTINGS, "settings", ledger]
    got = remote_run(client, shlex.join(argv), where=where, timeout=60.0)
    return [
        f"{line.removeprefix('restored ')} on {name} (put back as found)"
        for line in got.stdout.splitlines()
        if line.startswith("restored ")
    ]


def remote_ledger(spec: SshSpec, prefix: str) -> str:
    """Where the run `prefix` keeps its ledger on the host."""
    return posixpath.join(spec.workdir, f"{prefix}.ledger.jsonl")


def remote_rundir(spec: SshSpec, prefix: str) -> str:
    """Where the run `prefix` keeps its files on the host."""
    return posixpath.join(spec.workdir, prefix)


def live_entries(lines: list[str]) -> list[dict[str, Any]]:
    """Entries added and not removed (the local ledger's rule, for a remote ledger)."""
    live: list[dict[str, Any]] = []
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a lost connection
        if not isinstance(entry, dict):
            continue
        if entry.get("op") == "add":
            live.append(entry)
        elif entry.get("op") == "remove":
            for i, cand in enumerate(live):
                if cand.get("type") == entry.get("type") and all(
                    cand.get(k) == v for k, v in entry.items() if k not in ("op", "type")
                ):
                    del live[i]
                    break
    return live


def restore_state(client: Any, rundir: str, *, where: str, name: str) -> list[str]:
    """Put the host's packet-filter state saved in `rundir` back where it differs;
    what was put back."""
    argv = ["sh", "-c", RESTORE, "restore", rundir]
    got = remote_run(client, shlex.join(argv), where=where, timeout=60.0)
    if got.returncode != 0:
        raise TestbedError(
            f"could not put the firewall of {name} back: {got.stderr.strip()}",
            where=where,
            fix=f"its state as found is in {rundir} (before.nft: nft -f; before.ipset: ipset "
            "restore; before.iptables-legacy: iptables-legacy-restore); the ledger is kept",
        )
    return [
        f"{line.removeprefix('restored ')} on {name} (put back as found)"
        for line in got.stdout.splitlines()
        if line.startswith("restored ")
    ]


def remote_teardown(client: Any, spec: SshSpec, prefix: str) -> list[str]:
    """Empty a remote ledger: stop its live processes (pid + starttime checked), put
    the host's firewall back as it was found, remove the run's files and the ledger."""
    where = f"host {spec.name} (ssh {spec.destination})"
    q = shlex.quote
    if not check_workdir(client, spec, create=False, where=where):
        return []  # no work directory: no ledger either
    ledger = remote_ledger(spec, prefix)
    text = remote_run(client, f"cat {q(ledger)} 2>/dev/null", where=where).stdout
    if not text:
        return []
    removed: list[str] = []
    live = live_entries(text.splitlines())
    # One session for all of it: an SSH session is the slow part on the far side.
    # A process line that cannot name one process (pid 1, -1, no starttime) is left alone.
    procs = [(e, ids) for e in reversed(live) if (ids := process_ids(e)) is not None]
    kills = [
        shlex.join(["sh", "-c", KILL_GROUP, "kill", str(pid), str(st)]) for _, (pid, st) in procs
    ]
    if kills:
        remote_run(client, " ; ".join(kills), where=where, timeout=60.0)
    removed += [f"process {e['pid']} ({e.get('label', '')}) on {spec.name}" for e, _ in procs]
    for e in live:
        rundir = confined(e.get("path"), spec.workdir) if e.get("type") == "state" else None
        if rundir is not None:
            removed += restore_state(client, rundir, where=where, name=spec.name)
    if any(e.get("type") == "setting" for e in live):
        removed += restore_settings(client, ledger, where=where, name=spec.name)
    paths = [
        path
        for e in reversed(live)
        if e.get("type") == "file"
        # only what lives in secperf's work directory
        and (path := confined(e.get("path"), spec.workdir)) is not None
    ]
    gone = remote_run(client, shlex.join(["rm", "-rf", "--", *paths, ledger]), where=where)
    if gone.returncode != 0:
        raise TestbedError(
            f"could not remove the run's files on {spec.name}: {gone.stderr.strip()}",
            where=where,
            fix="the local ledger keeps the host: fix the cause, then `secperf clean`",
        )
    removed += [f"file {p} on {spec.name}" for p in paths]
    removed.append(f"ledger {ledger} on {spec.name}")
    return removed


def clean_remote(entry: dict[str, Any]) -> list[str]:
    """`secperf clean` for one `ssh` entry of a dead run's ledger."""
    spec = SshSpec.from_entry(entry)
    client = connect(spec)
    try:
        return remote_teardown(client, spec, str(entry["prefix"]))
    finally:
        client.close()
