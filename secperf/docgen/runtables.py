"""A kept run's answer as a table: `<!-- run-answer: NAME docs/runs/RUN -->` holds, for
every variant and headline metric of the run, the baseline's value and the verdict the
answer prints (secperf/report/answer.py), from the run's summary.json: the figures are
the kept run's own, read with today's rules."""

from __future__ import annotations

import json
from pathlib import Path

from secperf.docgen.papertables import kept_line
from secperf.report.answer import verdicts
from secperf.tables import BASELINE, value_cell

KIND = "run-answer"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def make(root: Path, args: list[str]) -> str:
    if len(args) != 2:
        raise ValueError(f"<!-- {KIND}: {' '.join(args)} --> names a scenario and its kept run")
    name, run = args
    summary = json.loads((root / run / "summary.json").read_text("utf-8"))
    bases = {
        (r.get("workload"), r.get("point_id"), r.get("metric")): r
        for r in summary.get("rows") or []
        if r.get("variant") == BASELINE
    }
    out = [
        "| point | variant | metric | baseline | the answer | limited by |",
        "|---|---|---|---|---|---|",
    ]
    for v in verdicts(summary):
        base = bases.get((v.workload, v.point_id, v.metric))
        out.append(
            f"| {_cell(v.where)} | {_cell(v.variant)} | {_cell(v.metric_label)} | "
            f"{_cell(value_cell(base).text)} {_cell(str((base or {}).get('unit') or ''))} | "
            f"{_cell(v.text)} | {_cell(v.limited_by)} |"
        )
    head = kept_line(root, name, run).split(". `secperf report")[0]
    return (
        f"{head}. `secperf report {run}` prints these verdicts (its answer), one a variant "
        "and headline metric:\n\n" + "\n".join(out) + "\n"
    )
