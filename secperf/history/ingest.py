"""A run directory as the store keeps it (store.RunEntry): its identity and machine
fingerprint from run.json, its rows and verdicts from summary.json. Reads every format
secperf has written: a directory without run.json (the oldest kept runs) is named from
its summary, and dated from its directory name or the summary file's time."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from secperf.history.store import HistoryError, RunEntry
from secperf.report.answer import verdicts
from secperf.results.rundir import RunDir
from secperf.results.summary import build_summary
from secperf.tables import BASELINE

_STAMP = re.compile(r"^(\d{8}T\d{6}Z)")
FINGERPRINT_KEYS = ("cpu_model", "cpus", "kernel", "placement")


def parse_labels(texts: list[str]) -> dict[str, str]:
    """--label KEY=VALUE texts as a dict; a text without '=' is a ValueError."""
    out: dict[str, str] = {}
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--label {text!r}: expected KEY=VALUE, e.g. git=1a2b3c4")
        out[key.strip()] = value.strip()
    return out


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise HistoryError(
            f"cannot read {path.name}: {exc}",
            where=str(path),
            fix="check the run directory; `secperf report` rebuilds summary.json from "
            "run.json and records.jsonl",
        ) from None
    if not isinstance(data, dict):
        raise HistoryError(f"{path.name} is not a JSON object", where=str(path))
    return data


def _started(path: Path, meta: Mapping[str, Any]) -> str:
    if meta.get("started"):
        return str(meta["started"])
    if m := _STAMP.match(path.name):
        return datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).isoformat()
    when = (path / "summary.json").stat().st_mtime
    return datetime.fromtimestamp(when, UTC).replace(microsecond=0).isoformat()


def _scenario(meta: Mapping[str, Any], summary: Mapping[str, Any]) -> tuple[str, str | None]:
    """(the scenario's name, a hash of its text: the file as run, else its parsed form)"""
    sc = meta.get("scenario")
    name = sc.get("name") if isinstance(sc, Mapping) else sc
    name = name or summary.get("scenario") or ""
    if meta.get("scenario_text"):
        text = str(meta["scenario_text"])
    elif isinstance(sc, Mapping):
        text = json.dumps(sc, sort_keys=True)
    else:
        return str(name), None
    return str(name), hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(meta: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    """The machine a run measured on: CPU model, CPU count, kernel, placement mode."""
    host = meta.get("host") or {}
    placement = meta.get("placement") or summary.get("placement") or {}
    return {
        "cpu_model": host.get("cpu_model"),
        "cpus": host.get("cpus"),
        "kernel": host.get("kernel"),
        "placement": placement.get("mode") if isinstance(placement, Mapping) else None,
    }


def _bottleneck(value: Any) -> str | None:
    if isinstance(value, Mapping):
        return str(value.get("short") or value.get("text") or "") or None
    return str(value) if value else None


def entry_of(path: Path | str, labels: Mapping[str, str] | None = None) -> RunEntry:
    """The run directory at `path` as a store entry."""
    path = Path(path)
    if not path.is_dir():
        raise HistoryError("not a directory", where=str(path), fix="give a run directory")
    meta = _read(path / "run.json") or {}
    summary = _read(path / "summary.json")
    if summary is None:
        if not meta:
            raise HistoryError(
                "not a secperf run directory (no run.json, no summary.json)",
                where=str(path),
                fix="give a directory made by `secperf run`",
            )
        summary = build_summary(RunDir.open(path))
    name, digest = _scenario(meta, summary)
    fp = fingerprint(meta, summary)
    said = {(v.variant, v.workload, v.point_id, v.metric): v.text for v in verdicts(summary)}
    rows = []
    for r in summary.get("rows") or []:
        key = (r.get("variant"), r.get("workload"), r.get("point_id"), r.get("metric"))
        rows.append(
            {
                **{k: r.get(k) for k in ("variant", "workload", "point_id", "metric", "unit")},
                "label": r.get("label") or r.get("workload"),
                **{k: r.get(k) for k in ("mean", "ci_low", "ci_high", "n")},
                **{
                    k: r.get(k)
                    for k in (
                        "degradation_pct",
                        "degradation_ci_low",
                        "degradation_ci_high",
                        "degradation_n",
                    )
                },
                "bottleneck": _bottleneck(r.get("bottleneck")),
                "verdict": None if r.get("variant") == BASELINE else said.get(key),
            }
        )
    run = {
        "run_dir": str(path.resolve()),
        "scenario": name,
        "scenario_hash": digest,
        "started": _started(path, meta),
        "finished": meta.get("finished"),
        "status": meta.get("status") or ("failed" if summary.get("failed") else "complete"),
        "secperf_version": meta.get("secperf_version"),
        **fp,
        "fingerprint": json.dumps(fp, sort_keys=True),
    }
    return RunEntry(run=run, labels=dict(labels or {}), rows=rows)
