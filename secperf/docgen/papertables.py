"""The side-by-side tables of docs/studies/: a study's rows against its kept run.

A block `<!-- paper-table: NAME docs/runs/RUN -->` holds what `secperf report
docs/runs/RUN --paper-markdown --paper scenarios/NAME.toml` prints: the run judged
again with today's rules and the file's [[paper]] and [[paper_table]] rows, from the
run's records where it kept them, else from its summary rows, never the verdicts stored
in it (secperf/report/kept.py). The line above the table names the run, its time and
machine, and the command.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from secperf.docgen.scenarios import _machine, duration
from secperf.report.kept import paper_summary
from secperf.report.paper import markdown
from secperf.results.rundir import RunDir

KIND = "paper-table"


def kept_line(root: Path, name: str, run: str) -> str:
    meta = json.loads((root / run / "run.json").read_text("utf-8"))
    took = (
        datetime.fromisoformat(meta["finished"]) - datetime.fromisoformat(meta["started"])
    ).total_seconds()
    return (
        f"Kept run: [{run}](../runs/{Path(run).name}), {duration(took)} on "
        f"{_machine(meta.get('host') or {})}, started {meta['started'][:16].replace('T', ' ')}"
        f" UTC. `secperf report {run} --paper-markdown --paper scenarios/{name}.toml` "
        "prints this table, judged with today's rules from the run's rows, never its "
        "stored verdicts."
    )


def make(root: Path, args: list[str]) -> str:
    """The block's body: `args` is the scenario's name and the kept run's directory."""
    if len(args) != 2:
        raise ValueError(f"<!-- {KIND}: {' '.join(args)} --> names a scenario and its kept run")
    name, run = args
    table = markdown(paper_summary(RunDir.open(root / run), root / "scenarios" / f"{name}.toml"))
    return f"{kept_line(root, name, run)}\n\n{table}"
