"""Read a scenario file and turn every problem in it into one readable error.

Each problem names the file, the line (found by walking the key path through
the raw TOML text), the key path (`workloads[1].mesage`), what was expected,
and for a misspelt key the nearest valid one. All problems are reported at
once, so a user fixes a file in one pass.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import tomllib
import types
import typing
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from secperf.errors import ScenarioError
from secperf.scenario.scenario import Scenario
from secperf.schema.registry import KindRegistry
from secperf.schema.units import toml_repr

Key = str | int
KeyPath = tuple[Key, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a scenario file."""

    path: KeyPath
    message: str
    line: int | None = None
    fix: str | None = None

    @property
    def key(self) -> str:
        return format_path(self.path)


class ScenarioValidationError(ScenarioError):
    """A scenario file with one or more problems; `problems` lists them in file order."""

    def __init__(self, file: Path, problems: list[Problem]):
        self.file = file
        self.problems = problems
        first = problems[0]
        where = f"{file}:{first.line}" if first.line else str(file)
        if len(problems) == 1:
            message = f"{first.key}: {first.message}" if first.key else first.message
            super().__init__(message, where=where, fix=first.fix)
            return
        lines = [f"{len(problems)} problems in the scenario:"]
        for problem in problems:
            at = f"line {problem.line}" if problem.line else "(no line)"
            head = f"{problem.key}: " if problem.key else ""
            lines.append(f"  {at}: {head}{problem.message}")
            if problem.fix:
                lines.append(f"    fix: {problem.fix}")
        super().__init__("\n".join(lines), where=where)


def format_path(path: KeyPath) -> str:
    """('workloads', 1, 'message') -> 'workloads[1].message'."""
    text = ""
    for key in path:
        if isinstance(key, int):
            text += f"[{key}]"
        else:
            shown = key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'
            text += f".{shown}" if text else shown
    return text


# ---------------------------------------------------------------- lines in the raw text


class _LineMap:
    """Maps key paths to the line where they are written, for a valid TOML text.

    A small scanner, not a parser: tomllib has already accepted the text, so it
    only needs to follow table headers (counting `[[array]]` tables), keys,
    dotted keys, inline tables and arrays, and skip strings and comments.
    """

    _BARE = re.compile(r"[A-Za-z0-9_-]+")

    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.lines: dict[KeyPath, int] = {}
        self._starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
        with contextlib.suppress(IndexError, ValueError):  # best effort: keep what was mapped
            self._scan()

    def line_of(self, path: KeyPath) -> int | None:
        """The line of `path`, or of its longest prefix that is written in the file."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None

    def _line(self, pos: int) -> int:
        return bisect_right(self._starts, pos)

    def _record(self, path: KeyPath, pos: int) -> None:
        self.lines.setdefault(path, self._line(pos))

    def _peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def _skip(self, newlines: bool) -> None:
        """Skip blanks and comments (and newlines if asked)."""
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            if c in " \t\r" or (newlines and c == "\n"):
                self.pos += 1
            elif c == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                return

    def _scan(self) -> None:
        table: KeyPath = ()
        arrays: dict[KeyPath, int] = {}
        while True:
            self._skip(newlines=True)
            if self.pos >= len(self.text):
                return
            start = self.pos
            if self._peek(2) == "[[":
                self.pos += 2
                parts = self._key(end="]")
                self.pos += 2
                prefix = self._resolve(parts[:-1], arrays)
                path = (*prefix, parts[-1])
                index = arrays.get(path, 0)
                arrays[path] = index + 1
                table = (*path, index)
                self._record(path, start)
                self._record(table, start)
            elif self._peek() == "[":
                self.pos += 1
                parts = self._key(end="]")
                self.pos += 1
                table = self._resolve(parts, arrays)
                self._record(table, start)
            else:
                parts = self._key(end="=")
                self.pos += 1
                for n in range(1, len(parts) + 1):
                    self._record((*table, *parts[:n]), start)
                self._value((*table, *parts))

    @staticmethod
    def _resolve(parts: tuple[str, ...], arrays: dict[KeyPath, int]) -> KeyPath:
        """Header keys to a path, entering the latest element of each [[array]]."""
        path: KeyPath = ()
        for part in parts:
            path = (*path, part)
            if path in arrays:
                path = (*path, arrays[path] - 1)
        return path

    def _key(self, end: str) -> tuple[str, ...]:
        parts: list[str] = []
        while True:
            self._skip(newlines=False)
            c = self._peek()
            if c == '"':
                parts.append(self._basic_string())
            elif c == "'":
                parts.append(self._literal_string())
            else:
                match = self._BARE.match(self.text, self.pos)
                if match is None:
                    raise ValueError("not a key")
                parts.append(match.group(0))
                self.pos = match.end()
            self._skip(newlines=False)
            if self._peek() == ".":
                self.pos += 1
                continue
            if self._peek() != end:
                raise ValueError("unexpected text after a key")
            return tuple(parts)

    def _basic_string(self) -> str:
        self.pos += 1
        out: list[str] = []
        while self.text[self.pos] != '"':  # IndexError at the end of the text
            if self.text[self.pos] == "\\":
                out.append(self.text[self.pos : self.pos + 2])
                self.pos += 2
            else:
                out.append(self.text[self.pos])
                self.pos += 1
        self.pos += 1
        # Keys with escapes are rare; decode the common ones through TOML itself.
        raw = "".join(out)
        return str(tomllib.loads(f'k = "{raw}"')["k"]) if "\\" in raw else raw

    def _literal_string(self) -> str:
        end = self.text.index("'", self.pos + 1)
        value = self.text[self.pos + 1 : end]
        self.pos = end + 1
        return value

    def _value(self, path: KeyPath) -> None:
        self._skip(newlines=False)
        if self._peek(3) in ('"""', "'''"):
            quote = self._peek(3)
            self.pos += 3
            while self._peek(3) != quote:
                if self.pos >= len(self.text):
                    raise ValueError("unterminated string")
                self.pos += 2 if quote == '"""' and self._peek() == "\\" else 1
            self.pos += 3
            while self._peek() == quote[0]:  # up to two quotes may end the content
                self.pos += 1
        elif self._peek() == '"':
            self._basic_string()
        elif self._peek() == "'":
            self._literal_string()
        elif self._peek() == "[":
            self.pos += 1
            index = 0
            while True:
                self._skip(newlines=True)
                if self._peek() == "]":
                    self.pos += 1
                    return
                self._record((*path, index), self.pos)
                before = self.pos
                self._value((*path, index))
                if self.pos == before:
                    raise ValueError("no progress")  # never loop on text we do not understand
                index += 1
                self._skip(newlines=True)
                if self._peek() == ",":
                    self.pos += 1
        elif self._peek() == "{":
            self.pos += 1
            while True:
                self._skip(newlines=True)
                if self._peek() == "}":
                    self.pos += 1
                    return
                start = self.pos
                parts = self._key(end="=")
                self.pos += 1
                for n in range(1, len(parts) + 1):
                    self._record((*path, *parts[:n]), start)
                self._value((*path, *parts))
                self._skip(newlines=True)
                if self._peek() not in (",", "}"):
                    raise ValueError("unexpected text in an inline table")
                if self._peek() == ",":
                    self.pos += 1
        else:  # number, bool, date: up to the next delimiter
            match = re.compile(r"[^,\]}\n#]*").match(self.text, self.pos)
            assert match is not None
            self.pos = match.end()


# ---------------------------------------------------------------- from pydantic errors to problems


def _unwrap(tp: Any, raw: Any) -> Any:
    """Strip Annotated/Optional; pick a union member by the raw value's `kind`."""
    while True:
        origin = typing.get_origin(tp)
        registry = _registry_of(tp)
        if registry is not None:
            kind = raw.get("kind") if isinstance(raw, dict) else None
            return registry.get(kind).model if isinstance(kind, str) and kind in registry else None
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin is typing.Union or origin is types.UnionType:
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
            kind = raw.get("kind") if isinstance(raw, dict) else None
            chosen = [m for m in models if _kind_of(m) == kind] or models[:1] or members[:1]
            if not chosen:
                return None
            tp = chosen[0]
        else:
            return tp


def _registry_of(tp: Any) -> KindRegistry[Any] | None:
    """The kind registry an `Annotated[Base, REGISTRY]` entry is validated through."""
    if typing.get_origin(tp) is not typing.Annotated:
        return None
    return next((m for m in tp.__metadata__ if isinstance(m, KindRegistry)), None)


def _kind_of(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("kind")
    if field is None:
        return None
    args = typing.get_args(field.annotation)
    return str(args[0]) if args else None


def _type_at(path: KeyPath, raw: Any) -> Any:
    """The type annotation that validates the value at `path` of the raw data."""
    tp: Any = Scenario
    for key in path:
        tp = _unwrap(tp, raw)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if not isinstance(key, str) or key not in tp.model_fields:
                return None
            tp = tp.model_fields[key].annotation
        elif typing.get_origin(tp) in (list, dict):
            tp = typing.get_args(tp)[-1]
        else:
            return None
        raw = _child(raw, key)
    return tp


def _model_at(path: KeyPath, raw: Any) -> type[BaseModel] | None:
    """The model class that validates the table at `path` of the raw data."""
    tp = _unwrap(_type_at(path, raw), _child_at(raw, path))
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _child_at(raw: Any, path: KeyPath) -> Any:
    for key in path:
        raw = _child(raw, key)
    return raw


def _child(raw: Any, key: Key) -> Any:
    if isinstance(raw, dict):
        return raw.get(key)
    if isinstance(raw, list) and isinstance(key, int) and 0 <= key < len(raw):
        return raw[key]
    return None


def _is_union(path: KeyPath, raw: Any) -> bool:
    tp = _type_at(path, raw)
    if _registry_of(tp) is not None:
        return True
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _clean_loc(loc: tuple[int | str, ...], raw: Any) -> tuple[KeyPath, bool]:
    """Drop pydantic's union tags ('workloads', 1, 'rr', 'x' -> 'workloads', 1, 'x').

    Returns the path and whether the error is about a dict key (a name)."""
    path: list[Key] = []
    is_key = False
    node = raw
    tagged: KeyPath | None = None
    for part in loc:
        if part == "[key]":
            is_key = True
            continue
        if (
            isinstance(node, dict)
            and node.get("kind") == part
            and tuple(path) != tagged
            and _is_union(tuple(path), raw)
        ):
            tagged = tuple(path)  # one tag per union; a second 'stream' is a key
            continue  # the discriminator's tag, not a key of the file
        path.append(part)
        node = _child(node, part)
    return tuple(path), is_key


def _show(value: Any) -> str:
    text = toml_repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _problem(error: Any, raw: Any, lines: _LineMap) -> Problem:
    path, is_key = _clean_loc(tuple(error["loc"]), raw)
    kind = error["type"]
    ctx = error.get("ctx") or {}
    given = error.get("input")
    fix: str | None = None
    if kind == "extra_forbidden":
        parent = path[:-1]
        model = _model_at(parent, raw)
        valid = sorted(model.model_fields) if model else []
        valid = [k for k in valid if not (model is Scenario and k == "source")]
        unknown = str(path[-1])
        message = f"unknown key {unknown!r}"
        close = difflib.get_close_matches(unknown, valid, n=1, cutoff=0.6)
        if close:
            fix = f"did you mean {close[0]!r}?"
        elif valid:
            fix = "valid keys here: " + ", ".join(valid)
    elif kind == "missing":
        message = f"missing required key {path[-1]!r}" if path else "missing required key"
    elif kind == "union_tag_invalid":
        expected = ctx.get("expected_tags", "")
        message = f"unknown kind {ctx.get('tag')!r}; expected one of {expected}"
        tags = re.findall(r"'([^']*)'", str(expected))
        close = difflib.get_close_matches(str(ctx.get("tag")), tags, n=1, cutoff=0.6)
        if close:
            fix = f"did you mean {close[0]!r}?"
        path = (*path, "kind")
    elif kind == "union_tag_not_found":
        message = f"missing key 'kind' (one of {_expected_kinds(path, raw)})"
    elif kind == "literal_error":
        message = f"expected {ctx.get('expected')}, got {_show(given)}"
    elif kind == "value_error":
        message = str(error["msg"]).removeprefix("Value error, ")
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        message = f"expected a table, got {_show(given)}"
    elif kind == "list_type":
        message = f"expected a list, got {_show(given)}"
    else:
        text = str(error["msg"])
        if text.startswith("Input should be "):
            text = "expected " + text.removeprefix("Input should be ")
        message = f"{text}, got {_show(given)}"
    if is_key:
        message = f"bad name {str(path[-1])!r}: {message}"
    if kind == "value_error":
        # A cross-field check names the key it is about: `workloads[1].load is ...`,
        # `mechanisms[0] and mechanisms[1] ...`; point the line at it.
        named = _named_path(message)
        if named and (not path or named[0] not in path):
            deeper = (*path, *named) if path and named[0] != path[0] else named
            if lines.line_of(deeper) is not None:
                path = deeper
    return Problem(path=path, message=message, line=lines.line_of(path), fix=fix)


_NAMED = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*(?:\[\d+\]|\.[A-Za-z_][A-Za-z0-9_-]*)*)")


def _named_path(message: str) -> KeyPath:
    """The key path a message starts with (`workloads[1].load` -> ('workloads', 1, 'load'))."""
    match = _NAMED.match(message)
    if match is None or ("[" not in match.group(1) and "." not in match.group(1)):
        return ()
    out: list[Key] = []
    for name, index in re.findall(r"([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]", match.group(1)):
        out.append(int(index) if index else name)
    return tuple(out)


def _expected_kinds(path: KeyPath, raw: Any) -> str:
    tp = _type_at(path, raw)
    registry = _registry_of(tp)
    if registry is not None:
        return ", ".join(repr(k) for k in registry.names())
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    kinds = [_kind_of(m) for m in typing.get_args(tp) if isinstance(m, type)]
    return ", ".join(repr(k) for k in kinds if k) or "see docs/scenario-format.md"


# ---------------------------------------------------------------- the entry points


def _toml_error(path: Path, exc: tomllib.TOMLDecodeError) -> ScenarioError:
    # tomllib: "Invalid value (at line 3, column 9)"; keep its line and column.
    match = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
    where = f"{path}:{match.group(1)}" if match else str(path)
    twice = re.search(r"Cannot declare \(([^)]*)\) twice", str(exc))
    if twice:
        name = ".".join(p.strip().strip("'\"") for p in twice.group(1).split(",") if p.strip())
        return ScenarioError(
            f"the table [{name}] is written twice",
            where=where,
            fix=f"merge the two [{name}] tables into one (or rename one of them); "
            "a table may appear only once in a TOML file",
        )
    return ScenarioError(
        f"not valid TOML: {exc}",
        where=where,
        fix="check quoting, brackets and '=' on that line (strings need quotes: "
        'link_rate = "100mbit")',
    )


def parse_scenario(text: str, path: Path) -> Scenario:
    """Validate scenario text as if read from `path` (relative files resolve next to it)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(path, exc) from None
    lines = _LineMap(text)
    problems: list[Problem] = []
    if "source" in raw:  # ours, not a key of the format
        raw.pop("source")
        problems.append(Problem(("source",), "unknown key 'source'", lines.line_of(("source",))))
    try:
        scenario = Scenario.model_validate(
            raw, context={"base_dir": path.absolute().parent, "check_files": True}
        )
    except ValidationError as exc:
        problems.extend(_problem(error, raw, lines) for error in exc.errors())
        scenario = None
    if problems or scenario is None:
        problems.sort(key=lambda p: p.line or 0)
        raise ScenarioValidationError(path, problems)
    scenario.source = path.absolute()
    return scenario


def validate_dict(data: dict[str, Any], base_dir: Path) -> Scenario:
    """Validate a scenario given as a dict (the Python API); relative rule files resolve
    against `base_dir`. Problems are reported as for a file, without line numbers."""
    where = Path("<dict>")
    raw = dict(data)
    problems: list[Problem] = []
    if "source" in raw:
        raw.pop("source")
        problems.append(Problem(("source",), "unknown key 'source'"))
    no_lines = _LineMap("")
    try:
        scenario = Scenario.model_validate(
            raw, context={"base_dir": base_dir.absolute(), "check_files": True}
        )
    except ValidationError as exc:
        problems.extend(_problem(error, raw, no_lines) for error in exc.errors())
        scenario = None
    if problems or scenario is None:
        raise ScenarioValidationError(where, problems)
    return scenario


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario file; every problem becomes one ScenarioError."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ScenarioError(
            "scenario file not found",
            where=str(path),
            fix="check the path; shipped scenarios are in scenarios/ (e.g. scenarios/quick.toml)",
        ) from None
    except IsADirectoryError:
        raise ScenarioError(
            "is a directory, not a scenario file", where=str(path), fix="name a .toml file"
        ) from None
    except OSError as exc:
        raise ScenarioError(
            f"cannot read the scenario: {exc.strerror}",
            where=str(path),
            fix="check the path and that you may read the file",
        ) from None
    try:
        text = data.decode("utf-8-sig")  # an editor's byte-order mark is not an error
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            f"not UTF-8 text (byte {exc.start})", where=str(path), fix="save the file as UTF-8"
        ) from None
    return parse_scenario(text, path)


def check_scenario(path: Path) -> Scenario:
    """Validate without running anything (`secperf check`); same as load_scenario."""
    return load_scenario(path)
