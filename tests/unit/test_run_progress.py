"""The run's progress: a total fixed by the plan before the first test, and a time
left recomputed from the pace at every test."""

from __future__ import annotations

import io

from rich.console import Console

from secperf.run.progress import PAST_PLAN, RunProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_total_is_the_plans_and_the_time_left_follows_the_pace() -> None:
    out = io.StringIO()
    clock = Clock()
    with RunProgress(Console(file=out, force_terminal=False), 600.0, clock=clock) as progress:
        task = progress._progress.tasks[0]
        assert task.total == 600.0 and progress.left() == 600.0  # the plan, before any test
        progress.show("point 1/1, round 1", "tcp-rr#0", "baseline", log_line=True)
        clock.now += 30.0  # a test of 10 planned seconds took 30: three times the plan
        progress.advance(10.0)
        assert progress.left() == 590.0 * 3
        clock.now += 10.0  # the next ones keep to the plan: the estimate comes down
        progress.advance(30.0)
        assert progress.left() == 560.0 * 1.0
        progress.show("point 1/1, round 2", "tcp-rr#0", "baseline", log_line=True)
        # rounds past the plan (the budget had room) never grow the total
        clock.now += 600.0
        progress.advance(600.0)
        assert task.total == 600.0 and task.completed == 600.0
        assert progress.left() is None and progress.eta() == PAST_PLAN
        progress.show("point 1/1, round 9", "tcp-rr#0", "baseline", log_line=True)
    lines = out.getvalue().splitlines()
    assert "about 10 min left" in lines[0]
    assert "about 9 min left" in lines[1]  # 560 s at the plan's pace: it moved
    assert PAST_PLAN in lines[2]
