"""Waiting for a condition in a namespace test: poll it, never sleep a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.02) -> T:
    """`probe()`'s first truthy value within `timeout` seconds; fails naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what} (last: {got!r})")
        time.sleep(every)
