"""A run's verdicts against the paper as `secperf report RUN --paper-markdown` prints
them, always judged with today's rules: from the run's records where it kept them,
else again from its summary.json rows (a kept run in docs/runs/), never the verdicts
stored in it. `--paper FILE` judges the run by that scenario file's [[paper]] and
[[paper_table]] rows (the tolerances as they are now fixed), and refuses a file whose
measurement settings differ from the run's."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from secperf.errors import SecperfError
from secperf.report.rebuild import rebuild
from secperf.results.paper import rederive
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.scenario.loader import load_scenario

# what a scenario says about comparing with the paper, not about what is measured
JUDGING = ("paper", "paper_table")


def measured(text: str) -> dict[str, Any]:
    """A scenario's TOML without its [[paper]] and [[paper_table]] rows."""
    return {k: v for k, v in tomllib.loads(text).items() if k not in JUDGING}


def _judging(rd: RunDir, scenario_file: Path | None) -> Mapping[str, Any] | None:
    """The [[paper]] rows to judge by, as JSON (None: the run's own)."""
    if scenario_file is None:
        return None
    kept = rd.read_run_json().get("scenario_text")
    if not isinstance(kept, str):
        raise SecperfError(
            "run.json holds no scenario_text, so it cannot be told whether the scenario "
            "file measures what this run measured",
            where=str(rd.run_json_path),
            fix="judge it by its own [[paper]] rows (drop --paper)",
        )
    if measured(kept) != measured(scenario_file.read_text("utf-8")):
        raise SecperfError(
            f"{scenario_file} measures other than this run did (beyond its [[paper]] and "
            "[[paper_table]] rows): its rows would judge another measurement",
            where=str(rd.path),
            fix="take the run again with that file, or give the file it was taken with",
        )
    return load_scenario(scenario_file).to_json_dict()


def paper_summary(rd: RunDir, scenario_file: Path | None = None) -> dict[str, Any]:
    """The run's summary with its "paper" verdicts judged now (see the module)."""
    judging = _judging(rd, scenario_file)
    if rd.has_records():
        # printed, not written: the run's files stay as they are
        return build_summary(rd, paper=judging) if judging else rebuild(rd, write=False)
    summary = rd.read_summary()
    scenario = judging if judging is not None else rd.read_run_json().get("scenario") or {}
    return {**summary, "paper": rederive(summary, scenario)}
