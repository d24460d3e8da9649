"""Driving secperf-engine: start servers, run tests, read records (the binary's
path comes from secperf.tools).

The engine speaks NDJSON on stdout (docs/engine-protocol.md). Records are handed
to the caller line by line as they arrive, so a run interrupted halfway keeps
every record the engine had already written.
"""

from __future__ import annotations

import json
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from secperf.errors import EngineError, ToolMissingError
from secperf.testbed.testbed import Host, ManagedProcess
from secperf.tools import engine_path

# The engine server's control port and the data port range it allocates from:
# a firewall that matches ports must know them.
CONTROL_PORT = 5201
DATA_PORTS = (5300, 5399)

Record = dict[str, Any]


def engine_version() -> str:
    try:
        out = subprocess.run(
            [engine_path(), "version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (ToolMissingError, OSError):
        return "missing"
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"


def _read_line(proc: ManagedProcess, deadline: float) -> str | None:
    """One stdout line, or None at EOF or when the deadline passes."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if sel.select(timeout=left):
                line = proc.stdout.readline()
                return line if line else None
    finally:
        sel.close()


def _read_back(f: IO[str]) -> str:
    f.seek(0)
    return f.read().strip()[-2000:]


def _parse(line: str, where: str) -> Record:
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EngineError(
            f"secperf-engine wrote a line that is not JSON: {line.strip()[:200]!r} ({exc})",
            where=where,
            fix="rebuild the engine (`make engine`); this is a bug, please report it",
        ) from exc
    if not isinstance(rec, dict) or "type" not in rec:
        raise EngineError(f"secperf-engine wrote a record without a type: {line.strip()[:200]!r}")
    return rec


@dataclass
class EngineServer:
    process: ManagedProcess
    listen: str
    errors: IO[str]  # its stderr: a file, since a pipe nobody drains could block it

    def stop(self) -> None:
        self.process.stop()
        self.errors.close()


def start_server(
    host: Host, listen: str, *, data_ports: tuple[int, int] | None = None, timeout: float = 10.0
) -> EngineServer:
    """Start `secperf-engine serve` in a host and wait for its `listening` record."""
    argv = [engine_path(), "serve", "--listen", listen]
    if data_ports:
        argv += ["--data-ports", f"{data_ports[0]}-{data_ports[1]}"]
    errfile = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives as long as the server
    proc = host.spawn(argv, stdout=subprocess.PIPE, stderr=errfile, label="engine-server")
    server = EngineServer(proc, listen, errfile)
    line = _read_line(proc, time.monotonic() + timeout)
    rec = _parse(line, f"engine server in {host.name}") if line else None
    if rec is None or rec.get("type") != "listening":
        proc.stop()
        msg = rec.get("message") if rec else (_read_back(errfile) or "no output")
        server.stop()
        raise EngineError(
            f"secperf-engine serve did not start in {host.name}: {msg}",
            where=f"host {host.name}",
            fix="check that the port is free in that host (`secperf doctor` lists the tools)",
            record=rec,
        )
    return server


@dataclass
class EngineRun:
    records: list[Record] = field(default_factory=list)

    @property
    def result(self) -> Record:
        for rec in reversed(self.records):
            if rec.get("type") == "result":
                return rec
        raise EngineError(
            "secperf-engine finished without a result record",
            fix="the engine exited early: run the spec by hand (`secperf-engine run --spec`) "
            "to see why, and report it",
        )


# Specs longer than this go to the engine through a file (see EngineTest).
SPEC_ARG_MAX = 96 * 1024


class EngineTest:
    """One `secperf-engine run` under way in a host; several can run at once."""

    def __init__(self, host: Host, spec: dict[str, Any], *, timeout: float | None = None):
        groups = host.cpu_groups
        if groups and "cpu_groups" not in spec:
            # Every host's CPU over the test's own measured window (docs/methodology.md).
            spec = {**spec, "cpu_groups": groups}
        fds = [int(g["fd"]) for g in spec.get("cpu_groups") or [] if g.get("fd") is not None]
        self.spec = spec
        self.where = (
            f"{spec.get('kind')} test from {host.name} to {spec.get('server') or 'its servers'}"
        )
        duration = float(spec.get("duration", 10)) + float(spec.get("warmup", 1))
        self.budget = timeout or duration + 30.0
        self.deadline = time.monotonic() + self.budget
        self.errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in collect()
        text = json.dumps(spec, separators=(",", ":"))
        self.spec_file: Any = None
        if len(text) > SPEC_ARG_MAX:
            # One argument may hold 128 KiB at most (MAX_ARG_STRLEN): a larger spec (a
            # review's thousand flows) goes through a file of root's, `--spec @FILE`.
            if not host.shares_files:
                raise EngineError(
                    f"the {self.where}'s spec is {len(text) // 1024} KiB, more than one "
                    "command-line argument holds, and the host is not on this machine",
                    fix="send fewer flows from one host (split the traffic)",
                )
            self.spec_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in collect()
                mode="w", prefix="secperf-spec-", suffix=".json"
            )
            self.spec_file.write(text)
            self.spec_file.flush()
            text = f"@{self.spec_file.name}"
        argv = [engine_path(), "run", "--spec", text]
        self.proc = host.spawn(
            argv, stdout=subprocess.PIPE, stderr=self.errors, label="engine-run", pass_fds=fds
        )
        self._early: list[Record] = []  # read by wait_started, handed on by collect

    def wait_started(self, timeout: float = 10.0) -> Record:
        """Read records until the test's `start` record (its traffic has begun) and
        return it; collect() still hands every record on. Raises EngineError if the
        engine ends or fails first."""
        deadline = min(self.deadline, time.monotonic() + timeout)
        while True:
            line = _read_line(self.proc, deadline)
            if line is None:
                self.stop()
                raise EngineError(
                    f"the {self.where} did not start within {timeout:.0f} s",
                    fix="the engine's records so far are kept; run the spec by hand "
                    "(`secperf-engine run --spec`) to see why",
                    record=self._early[-1] if self._early else None,
                )
            rec = _parse(line, self.where)
            self._early.append(rec)
            if rec.get("type") == "start":
                return rec
            if rec.get("type") == "error":
                self.stop()
                raise EngineError(
                    f"{self.where} failed: {rec.get('message')}",
                    fix="the engine's message says what to change",
                    record=rec,
                )

    def collect(self, on_record: Callable[[Record], None] | None = None) -> EngineRun:
        """Read every record to the end; raise EngineError if the test failed."""
        run = EngineRun()
        try:
            for rec in self._early:
                run.records.append(rec)
                if on_record:
                    on_record(rec)
            while True:
                line = _read_line(self.proc, self.deadline)
                if line is None:
                    break
                rec = _parse(line, self.where)
                run.records.append(rec)
                if on_record:
                    on_record(rec)
            if time.monotonic() >= self.deadline:
                raise EngineError(
                    f"the {self.where} ran past its {self.budget:.0f} s budget",
                    fix="the engine or the path is stuck; look at the records so far",
                )
        finally:
            self.proc.stop()
            stderr = _read_back(self.errors)
            self.errors.close()
            self._drop_spec_file()
        last = run.records[-1] if run.records else None
        if last is None or last.get("type") == "error" or self.proc.returncode not in (0, None):
            msg = str(last.get("message")) if last else (stderr or "no output")
            raise EngineError(
                f"{self.where} failed: {msg}",
                where=f"field {last['field']}" if last and last.get("field") else None,
                fix="the engine's message says what to change; its records are kept in "
                "records.jsonl",
                record=last,
            )
        return run

    def stop(self) -> None:
        self.proc.stop()
        self._drop_spec_file()

    def _drop_spec_file(self) -> None:
        if self.spec_file is not None:
            self.spec_file.close()  # a NamedTemporaryFile: closing removes it
            self.spec_file = None

    def interrupt(self) -> None:
        """SIGINT the engine: a flood then stops sending and writes its result (with
        `stopped_by: "signal"`); collect() reads it. A no-op once it has exited."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)


def run_test(
    host: Host,
    spec: dict[str, Any],
    *,
    on_record: Callable[[Record], None] | None = None,
    timeout: float | None = None,
) -> EngineRun:
    """Run one engine test in `host`; every record goes to on_record as it arrives.

    Raises EngineError carrying the engine's error record if the test failed.
    """
    return EngineTest(host, spec, timeout=timeout).collect(on_record)
