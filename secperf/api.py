"""secperf from Python: for notebooks and CI (documented in docs/api.md).

    import secperf.api as sp

    scenario = sp.load("scenarios/quick.toml")          # or sp.load({...}) from a dict
    run = sp.run(scenario, out="results")               # needs root, like `secperf run`
    rows = sp.records(run)                              # plain dicts, one per figure
    df = sp.dataframe(run)                              # pandas, if installed
    trend = sp.history("quick", store="results/history.sqlite")  # one dict per run and row

Every function raises a `secperf.errors.SecperfError` (with `where` and `fix`) on bad
input, like the command line.
"""

from __future__ import annotations

import csv
import io
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from secperf.errors import SecperfError
from secperf.history.query import flat_rows, load_series
from secperf.report.answer import with_verdicts
from secperf.report.html import write_html
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.run.runner import run_scenario
from secperf.scenario.loader import load_scenario, validate_dict
from secperf.scenario.scenario import Scenario

__all__ = [
    "CSV_COLUMNS",
    "dataframe",
    "history",
    "history_dataframe",
    "load",
    "open_run",
    "records",
    "run",
    "summary",
    "to_csv",
]

# The summary row fields a flat record (and `secperf report --csv`) carries, in order.
CSV_COLUMNS = (
    "workload",
    "point_id",
    "label",
    "variant",
    "kind",
    "metric",
    "unit",
    "higher_is_better",
    "n",
    "mean",
    "stddev",
    "ci_low",
    "ci_high",
    "halfwidth_pct",
    "ci_target_met",
    "baseline_mean",
    "degradation_pct",
    "degradation_ci_low",
    "degradation_ci_high",
    "significant",
    "stop_reason",
    "verdict",
    "verdict_text",
)


def load(source: str | Path | Mapping[str, Any], *, base_dir: str | Path | None = None) -> Scenario:
    """A validated scenario from a TOML file, TOML text's parsed dict, or a plain dict.

    A dict's relative rule files resolve against `base_dir` (default: the current
    directory). Problems raise ScenarioError, every one of them at once."""
    if isinstance(source, Mapping):
        return validate_dict(dict(source), Path(base_dir) if base_dir else Path.cwd())
    return load_scenario(Path(source))


def check_out_dir(out: Path) -> None:
    """`--out` must be a directory secperf may write (or one it may create)."""

    if out.exists() and not out.is_dir():
        raise SecperfError(
            "--out is a file, not a directory",
            where=str(out),
            fix="give a directory for run directories, e.g. --out results",
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise SecperfError(
            f"cannot write run directories under {out}: {exc.strerror or exc}",
            where=str(out),
            fix="give a directory you may write, e.g. --out results",
        ) from None


def run(
    scenario: Scenario | str | Path, out: str | Path = "results", *, quiet: bool = True
) -> RunDir:
    """Run a scenario (root needed) and return its run directory, summary written."""
    sc = scenario if isinstance(scenario, Scenario) else load(scenario)
    check_out_dir(Path(out))
    console = Console(quiet=quiet)
    rundir = run_scenario(sc, Path(out), console)
    done = RunDir.open(rundir.path)
    write_html(done)
    return done


def open_run(run_dir: RunDir | str | Path) -> RunDir:
    return run_dir if isinstance(run_dir, RunDir) else RunDir.open(Path(run_dir))


def summary(run_dir: RunDir | str | Path) -> dict[str, Any]:
    """The run's summary (summary.json, or built from the records when absent)."""
    rd = open_run(run_dir)
    return rd.read_summary() if rd.has_summary() else build_summary(rd)


def records(source: RunDir | str | Path | Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat dict per figure (CSV_COLUMNS, plus the swept parameters as `point.KEY`)."""
    summ = with_verdicts(source if isinstance(source, Mapping) else summary(source))
    out: list[dict[str, Any]] = []
    for row in summ.get("rows") or []:
        flat = {key: row.get(key) for key in CSV_COLUMNS}
        point = row.get("point") or {}
        if isinstance(point, Mapping):
            flat.update({f"point.{k}": v for k, v in point.items() if not isinstance(v, dict)})
        out.append(flat)
    return out


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise SecperfError(
            "pandas is not installed",
            fix="pip install pandas (or use secperf.api.records() for plain dicts)",
        ) from None
    return pd


def dataframe(source: RunDir | str | Path | Mapping[str, Any]) -> Any:
    """The records as a pandas DataFrame (pandas is optional: `pip install pandas`)."""
    return _pandas().DataFrame.from_records(records(source))


def history(
    scenario: str,
    *,
    store: str | Path | None = None,
    metric: str | None = None,
    variant: str | None = None,
    workload: str | None = None,
    since: str | None = None,
    all_machines: bool = False,
) -> list[dict[str, Any]]:
    """A scenario's history from the results store (docs/history.md): one dict per run and
    (variant, workload, point, metric) series, oldest run first, with its paired degradation
    and interval, labels, verdict, and whether a change point or a machine change is there."""
    return flat_rows(
        load_series(
            scenario,
            store=store,
            metric=metric,
            variant=variant,
            workload=workload,
            since=since,
            all_machines=all_machines,
        )
    )


def history_dataframe(scenario: str, **options: Any) -> Any:
    """history() as a pandas DataFrame (pandas is optional)."""
    return _pandas().DataFrame.from_records(history(scenario, **options))


def to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """CSV text of `records()`: one header line, one line per figure; empty = blank."""
    columns: list[str] = list(CSV_COLUMNS)
    for row in rows:
        columns += [k for k in row if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in columns})
    return buf.getvalue()
