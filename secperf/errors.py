"""Errors that reach the user.

Every error secperf raises on purpose is a SecperfError: it carries where the
problem is (a file, a line, a key) and what to do about it, so the CLI can print
it without a traceback.
"""

from __future__ import annotations


class SecperfError(Exception):
    """An error with a location and a fix, shown to the user as is."""

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.fix = fix

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class ScenarioError(SecperfError):
    """A scenario file is malformed or names something that does not exist."""


class TestbedError(SecperfError):
    """Building, using or tearing down the namespace testbed failed."""

    __test__ = False  # not a pytest test class


class MechanismError(SecperfError):
    """A mechanism could not be rendered, checked or applied."""


class EngineError(SecperfError):
    """secperf-engine reported an error record or could not be started."""

    def __init__(
        self,
        message: str,
        *,
        where: str | None = None,
        fix: str | None = None,
        record: dict[str, object] | None = None,
    ):
        super().__init__(message, where=where, fix=fix)
        self.record = record or {}


class ToolMissingError(SecperfError):
    """A program secperf needs is not installed."""
