"""Namespace tests run only as root where `ip netns` works, each with its own state dir."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def _netns_usable() -> str | None:
    """None if namespace tests can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return f"`ip netns` does not work here: {proc.stderr.strip()}"
    return None


_REASON = _netns_usable()


@pytest.fixture(autouse=True)
def _require_netns() -> None:
    if _REASON is not None:
        pytest.skip(f"namespace test skipped: {_REASON}")


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private SECPERF_STATE_DIR, so tests never see (or clean) real runs' ledgers."""
    directory = tmp_path / "state"
    directory.mkdir()
    monkeypatch.setenv("SECPERF_STATE_DIR", str(directory))
    return directory
