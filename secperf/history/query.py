"""A scenario's history read from the store: its series (changes.Series) and the same
as flat rows, one per run and series (for --json, --csv and secperf.api.history)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from secperf.history.changes import Series, build_series
from secperf.history.ingest import entry_of
from secperf.history.store import Store

ROW_FIELDS = (
    "variant",
    "workload",
    "point",
    "metric",
    "unit",
    "started",
    "run_dir",
    "labels",
    "degradation_pct",
    "degradation_ci_low",
    "degradation_ci_high",
    "n",
    "verdict",
    "other_machine",
    "change_point",
    "step",
    "step_low",
    "step_high",
    "machine_change",
    "scenario_change",
)


def load_series(
    scenario: str,
    *,
    store: Path | str | None = None,
    metric: str | None = None,
    variant: str | None = None,
    workload: str | None = None,
    since: str | None = None,
    all_machines: bool = False,
) -> list[Series]:
    filters = {
        k: v for k, v in (("metric", metric), ("variant", variant), ("workload", workload)) if v
    }
    with Store.open(store, create=False) as st:
        rows = st.series_rows(scenario, since=since, filters=filters)
    return build_series(rows, all_machines=all_machines)


def flat_rows(series: Sequence[Series]) -> list[dict[str, Any]]:
    out = []
    for s in series:
        steps = {st.index: st for st in s.steps}
        moved = set(s.machine_changes())
        edited = set(s.scenario_changes())
        for i, p in enumerate(s.points):
            st = steps.get(i)
            out.append(
                {
                    "variant": s.variant,
                    "workload": s.workload,
                    "point": s.label,
                    "metric": s.metric,
                    "unit": s.unit,
                    "started": p.started,
                    "run_dir": p.run_dir,
                    "labels": p.labels,
                    "degradation_pct": p.mean,
                    "degradation_ci_low": p.low,
                    "degradation_ci_high": p.high,
                    "n": p.n,
                    "verdict": p.verdict,
                    "other_machine": p.other_machine,
                    "change_point": st is not None,
                    "step": st.size if st else None,
                    "step_low": st.low if st else None,
                    "step_high": st.high if st else None,
                    "machine_change": i in moved,
                    "scenario_change": i in edited,
                }
            )
    return out


def add_run_dir(
    path: Path | str, labels: dict[str, str] | None = None, store: Path | str | None = None
) -> tuple[int, bool]:
    """Add one run directory to the store: (its run id, whether it is new)."""
    entry = entry_of(path, labels)
    with Store.open(store) as st:
        return st.add(entry)
