"""Older run directories read as the current format: one step per format version.

Each file carries the format it was written in (run.json's and summary.json's
`format`; a records.jsonl line, its run.json's). `upgrade(format, data)` applies
every step from that format to FORMAT, so the readers know one shape only and a
kept run of any earlier format still reports. A step changes what a format no
longer holds into what the next one does; it never reaches into a file's meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from secperf.results.records import SummaryRow

# The run directory's format: run.json, summary.json and records.jsonl.
# 2: every summary row carries every SummaryRow field (null where not measured);
#    run.json's scenario.repeat always has degradation_pp, its host the machine's
#    fields at top level; crr records say `close` as the engine does now.
FORMAT = 2

File = Literal["run.json", "summary.json", "records.jsonl"]
Step = Callable[[File, dict[str, Any]], dict[str, Any]]


def _rows_whole(rows: Any) -> Any:
    """Summary rows with every field of the current row (older secperfs wrote fewer)."""
    if not isinstance(rows, list):
        return rows
    defaults = {
        name: None
        for name, field in SummaryRow.model_fields.items()
        if not field.is_required() and field.default is None
    }
    return [{**defaults, **r} if isinstance(r, Mapping) else r for r in rows]


def _crr_close(record: dict[str, Any]) -> dict[str, Any]:
    """A crr result's `close` as the engine says it now: before the orderly close every
    connection ended with an RST (`time_wait_avoidance: so_linger_0`); before issue 25
    `fin` named what is now `client-first`."""
    if record.get("type") != "result" or record.get("kind") != "crr":
        return record
    record = dict(record)
    if record.pop("time_wait_avoidance", None) == "so_linger_0" and "close" not in record:
        record["close"] = "reset"
    if record.get("close") == "fin":
        record["close"] = "client-first"
    return record


def _from_1(file: File, data: dict[str, Any]) -> dict[str, Any]:
    if file == "summary.json":
        return {**data, "rows": _rows_whole(data.get("rows"))}
    if file == "records.jsonl":
        record = data.get("record")
        return {**data, "record": _crr_close(record)} if isinstance(record, dict) else data
    data = dict(data)
    scenario = data.get("scenario")
    if isinstance(scenario, Mapping) and isinstance(scenario.get("repeat"), Mapping):
        repeat = dict(scenario["repeat"])
        # one target for both before degradation_pp: halfwidth_pct
        if "degradation_pp" not in repeat and "halfwidth_pct" in repeat:
            repeat["degradation_pp"] = repeat["halfwidth_pct"]
        data["scenario"] = {**scenario, "repeat": repeat}
    host = data.get("host")
    if isinstance(host, Mapping) and isinstance(host.get("machine"), Mapping):
        data["host"] = {**host, **host["machine"]}  # kept under `machine` at first
    return data


# STEPS[n] takes a file of format n to format n + 1.
STEPS: dict[int, Step] = {1: _from_1}


def readable(fmt: object) -> bool:
    """Can this secperf read a file of format `fmt`?"""
    if not isinstance(fmt, int) or isinstance(fmt, bool) or not 1 <= fmt <= FORMAT:
        return False  # a newer secperf's, or none
    return all(n in STEPS for n in range(fmt, FORMAT))


def upgrade(fmt: int, data: dict[str, Any], file: File = "run.json") -> dict[str, Any]:
    """`data` (of `file`, written in format `fmt`) as format FORMAT holds it."""
    for n in range(fmt, FORMAT):
        data = STEPS[n](file, data)
    if file != "records.jsonl" and "format" in data:
        data = {**data, "format": FORMAT}
    return data
