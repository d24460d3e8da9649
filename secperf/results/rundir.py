"""The run directory: everything one run produced, enough to rebuild its report.

Layout (format 2, documented in docs/data-format.md; older formats are read through
secperf/results/upgrade.py):

    results/<UTC timestamp>-<scenario name>/
        run.json        scenario, host, times, status
        records.jsonl   every engine record, tagged with variant/workload/point/rep
        records.jsonl.gz  the same, compressed, written when the run ends: the file a
                        kept run carries (docs/runs/); the readers take either
        summary.json    derived statistics (rebuildable)
        report.html     derived report (rebuildable)
        files/          rendered rule files and configs the run applied
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from secperf import __version__
from secperf.errors import SecperfError
from secperf.results.records import RecordLine
from secperf.results.upgrade import FORMAT, readable, upgrade

RUN_JSON = "run.json"
RECORDS = "records.jsonl"
RECORDS_GZ = "records.jsonl.gz"
SUMMARY = "summary.json"
REPORT_HTML = "report.html"
FILES = "files"

# Keys a tagged record line carries besides `record`.
TAG_KEYS = ("variant", "workload", "point_id", "point", "label", "rep")


class RunDirError(SecperfError):
    """A directory is not a readable secperf run directory."""


def _safe_name(name: str) -> str:
    """A scenario name usable as part of a directory name."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return cleaned or "run"


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `path` whole or not at all, never through a link: the data goes to a new
    temporary file beside it (mkstemp: a fresh random name opened O_EXCL, so a link
    planted there, by whoever can write the run directory, is never followed), which is
    then renamed over `path` (a link at `path` is replaced, its target untouched)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fchmod(f.fileno(), 0o644)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def append_line(path: Path, text: str) -> None:
    """Append one line to `path` (made if missing), refused if `path` is a link."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        if path.is_symlink():
            raise RunDirError(
                f"{path} is a symbolic link: secperf does not write through it",
                where=str(path),
                fix="remove the link (someone put it in the run directory)",
            ) from None
        raise
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(text + "\n")
        f.flush()


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write the JSON document whole (write_atomic), so a reader never sees half a file."""
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


class RunDir:
    """One run's directory. Create it with `create`, read it back with `open`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seq: int | None = None
        # the format run.json was written in (its records'): FORMAT for a new run
        self._format: int | None = None
        # Lines `iter_records` skipped on its last pass: {"line": N, "reason": ..., "text": ...}
        self.dropped: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # -- construction -----------------------------------------------------

    @classmethod
    def create(cls, root: Path, scenario_name: str, *, now: datetime | None = None) -> RunDir:
        """Make a new, unique `root/<YYYYmmddTHHMMSSZ>-<name>` directory."""
        stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        base = f"{stamp}-{_safe_name(scenario_name)}"
        # absolute: every path derived from it stays right in a process that does not
        # start in this directory (a VM's daemons, a helper with its own cwd)
        root = root.absolute()
        root.mkdir(parents=True, exist_ok=True)
        for n in range(1, 1000):
            path = root / (base if n == 1 else f"{base}-{n}")
            try:
                path.mkdir()  # atomic: two runs in the same second get distinct names
            except FileExistsError:
                continue
            (path / FILES).mkdir()
            run = cls(path)
            run._seq = 0
            run._format = FORMAT
            return run
        raise RunDirError(
            f"cannot find a free run directory name for {base!r}",
            where=str(root),
            fix="remove old run directories or choose another results directory",
        )

    @classmethod
    def open(cls, path: Path) -> RunDir:
        """Open an existing run directory, checking its format version."""
        path = Path(path)
        meta_path = path / RUN_JSON
        if not meta_path.is_file():
            raise RunDirError(
                "not a secperf run directory (no run.json)",
                where=str(path),
                fix="give a directory made by `secperf run`, e.g. results/20261122T010203Z-quick",
            )
        run = cls(path)
        fmt = run._read_json(meta_path).get("format")
        if not isinstance(fmt, int) or not readable(fmt):
            raise RunDirError(
                f"run directory format {fmt!r} is not supported (this secperf reads {FORMAT} "
                "and every older one)",
                where=str(meta_path),
                fix="use the secperf version that wrote this run to report it",
            )
        run._format = fmt
        return run

    # -- paths --------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def run_json_path(self) -> Path:
        return self.path / RUN_JSON

    @property
    def records_path(self) -> Path:
        return self.path / RECORDS

    @property
    def records_gz_path(self) -> Path:
        return self.path / RECORDS_GZ

    @property
    def records_source(self) -> Path:
        """The records the readers read: records.jsonl, else records.jsonl.gz."""
        if not self.records_path.is_file() and self.records_gz_path.is_file():
            return self.records_gz_path
        return self.records_path

    def has_records(self) -> bool:
        return self.records_source.is_file()

    def keep_compressed(self) -> Path | None:
        """Write records.jsonl.gz from records.jsonl (whole or not at all), the copy a
        kept run carries; None when there are no records."""
        if not self.records_path.is_file():
            return None
        data = gzip.compress(self.records_path.read_bytes(), compresslevel=6, mtime=0)
        write_atomic(self.records_gz_path, data)
        return self.records_gz_path

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    @property
    def report_html_path(self) -> Path:
        return self.path / REPORT_HTML

    @property
    def files_dir(self) -> Path:
        """Where rendered rule files and configs go (created on demand)."""
        files = self.path / FILES
        files.mkdir(exist_ok=True)
        return files

    # -- run.json -----------------------------------------------------------

    def write_run_json(self, meta: Mapping[str, Any]) -> None:
        """Write run.json (at the start, and again at the end with `finished`/`status`)."""
        data: dict[str, Any] = {"format": FORMAT, "secperf_version": __version__}
        data.update(meta)
        data["format"] = FORMAT
        _write_json_atomic(self.run_json_path, data)

    def read_run_json(self) -> dict[str, Any]:
        """run.json as the current format holds it (an older run's upgraded)."""
        data = self._read_json(self.run_json_path)
        fmt = data.get("format")
        return upgrade(fmt, data, "run.json") if isinstance(fmt, int) and readable(fmt) else data

    @property
    def format(self) -> int:
        """The format the run was written in (run.json's `format`)."""
        if self._format is None:
            fmt = self._read_json(self.run_json_path).get("format")
            self._format = fmt if isinstance(fmt, int) and readable(fmt) else FORMAT
        return self._format

    def update_run_json(self, **changes: Any) -> dict[str, Any]:
        """Rewrite run.json with some keys changed (e.g. status, finished, stops)."""
        meta = self.read_run_json()
        meta.update(changes)
        self.write_run_json(meta)
        return meta

    # -- records.jsonl ------------------------------------------------------

    def _next_seq(self) -> int:
        if self._seq is None:  # opened an existing run: continue its numbering
            self._seq = sum(1 for _ in self.iter_records())
        seq = self._seq
        self._seq += 1
        return seq

    def append_record(self, tags: Mapping[str, Any], record: Mapping[str, Any]) -> int:
        """Append one tagged engine record; the line is on disk when this returns.

        `seq` is the caller's when `tags` has one, else the record's index in the file.
        Returns it.
        """
        given = tags.get("seq")
        seq = given if isinstance(given, int) else self._next_seq()
        line: dict[str, Any] = {key: tags[key] for key in TAG_KEYS if key in tags}
        line.update({k: v for k, v in tags.items() if k not in line and k != "record"})
        line["seq"] = seq
        line["record"] = dict(record)
        text = json.dumps(line, ensure_ascii=False, allow_nan=False)
        # Open, write, close per line: a Ctrl-C or crash keeps every line written.
        append_line(self.records_path, text)
        return seq

    def iter_records(self) -> Iterator[dict[str, Any]]:
        """Every tagged record line, in file order.

        A last line cut short (the process was killed mid-write) is skipped;
        a damaged line elsewhere is an error.
        """
        self.dropped = []
        source = self.records_source
        if not source.exists():
            return
        fmt = self.format if self.run_json_path.is_file() else FORMAT
        if source.name.endswith(".gz"):
            with gzip.open(source, "rt", encoding="utf-8") as z:
                lines = z.readlines()
        else:
            with source.open("r", encoding="utf-8") as f:
                lines = f.readlines()
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except json.JSONDecodeError as exc:
                if number == len(lines) and not raw.endswith("\n"):
                    # Say what was lost: the caller reports it (never a silent "complete").
                    self.dropped.append(
                        {
                            "line": number,
                            "reason": "cut short (the writer was killed mid-line)",
                            "text": raw[:120],
                        }
                    )
                    return
                raise RunDirError(
                    f"damaged record line: {exc.msg}",
                    where=f"{source}:{number}",
                    fix="remove or repair that line; the other records are intact",
                ) from exc
            if not isinstance(line, dict) or not isinstance(line.get("record"), dict):
                raise RunDirError(
                    "record line is not an object with a `record` object",
                    where=f"{source}:{number}",
                    fix="remove or repair that line",
                )
            yield upgrade(fmt, line, "records.jsonl")

    def iter_lines(self) -> Iterator[RecordLine]:
        """Every line as its model (iter_records, read through RecordLine)."""
        for line in self.iter_records():
            yield RecordLine.model_validate(line)

    # -- summary.json -------------------------------------------------------

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        _write_json_atomic(self.summary_path, summary)

    def read_summary(self) -> dict[str, Any]:
        """summary.json as the current format holds it (by its own `format`: a report
        rebuilt since the run was made is newer than the run's run.json)."""
        data = self._read_json(self.summary_path)
        fmt = data.get("format")
        if isinstance(fmt, int) and readable(fmt):
            return upgrade(fmt, data, "summary.json")
        return data

    def has_summary(self) -> bool:
        return self.summary_path.is_file()

    # -- helpers --------------------------------------------------------------

    def _read_json(self, path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise RunDirError(
                f"{path.name} is missing",
                where=str(path),
                fix="check the run directory path",
            ) from exc
        except json.JSONDecodeError as exc:
            raise RunDirError(
                f"{path.name} is not valid JSON: {exc.msg}",
                where=f"{path}:{exc.lineno}",
                fix="restore the file; summary.json can be rebuilt with `secperf report`",
            ) from exc
        if not isinstance(data, dict):
            raise RunDirError(
                f"{path.name} is not a JSON object",
                where=str(path),
                fix="restore the file",
            )
        return data
