"""scripts/setup.sh installs without leaving a service enabled: with a stub apt-get whose
"install" enables a unit (as ssh's or nginx's postinst does), the link it made is removed
and recorded, the user's own link stays, and a policy-rc.d already in place comes back."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secperf.cli import app
from secperf.run import preflight

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="setup installs as root")


def _script(path: Path, text: str) -> None:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)


def test_setup_removes_the_unit_link_its_install_made_and_keeps_the_users(
    tmp_path: Path,
) -> None:
    units = tmp_path / "etc-systemd-system"
    wants = units / "multi-user.target.wants"
    wants.mkdir(parents=True)
    own = wants / "own.service"
    own.symlink_to("/lib/systemd/system/own.service")
    policy = tmp_path / "policy-rc.d"
    original = "#!/bin/sh\n# the machine's own\nexit 101\n"
    policy.write_text(original)
    policy.chmod(0o755)
    record = tmp_path / "var" / "setup-disabled.txt"
    seen = tmp_path / "policy-during-install"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    made = wants / "fakesvc.service"
    _script(
        stubs / "apt-get",
        f"""case "$1" in
  install)
    "{policy}"; echo $? > "{seen}"
    ln -s /lib/systemd/system/fakesvc.service "{made}" ;;
esac
exit 0
""",
    )
    # Nothing is installed (so setup installs its list); the packages ship these units.
    _script(
        stubs / "dpkg-query",
        """case "$1" in
  -W) exit 1 ;;
  -L) echo /lib/systemd/system/own.service; echo /lib/systemd/system/fakesvc.service ;;
esac
""",
    )
    _script(stubs / "cargo", "exit 0\n")
    env = {
        **os.environ,
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "SECPERF_POLICY_RC_D": str(policy),
        "SECPERF_SYSTEMD_DIR": str(units),
        "SECPERF_SETUP_RECORD": str(record),
        "SECPERF_SETUP_PACKAGES_ONLY": "1",
    }
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert seen.read_text().strip() == "101", "no policy-rc.d refused services during install"
    assert not made.is_symlink(), "the unit link the install made is still there"
    assert own.is_symlink() and os.readlink(own) == "/lib/systemd/system/own.service"
    assert policy.read_text() == original
    assert not (tmp_path / "policy-rc.d.secperf-saved").exists()
    text = record.read_text()
    assert f"removed {made} -> /lib/systemd/system/fakesvc.service" in text
    assert f"kept {own} -> /lib/systemd/system/own.service" in text
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert stat.S_IMODE(record.parent.stat().st_mode) == 0o700


def test_no_policy_before_means_none_after(tmp_path: Path) -> None:
    """A machine without a policy-rc.d has none after an install, even a failed one."""
    units = tmp_path / "units"
    units.mkdir()
    policy = tmp_path / "policy-rc.d"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    _script(stubs / "apt-get", 'case "$1" in install) exit 100 ;; esac\nexit 0\n')
    env = {
        **os.environ,
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "SECPERF_POLICY_RC_D": str(policy),
        "SECPERF_SYSTEMD_DIR": str(units),
        "SECPERF_SETUP_RECORD": str(tmp_path / "record.txt"),
    }
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "quiet-apt-install.sh"), "some-package"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 100
    assert not policy.exists()


def test_doctor_install_installs_the_scenario_s_tools_through_the_same_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`secperf doctor --install SCENARIO`: the packages of the tools that scenario's kinds
    declare, no other, through scripts/quiet-apt-install.sh (a stub apt-get here, whose
    install enables a unit: the link is gone afterwards)."""
    units = tmp_path / "units"
    wants = units / "multi-user.target.wants"
    wants.mkdir(parents=True)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    asked = tmp_path / "asked"
    made = wants / "nftables.service"
    _script(
        stubs / "apt-get",
        f"""case "$1" in
  install) shift; echo "$@" > "{asked}"; ln -s /lib/systemd/system/nftables.service "{made}" ;;
esac
exit 0
""",
    )
    monkeypatch.setenv("PATH", f"{stubs}:{os.environ['PATH']}")
    monkeypatch.setenv("SECPERF_POLICY_RC_D", str(tmp_path / "policy-rc.d"))
    monkeypatch.setenv("SECPERF_SYSTEMD_DIR", str(units))
    monkeypatch.setenv("SECPERF_SETUP_RECORD", str(tmp_path / "record.txt"))
    # As if nothing were installed: every tool quick.toml's kinds declare is missing.
    monkeypatch.setattr(preflight, "missing", lambda tools: list(tools))
    result = CliRunner().invoke(app, ["doctor", "--install", str(REPO / "scenarios/quick.toml")])
    words = asked.read_text().split()
    assert [w for w in words if not w.startswith("-")] == ["conntrack", "iproute2", "nftables"]
    assert "--no-install-recommends" in words, result.output
    assert not made.is_symlink()
    assert not (tmp_path / "policy-rc.d").exists()
