"""What a run shows while it measures: a bar with the time left on a terminal, one
plain line a round in a log (CI, a pipe).

The bar's total is the plan's seconds of tests, fixed before the first test: each test
done advances it by its planned seconds, and rounds past the plan (the budget allowed
more) hold it full instead of growing it. The time left starts as the plan's and is
then recomputed at every test from the pace so far (elapsed over planned seconds
done)."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from secperf.run.estimate import fmt_eta

# What the time left reads once the planned tests are done: more rounds run only while
# the budget has room for them.
PAST_PLAN = "past the plan: more rounds while the budget lasts"


class RunProgress:
    """The run's progress over `total` planned seconds of tests (`clock`: seconds)."""

    def __init__(
        self, console: Console, total: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.console = console
        self.total = total
        self.done = 0.0  # planned seconds of the tests done (past `total` past the plan)
        self._clock = clock
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f} %"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            console=console,
            transient=False,
        )
        self._task = self._progress.add_task("starting", total=total, eta=self.eta())
        self._start = clock()

    def __enter__(self) -> RunProgress:
        self._progress.__enter__()
        self._start = self._clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.__exit__(exc_type, exc, tb)

    def left(self) -> float | None:
        """Seconds left: the plan's before the first test, then the planned seconds not
        yet done at the pace so far; None past the plan."""
        if self.done >= self.total:
            return None if self.done > 0 else 0.0
        if self.done <= 0:
            return self.total
        return (self.total - self.done) * (self._clock() - self._start) / self.done

    def eta(self) -> str:
        """`about 3 min left`, or PAST_PLAN."""
        left = self.left()
        return PAST_PLAN if left is None else f"about {fmt_eta(left)} left"

    def show(self, where: str, what: str, variant: str, *, log_line: bool) -> None:
        """The test about to run; `log_line`: also print a plain line when not on a terminal."""
        eta = self.eta()
        self._progress.update(self._task, description=f"{where} · {what} · {variant}", eta=eta)
        if log_line and not self.console.is_terminal:
            self.console.print(f"{where}: {what}, {eta}", highlight=False, markup=False)

    def advance(self, seconds: float) -> None:
        """A test done, of `seconds` planned: the bar moves, never past its total."""
        self.done += seconds
        self._progress.update(self._task, completed=min(self.done, self.total), eta=self.eta())
