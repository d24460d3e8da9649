"""docs/data-format.md's generated parts: the format number, and the field tables of
the records a run directory holds, from their models (secperf/results/records.py).

The page is hand-written prose around blocks marked
`<!-- generated: NAME -->` … `<!-- /generated: NAME -->`; each block's text is
BLOCKS[NAME]'s output. Regenerate with `make docs` (or
`python -m secperf.docgen.data_format`); tests/unit/test_data_format_doc.py fails
when a block and its generator's output differ.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from secperf.docgen.page import write_or_check
from secperf.results import records, upgrade

ROOT = Path(__file__).resolve().parents[2]
PAGE = Path("docs") / "data-format.md"
BLOCK = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- /generated: \2 -->)", re.S)


def type_text(annotation: Any) -> str:
    """A field's type in the words the tables use."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a!r}`".replace("'", '"') for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [type_text(a) for a in args if a is not type(None)]
        return " \\| ".join(parts) + (" \\| null" if type(None) in args else "")
    if origin is list:
        return f"list of {type_text(args[0])}" if args else "list"
    if origin is dict:
        return f"object of {type_text(args[1])}" if args and args[1] is not Any else "object"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    names = {int: "int", float: "number", str: "string", bool: "bool"}
    return names.get(annotation, str(annotation))


def field_table(model: type[BaseModel], skip: type[BaseModel] | None = None) -> str:
    """key | type | meaning, one row a field (those `skip` has aside); neighbours of one
    meaning share a row."""
    rows: list[tuple[list[str], list[str], str]] = []
    for name, info in model.model_fields.items():
        if skip is not None and name in skip.model_fields:
            continue
        meaning = (info.description or "").replace("|", "\\|").replace("\n", " ")
        kind = type_text(info.annotation)
        if rows and meaning and rows[-1][2] == meaning:
            rows[-1][0].append(name)
            if kind not in rows[-1][1]:
                rows[-1][1].append(kind)
            continue
        rows.append(([name], [kind], meaning))
    lines = ["| key | type | meaning |", "|---|---|---|"]
    for names, kinds, meaning in rows:
        keys = ", ".join(f"`{n}`" for n in names)
        lines.append(f"| {keys} | {'; '.join(kinds)} | {meaning} |")
    return "\n".join(lines) + "\n"


def _doc(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").split())


def model_section(models: Sequence[type[BaseModel]], level: str = "####") -> str:
    """A heading, the model's docstring and its table, for each model."""
    parts = []
    for model in models:
        doc = _doc(model)
        parts.append(
            f"{level} {model.__name__}\n\n" + (f"{doc}\n\n" if doc else "") + field_table(model)
        )
    return "\n".join(parts)


def _parts() -> list[type[BaseModel]]:
    """The models the engine records are built of, in the order first used."""
    seen: list[type[BaseModel]] = []

    def walk(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in seen and annotation not in records.ENGINE_MODELS:
                seen.append(annotation)
                for info in annotation.model_fields.values():
                    walk(info.annotation)
            return
        for arg in typing.get_args(annotation):
            walk(arg)

    for model in records.ENGINE_MODELS:
        for info in model.model_fields.values():
            walk(info.annotation)
    return seen


def _format() -> str:
    steps = ", ".join(f"{n} → {n + 1}" for n in sorted(upgrade.STEPS))
    return (
        f'Format version: **{upgrade.FORMAT}** (`"format": {upgrade.FORMAT}` in `run.json` and '
        "`summary.json`). A change that removes or renames a field bumps it; adding a field "
        "does not. A run directory of an older format is read through one upgrade step per "
        f"version (secperf/results/upgrade.py: {steps}), so every kept run still reports; "
        "one of a newer format is refused, and the error says so.\n"
    )


BLOCKS: dict[str, Callable[[], str]] = {
    "format": _format,
    "record-line": lambda: field_table(records.RecordLine),
    "engine-records": lambda: model_section(records.ENGINE_MODELS),
    "engine-record-parts": lambda: model_section(_parts()),
    "summary-row": lambda: field_table(records.SummaryRow),
    "printed-row": lambda: field_table(records.PrintedRow, skip=records.SummaryRow),
}


def render(text: str) -> str:
    """`text` with every generated block written again."""

    def block(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in BLOCKS:
            raise KeyError(
                f"docs/data-format.md names a generated block {name!r} with no generator"
            )
        return m.group(1) + BLOCKS[name]() + m.group(4)

    return BLOCK.sub(block, text)


def main(argv: list[str] | None = None) -> int:
    return write_or_check(argv, PAGE, lambda text, _root: render(text), f"{PAGE}'s tables")


if __name__ == "__main__":
    raise SystemExit(main())
