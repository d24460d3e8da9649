"""`secperf doctor` checks what the shipped scenarios need (nginx, vsftpd, bpftrace, KVM
among them) and exits 4, the table's code for a failed check, when something is missing."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from secperf import tools
from secperf.cli import app
from secperf.cli_common import EXIT_FAILED
from secperf.run.preflight import shipped_tools


def test_it_checks_what_the_shipped_scenarios_and_the_traced_round_need() -> None:
    programs = {t.program for t in shipped_tools()}
    # http (nginx), mix (vsftpd), the traced round (bpftrace), vpn, VM
    assert {"nginx", "vsftpd", "bpftrace", "openvpn", "qemu-system-x86_64"} <= programs


def test_a_missing_tool_is_named_with_its_package_and_exits_4(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = tools._lookup
    monkeypatch.setattr(
        tools, "_lookup", lambda name: None if name in ("nginx", "bpftrace") else real(name)
    )
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == EXIT_FAILED == 4, result.output
    lines = {
        ln.split()[1]: ln.split()[0] for ln in result.output.splitlines() if len(ln.split()) > 1
    }
    assert lines["nginx"] == "missing" and lines["bpftrace"] == "missing"
    assert lines["nft"] == "ok"
    assert "nginx-light" in result.output and "bpftrace" in result.output.split("install")[-1]
    assert "/dev/kvm" in result.output
