"""The results store: one SQLite file holding every run's identity and summary rows
(docs/history.md, "The store"). SQLite because it is in the standard library, one file,
and safe for several writers at once (WAL mode, a busy timeout, a transaction per run)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secperf.errors import SecperfError

SCHEMA_VERSION = 1
DEFAULT_STORE = Path("results") / "history.sqlite"
STORE_ENV = "SECPERF_STORE"
BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    run_dir TEXT NOT NULL UNIQUE,
    scenario TEXT NOT NULL,
    scenario_hash TEXT,
    started TEXT,
    finished TEXT,
    status TEXT,
    secperf_version TEXT,
    cpu_model TEXT,
    cpus INTEGER,
    kernel TEXT,
    placement TEXT,
    fingerprint TEXT NOT NULL,
    labels TEXT NOT NULL DEFAULT '{}',
    added TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
CREATE INDEX runs_scenario ON runs (scenario, started);
CREATE TABLE rows (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    variant TEXT NOT NULL,
    workload TEXT NOT NULL,
    point_id TEXT NOT NULL,
    label TEXT NOT NULL,
    metric TEXT NOT NULL,
    unit TEXT,
    mean REAL,
    ci_low REAL,
    ci_high REAL,
    degradation_pct REAL,
    degradation_ci_low REAL,
    degradation_ci_high REAL,
    n INTEGER,
    degradation_n INTEGER,
    bottleneck TEXT,
    verdict TEXT
);
CREATE INDEX rows_run ON rows (run_id);
"""

ROW_COLUMNS = (
    "variant",
    "workload",
    "point_id",
    "label",
    "metric",
    "unit",
    "mean",
    "ci_low",
    "ci_high",
    "degradation_pct",
    "degradation_ci_low",
    "degradation_ci_high",
    "n",
    "degradation_n",
    "bottleneck",
    "verdict",
)
RUN_COLUMNS = (
    "run_dir",
    "scenario",
    "scenario_hash",
    "started",
    "finished",
    "status",
    "secperf_version",
    "cpu_model",
    "cpus",
    "kernel",
    "placement",
    "fingerprint",
)


class HistoryError(SecperfError):
    """The results store cannot be opened, read or written."""


@dataclass
class RunEntry:
    """One run as the store keeps it: its identity (RUN_COLUMNS), labels and rows."""

    run: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)


def store_path(given: Path | str | None = None) -> Path:
    """--store, else $SECPERF_STORE, else results/history.sqlite."""
    if given is not None:
        return Path(given)
    env = os.environ.get(STORE_ENV)
    return Path(env) if env else DEFAULT_STORE


def _damaged(path: Path, exc: Exception) -> HistoryError:
    return HistoryError(
        f"not a readable secperf results store ({exc})",
        where=str(path),
        fix="move the file aside (it is never rebuilt silently), then `secperf history "
        "import` the run directories again into a new store, or give another --store",
    )


class Store:
    """An open results store. Use as a context manager, or call close()."""

    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self.conn = conn

    @classmethod
    def open(cls, path: Path | str | None = None, *, create: bool = True) -> Store:
        """Open (or create) the store, checking its schema version."""
        where = store_path(path)
        if not where.exists():
            if not create:
                raise HistoryError(
                    "no results store here",
                    where=str(where),
                    fix="run a scenario (`secperf run`) or `secperf history import "
                    "RUN_DIR…` first, or give the store's path with --store",
                )
            try:
                where.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise HistoryError(
                    f"cannot create the store's folder: {exc.strerror or exc}",
                    where=str(where.parent),
                    fix="give --store a path you may write",
                ) from None
        try:
            conn = sqlite3.connect(where, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except sqlite3.Error as exc:
            raise _damaged(where, exc) from None
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
            cls._check_schema(where, conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise _damaged(where, exc) from None
        except HistoryError:
            conn.close()
            raise
        return cls(where, conn)

    @staticmethod
    def _check_schema(where: Path, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if version == 0 and not tables:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version != SCHEMA_VERSION:
                raise HistoryError(
                    f"results store of schema version {version}; this secperf reads "
                    f"version {SCHEMA_VERSION}",
                    where=str(where),
                    fix="use the secperf that wrote it, or give --store a new file and "
                    "`secperf history import` the run directories into it",
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise _damaged(self.path, exc) from None

    def add(self, entry: RunEntry) -> tuple[int, bool]:
        """Add one run with its rows in one transaction: (its id, whether it is new).
        A run directory already in the store is one run: its labels are merged, its rows
        kept."""
        run = entry.run
        with self._transaction():
            found = self.conn.execute(
                "SELECT id, labels FROM runs WHERE run_dir = ?", (run["run_dir"],)
            ).fetchone()
            if found is not None:
                labels = {**json.loads(found["labels"] or "{}"), **entry.labels}
                self.conn.execute(
                    "UPDATE runs SET labels = ? WHERE id = ?",
                    (json.dumps(labels, sort_keys=True), found["id"]),
                )
                return int(found["id"]), False
            cur = self.conn.execute(
                f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}, labels) "
                f"VALUES ({', '.join('?' * (len(RUN_COLUMNS) + 1))})",
                (*(run.get(c) for c in RUN_COLUMNS), json.dumps(entry.labels, sort_keys=True)),
            )
            run_id = int(cur.lastrowid or 0)
            self.conn.executemany(
                f"INSERT INTO rows (run_id, {', '.join(ROW_COLUMNS)}) "
                f"VALUES (?, {', '.join('?' * len(ROW_COLUMNS))})",
                [(run_id, *(r.get(c) for c in ROW_COLUMNS)) for r in entry.rows],
            )
            return run_id, True

    def runs(self, scenario: str | None = None) -> list[dict[str, Any]]:
        """The runs (of one scenario), oldest first."""
        where, args = ("WHERE scenario = ?", (scenario,)) if scenario else ("", ())
        return [
            _run_dict(r)
            for r in self._query(f"SELECT * FROM runs {where} ORDER BY started, id", args)
        ]

    def series_rows(
        self, scenario: str, *, since: str | None = None, filters: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Every row of the scenario's runs, joined with its run, oldest run first."""
        sql = [
            "SELECT runs.*, rows.* FROM rows JOIN runs ON runs.id = rows.run_id",
            "WHERE runs.scenario = ?",
        ]
        args: list[Any] = [scenario]
        if since:
            sql.append("AND runs.started >= ?")
            args.append(since)
        for key, value in (filters or {}).items():
            if key not in ("variant", "workload", "metric", "label"):
                raise ValueError(key)
            sql.append(f"AND rows.{key} = ?")
            args.append(value)
        sql.append("ORDER BY runs.started, runs.id, rows.rowid")
        return [_run_dict(r) for r in self._query(" ".join(sql), tuple(args))]

    def _query(self, sql: str, args: Sequence[Any]) -> list[sqlite3.Row]:
        try:
            return list(self.conn.execute(sql, args))
        except sqlite3.DatabaseError as exc:
            raise _damaged(self.path, exc) from None


def _run_dict(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["labels"] = json.loads(out.get("labels") or "{}")
    return out
