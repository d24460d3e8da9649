"""Tests that measure a rate or a timing, or change machine-wide state, run alone.

A test marked `serial` must not share the machine's CPUs with another test, and a
test that sets a machine-wide value (nf_conntrack_max) must not change another
test's world. `make test` runs them in a second pass of their own, after the others
have run in pytest-xdist workers (Makefile). Should they meet other tests in one
xdist run anyway (`pytest -n 3 tests`), each test's whole run protocol (fixture
set-up, call, teardown) holds a lock shared by all workers: shared for a plain test,
exclusive for a `serial` one, behind a turnstile so a waiting `serial` test is let in
before further plain ones. Without xdist (one process) there is nothing to do.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "serial: measures a rate or a timing, or changes machine-wide state: "
        "runs while no other test runs (under pytest-xdist)",
    )


def _lock_dir() -> Path | None:
    """A directory all of this session's xdist workers share, or None without xdist."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run or "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    directory = Path(tempfile.gettempdir()) / f"secperf-pytest-{run}"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    directory = _lock_dir()
    if directory is None:
        yield
        return
    serial = item.get_closest_marker("serial") is not None
    with (directory / "gate").open("a") as gate, (directory / "run").open("a") as run:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(run, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
        finally:
            if not serial:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(run, fcntl.LOCK_UN)
            if serial:
                fcntl.flock(gate, fcntl.LOCK_UN)
