"""A lab host's kernel settings come back after a crash (issue 41): a `setting` line of
the host's ledger (what SshHost.track_setting writes before failclosed switches
forwarding off or rfc2544 steers a queue) is written back by the teardown's SETTINGS
and by the watchdog once the controller is gone, after the process that changed it has
died. Run in a network namespace of its own, whose ip_forward is its own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from secperf.testbed.hosts.remote_teardown import KILL_GROUP, RESTORE, SETTINGS, setting_line
from secperf.testbed.hosts.ssh_process import WATCHDOG

FORWARD = "/proc/sys/net/ipv4/ip_forward"

# In a fresh namespace: forwarding on (as the lab DUT had it), the ledger line written,
# then a process (gone before the restore) switches it off, as failclosed does.
PREPARE = f"""
echo 1 > {FORWARD}
printf '%s\\n' "$LINE" >> "$LEDGER"
sh -c 'echo 0 > {FORWARD}'
echo "off: $(cat {FORWARD})"
"""


def _in_new_netns(script: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["unshare", "--net", "bash", "-c", script],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _ledger(tmp_path: Path) -> Path:
    ledger = tmp_path / "run.ledger.jsonl"
    ledger.write_text('{"op": "add", "type": "file", "path": "/nowhere"}\n')
    return ledger


def test_teardown_puts_ip_forward_back_after_its_setter_is_gone(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    out = _in_new_netns(
        PREPARE + f'sh -c "$SETTINGS" settings "$LEDGER"\necho "now: $(cat {FORWARD})"\n',
        {"LEDGER": str(ledger), "LINE": setting_line(FORWARD, "1"), "SETTINGS": SETTINGS},
    )
    assert "off: 0" in out
    assert f"restored {FORWARD} 1" in out
    assert "now: 1" in out


def test_the_watchdog_of_a_vanished_controller_puts_ip_forward_back(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    rundir = tmp_path / "run"
    rundir.mkdir()
    out = _in_new_netns(
        PREPARE + 'bash -c "$WATCHDOG" secperf-watchdog "$RUNDIR" "$LEDGER" 5 '
        '"$KILL" "$RESTORE" "$SETTINGS" < /dev/null 2>/dev/null\n'
        f'echo "now: $(cat {FORWARD})"\n',
        {
            "LEDGER": str(ledger),
            "RUNDIR": str(rundir),
            "LINE": setting_line(FORWARD, "1"),
            "WATCHDOG": WATCHDOG,
            "KILL": KILL_GROUP,
            "RESTORE": RESTORE,
            "SETTINGS": SETTINGS,
        },
    )
    assert "off: 0" in out and "now: 1" in out, out
    assert f"restored {FORWARD} 1" in (rundir / "watchdog.log").read_text()


def test_a_setting_line_of_another_shape_is_left_alone(tmp_path: Path) -> None:
    """Only /proc/sys/net and rps_cpus paths, only numbers and masks: a ledger line that
    names /etc/passwd (or a value with a shell word) writes nothing."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    ledger = tmp_path / "ledger"
    ledger.write_text(
        setting_line(str(victim), "1")
        + "\n"
        + setting_line("/proc/sys/net/../../../" + str(victim), "1")
        + "\n"
    )
    subprocess.run(["sh", "-c", SETTINGS, "settings", str(ledger)], check=True, timeout=30)
    assert victim.read_text() == "precious\n"
