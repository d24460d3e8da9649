"""SIGINT and SIGTERM during a run: the testbed comes down first."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Protocol, TypeVar


class TornDown(Protocol):
    def teardown(self) -> list[str]: ...


T = TypeVar("T", bound=TornDown)


@contextmanager
def install_teardown_handlers(testbed: T) -> Iterator[T]:
    """While active, SIGINT/SIGTERM tear the testbed down first.

    SIGINT then raises KeyboardInterrupt, SIGTERM exits with status 143. The
    previous handlers come back on exit. Signals can only be handled in the
    main thread: elsewhere this does nothing (the caller's own cleanup runs).
    """
    if threading.current_thread() is not threading.main_thread():
        yield testbed
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: FrameType | None) -> None:
        # A second Ctrl-C must not interrupt the teardown it asked for.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        try:
            testbed.teardown()
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signal.SIGTERM)

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield testbed
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
