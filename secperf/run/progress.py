"""What a run shows while it measures: a bar with the time left on a terminal, one
plain line a round in a log (CI, a pipe). The time left starts as the plan's estimate
and is then scaled by how long the tests really took against their estimate."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from secperf.run.estimate import fmt_eta


class RunProgress:
    """The run's progress over `total` planned seconds of tests."""

    def __init__(self, console: Console, total: float) -> None:
        self.console = console
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            console=console,
            transient=False,
        )
        self._task = self._progress.add_task(
            "starting", total=total, eta=f"about {fmt_eta(total)} left"
        )
        self._start = time.monotonic()

    def __enter__(self) -> RunProgress:
        self._progress.__enter__()
        self._start = time.monotonic()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.__exit__(exc_type, exc, tb)

    def left(self) -> float:
        """Seconds left: planned at first, then scaled by the measured pace."""
        t = self._progress.tasks[self._task]
        left = max(0.0, (t.total or 0.0) - t.completed)
        if t.completed <= 0:
            return left
        return left * (time.monotonic() - self._start) / t.completed

    def grow(self, seconds: float) -> None:
        """A round more than planned: the bar grows so the time left stays honest."""
        total = self._progress.tasks[self._task].total or 0.0
        self._progress.update(self._task, total=total + seconds)

    def show(self, where: str, what: str, variant: str, *, log_line: bool) -> None:
        """The test about to run; `log_line`: also print a plain line when not on a terminal."""
        eta = f"about {fmt_eta(self.left())} left"
        self._progress.update(self._task, description=f"{where} · {what} · {variant}", eta=eta)
        if log_line and not self.console.is_terminal:
            self.console.print(f"{where}: {what}, {eta}", highlight=False, markup=False)

    def advance(self, seconds: float) -> None:
        self._progress.advance(self._task, seconds)
