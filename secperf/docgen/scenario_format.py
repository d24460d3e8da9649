"""The reference part of docs/scenario-format.md: every key of the scenario file, from
the pydantic models themselves.

Each section's model (Scenario, Testbed, Repeat, …) and each registered mechanism and
workload kind's model gives its keys in field order: the type and bounds (from the
value type's ValueDoc, secperf.schema.fields, else the annotation), the unit, the
default, an example and the meaning (the field's description: the string below it in
the model). A key declared by a part several kinds share (a mixin such as the flood
beside a stream) is one table, with the kinds it applies to. The hand-written tutorial
before the reference stays as written; this module replaces only what lies between
its two markers. Regenerate with `make docs` (or `python -m
secperf.docgen.scenario_format`); tests/unit/test_scenario_format_doc.py fails when
the page and this output differ.
"""

from __future__ import annotations

import inspect
import tomllib
import types
import typing
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from secperf.docgen import scenarios
from secperf.docgen.page import between, write_or_check
from secperf.mechanisms.base import MechanismSpec
from secperf.mechanisms.registry import MECHANISMS
from secperf.scenario.expect import Expect
from secperf.scenario.paper import PaperRow, PaperTable
from secperf.scenario.scenario import Repeat, Scenario, Timing, Variant
from secperf.schema.fields import ValueDoc, value_doc
from secperf.schema.registry import KindRegistry
from secperf.schema.sections import (
    InventoryHost,
    Testbed,
    TopologyHost,
    TopologyLink,
    TopologySection,
    TopologyZone,
    VmSection,
)
from secperf.workloads.base import WorkloadSpec
from secperf.workloads.registry import WORKLOADS

ROOT = Path(__file__).resolve().parents[2]
PAGE = Path("docs") / "scenario-format.md"
BEGIN = "<!-- BEGIN generated reference: secperf/docgen/scenario_format.py (make docs) -->"
END = "<!-- END generated reference -->"

# Keys the file never holds (the loader sets them).
HIDDEN = frozenset({"source"})
# The longest example taken from a shipped file, in characters.
EXAMPLE_MAX = 40

# (declaring class, key) -> a value from a shipped file: the examples of a page
Examples = dict[tuple[type, str], object]


@dataclass(frozen=True)
class Key:
    """One row of a table."""

    name: str
    type: str
    unit: str
    default: str
    example: str
    meaning: str


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def toml(value: object) -> str:
    """A value as a scenario file writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return toml(value.value)
    if isinstance(value, str | Path):
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list | tuple | frozenset | set):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{k} = {toml(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, BaseModel):
        return "(its table)"
    return str(value)


def _doc_of(field: FieldInfo) -> ValueDoc | None:
    for meta in field.metadata:
        func = getattr(meta, "func", None)
        if func is not None and (doc := value_doc(func)) is not None:
            return doc
    return None


def _bounds(field: FieldInfo) -> str:
    lo = hi = ""
    for meta in field.metadata:
        if isinstance(meta, annotated_types.Ge):
            lo = toml(meta.ge)
        elif isinstance(meta, annotated_types.Gt):
            lo = f"> {toml(meta.gt)}"
        elif isinstance(meta, annotated_types.Le):
            hi = toml(meta.le)
        elif isinstance(meta, annotated_types.Lt):
            hi = f"< {toml(meta.lt)}"
        elif isinstance(meta, annotated_types.MinLen | annotated_types.MaxLen):
            continue
    if lo and hi and not lo.startswith(">") and not hi.startswith("<"):
        return f"{lo} … {hi}"
    lows = lo if lo.startswith(">") else f"≥ {lo}" if lo else ""
    highs = hi if hi.startswith("<") else f"≤ {hi}" if hi else ""
    return ", ".join(x for x in (lows, highs) if x)


def _strip_none(annotation: Any) -> tuple[Any, bool]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]), True  # noqa: UP007
    return annotation, False


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a key holds (itself, a list of it, a table of it), if any."""
    annotation, _ = _strip_none(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def type_text(annotation: Any) -> str:
    """An annotation in words: `"tcp"` or `"udp"`, integer, list of strings, …"""
    annotation, _ = _strip_none(annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        shown = [f"`{toml(a)}`" for a in args]
        return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_text(a) for a in args)
    if origin in (list, tuple, frozenset, set):
        return f"list of {_plural(type_text(args[0]))}" if args else "list"
    if origin is dict:
        return f"table of {_plural(type_text(args[1]))}"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return "table"
        if issubclass(annotation, Enum):
            return " or ".join(f"`{toml(m.value)}`" for m in annotation)
        return {
            bool: "true or false",
            int: "integer",
            float: "number",
            str: "string",
            Path: "path",
        }.get(annotation, annotation.__name__)
    return str(annotation)


def _plural(word: str) -> str:
    if word.startswith(("`", "list", "table of")) or " or " in word:
        return word
    return {"true or false": "booleans", "string": "strings", "integer": "integers"}.get(
        word, word + "s"
    )


def _default(field: FieldInfo, doc: ValueDoc | None) -> str:
    if field.is_required():
        return "required"
    factory = field.default_factory
    value = factory() if factory is not None else field.default  # type: ignore[call-arg]
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "its defaults"
    if value is None:
        return doc.none if doc is not None else "unset"
    if doc is not None and doc.show is not None:
        return f"`{doc.show(value)}`"
    if value == "" and field.annotation is not None:
        return '`""`'
    return f"`{toml(value)}`"


def _example(
    field: FieldInfo, doc: ValueDoc | None, default: object, shipped: object = None
) -> str:
    if field.examples:
        return " ".join(f"`{toml(e) if not isinstance(e, str) else e}`" for e in field.examples)
    if shipped is not None:
        return f"`{toml(shipped)}`"
    if doc is not None and doc.example:
        return f"`{doc.example}`"
    annotation, _ = _strip_none(field.annotation)
    origin = typing.get_origin(annotation)
    if origin is Literal:
        args = typing.get_args(annotation)
        other = [a for a in args if a != default] or list(args)
        return f"`{toml(other[-1])}`"
    if annotation is bool:
        return f"`{toml(not default)}`"
    if annotation in (int, float) and default not in (None, PydanticUndefined):
        return f"`{toml(default)}`"
    return ""


# A plain number's unit, by the key's suffix (the schema names such keys by their unit).
UNIT_SUFFIXES = {"_pct": "%", "_pp": "percentage points", "_us": "µs", "_mb": "MB"}


def key_of(name: str, field: FieldInfo, shipped: object = None) -> Key:
    doc = _doc_of(field)
    if doc is not None:
        kind = doc.type + (", or a list (a sweep)" if doc.sweep else "")
        bounds = doc.bounds
        unit = doc.unit
    else:
        kind = type_text(field.annotation)
        bounds = _bounds(field)
        extra = field.json_schema_extra
        unit = str(extra.get("unit", "")) if isinstance(extra, dict) else ""
        unit = unit or next((u for sfx, u in UNIT_SUFFIXES.items() if name.endswith(sfx)), "")
    text = f"{kind}, {bounds}" if bounds else kind
    default_value = field.default if field.default_factory is None else None
    return Key(
        name=name,
        type=text,
        unit=unit,
        default=_default(field, doc),
        example=_example(field, doc, default_value, shipped),
        meaning=field.description or "",
    )


def owner(model: type[BaseModel], key: str) -> type[BaseModel]:
    """The class of `model`'s MRO that declares `key` (the kind, a shared part, the base)."""
    for cls in model.__mro__:
        if key in inspect.get_annotations(cls):
            return cls
    return model


def table(rows: list[Key]) -> list[str]:
    out = ["| key | type | unit | default | example | meaning |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| `{r.name}` | {_cell(r.type)} | {_cell(r.unit)} | {_cell(r.default)} "
            f"| {_cell(r.example)} | {_cell(r.meaning)} |"
        )
    return out


def first_paragraph(model: type[BaseModel]) -> str:
    text = (model.__doc__ or "").strip()
    return " ".join(text.split("\n\n")[0].split())


def model_section(
    found: Examples,
    title: str,
    model: type[BaseModel],
    keys: list[str] | None = None,
    level: str = "###",
    intro: str | None = None,
) -> list[str]:
    """A heading, the model's first docstring paragraph, and one table of `keys` (all of
    the model's when None), each key's example from `found` where a shipped file has one."""
    names = [
        k
        for k in (keys if keys is not None else list(model.model_fields))
        if k not in HIDDEN and k != "kind"
    ]
    out = [f"{level} {title}", ""]
    said = first_paragraph(model) if intro is None else intro
    if said:
        out += [said, ""]
    if not names:
        return out
    rows = [key_of(k, model.model_fields[k], found.get((owner(model, k), k))) for k in names]
    out += [*table(rows), ""]
    return out


def nested(
    found: Examples, model: type[BaseModel], keys: list[str], path: str, seen: set[type]
) -> list[str]:
    """A table for each model one of `keys` holds (the `[[paper]]` of a scenario is its
    own section; a kind's nested table is listed under the kind)."""
    out: list[str] = []
    for k in keys:
        inner = _model_in(model.model_fields[k].annotation)
        if inner is None or inner in seen or inner in SECTIONS_BY_MODEL:
            continue
        seen.add(inner)
        out += model_section(found, f"`{path}.{k}`", inner, level="#####")
        out += nested(found, inner, list(inner.model_fields), f"{path}.{k}", seen)
    return out


# The sections of the file, in the order the page lists them: (title, model).
SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("Top level", Scenario),
    ("`[testbed]`", Testbed),
    ("`[testbed.vm]`", VmSection),
    ("`[testbed.hosts.NAME]`", InventoryHost),
    ("`[topology]`", TopologySection),
    ("`[[topology.hosts]]`", TopologyHost),
    ("`[[topology.links]]`", TopologyLink),
    ("`[topology.zones.NAME]`", TopologyZone),
    ("`[repeat]`", Repeat),
    ("`[timing]`", Timing),
    ("`[variants.NAME]`", Variant),
    ("`[[expect]]`", Expect),
    ("`[[paper]]`", PaperRow),
    ("`[[paper_table]]`", PaperTable),
]
SECTIONS_BY_MODEL = {model for _, model in SECTIONS} | {MechanismSpec, WorkloadSpec}


def family_sections(
    found: Examples, registry: KindRegistry[Any], base: type[BaseModel], entry: str, heading: str
) -> list[str]:
    """One family of kinds: the keys every kind has, a table per shared part (with the
    kinds it applies to), then each kind's own keys."""
    kinds = list(registry)
    out = [f"### {heading}", ""]
    out += [
        f"`kind` picks the model of each {entry}; the kinds, and the keys each adds:",
        "",
        "| kind | what it is | its own keys | shared keys |",
        "|---|---|---|---|",
    ]
    shared: dict[type[BaseModel], list[str]] = {}
    own: dict[str, list[str]] = {}
    for k in kinds:
        own[k.name] = []
        for key in k.model.model_fields:
            if (
                key in HIDDEN
                or key == "kind"
                or (key in base.model_fields and owner(k.model, key) is owner(base, key))
            ):
                continue
            cls = owner(k.model, key)
            if cls is k.model:
                own[k.name].append(key)
            else:
                shared.setdefault(cls, [])
                if k.name not in shared[cls]:
                    shared[cls].append(k.name)
    parts_of = {
        k.name: [cls for cls in shared if issubclass(k.model, cls) and cls is not k.model]
        for k in kinds
    }
    for k in kinds:
        listed = ", ".join(f"`{x}`" for x in own[k.name])
        parts = ", ".join(_part_title(cls) for cls in parts_of[k.name])
        out.append(f"| `{k.name}` | {_cell(first_sentence(k.model))} | {listed} | {parts} |")
    out.append("")
    out += model_section(
        found,
        f"Keys of every {entry}",
        base,
        level="####",
        intro=f"Whatever its kind, each {entry} takes these keys.",
    )
    for cls, names in shared.items():
        keys = [key for key in cls.model_fields if owner(cls, key) is cls]
        kinds_line = f"Keys of the kinds {', '.join(f'`{n}`' for n in names)}."
        out += model_section(found, _part_title(cls), cls, keys, level="####", intro=kinds_line)
    seen: set[type] = set()
    for k in kinds:
        out += model_section(found, f'`kind = "{k.name}"`', k.model, own[k.name], level="####")
        out += nested(found, k.model, own[k.name], k.name, seen)
    return out


def _part_title(cls: type[BaseModel]) -> str:
    return str(getattr(cls, "part_title", cls.__name__))


def first_sentence(model: type[BaseModel]) -> str:
    """The docstring's first sentence, cut (with " …") past a table cell's length."""
    text = scenarios.first_sentence(first_paragraph(model))
    return text if text.endswith(("?", "!", "…")) else text + "."


def _tables(data: dict[str, Any]) -> list[tuple[type[BaseModel], dict[str, Any]]]:
    """Each table of a scenario file with the model that reads it."""
    out: list[tuple[type[BaseModel], dict[str, Any]]] = [(Scenario, data)]
    testbed = data.get("testbed") or {}
    out.append((Testbed, testbed))
    out.append((VmSection, testbed.get("vm") or {}))
    out += [(InventoryHost, h) for h in (testbed.get("hosts") or {}).values()]
    topology = data.get("topology") or {}
    out.append((TopologySection, topology))
    out += [(TopologyHost, h) for h in topology.get("hosts") or []]
    out += [(TopologyLink, h) for h in topology.get("links") or []]
    out += [(TopologyZone, z) for z in (topology.get("zones") or {}).values()]
    out += [(Repeat, data.get("repeat") or {}), (Timing, data.get("timing") or {})]
    for variant in (data.get("variants") or {}).values():
        out.append((Variant, variant))
        for m in variant.get("mechanisms") or []:
            if m.get("kind") in MECHANISMS:
                out.append((MECHANISMS.get(m["kind"]).model, m))
    for w in data.get("workloads") or []:
        if w.get("kind") in WORKLOADS:
            out.append((WORKLOADS.get(w["kind"]).model, w))
    out += [(Expect, e) for e in data.get("expect") or []]
    out += [(PaperRow, e) for e in data.get("paper") or []]
    out += [(PaperTable, e) for e in data.get("paper_table") or []]
    return out


def shipped_examples(root: Path) -> Examples:
    """(declaring class, key) -> a value a shipped scenario file gives it (one that
    differs from its default, short enough for a cell), the files in name order."""
    found: Examples = {}
    files = sorted((root / "scenarios").glob("*.toml")) + sorted(
        (root / "docs" / "examples").glob("*.toml")
    )
    for path in files:
        data = tomllib.loads(path.read_text("utf-8"))
        for model, values in _tables(data):
            for key, value in values.items():
                info = model.model_fields.get(key)
                if info is None or isinstance(value, dict) or key in ("kind", "name"):
                    continue
                doc = _doc_of(info)
                shown = doc.show(info.default) if doc and doc.show and info.default else None
                same = toml(value) in (toml(info.default), shown)
                if same or len(toml(value)) > EXAMPLE_MAX:
                    continue
                found.setdefault((owner(model, key), key), value)
    return found


def render_reference(root: Path = ROOT) -> str:
    """The generated part of docs/scenario-format.md (between the markers)."""
    found = shipped_examples(root)
    out = [
        "## Reference",
        "",
        "Every key of the file, section by section, from the schema "
        "(secperf/scenario, secperf/schema and each kind's model). Sizes are bytes, "
        "rates bits/s and durations seconds, written as in [Units](#units); a type "
        '"…, or a list (a sweep)" takes a list of values, one point (or variant) each.',
        "",
    ]
    for title, model in SECTIONS[:11]:
        out += model_section(found, title, model)
    out += family_sections(
        found, MECHANISMS, MechanismSpec, "mechanism", "Mechanisms (`mechanisms = [...]`)"
    )
    out += family_sections(found, WORKLOADS, WorkloadSpec, "workload", "`[[workloads]]`")
    for title, model in SECTIONS[11:]:
        out += model_section(found, title, model)
    return "\n".join(out).rstrip("\n") + "\n"


def render(page_text: str, root: Path = ROOT) -> str:
    """`page_text` with its generated part replaced by this module's output."""
    return between(page_text, BEGIN, END, render_reference(root), PAGE)


def main(argv: list[str] | None = None) -> int:
    return write_or_check(argv, PAGE, render, f"{PAGE}'s reference")


if __name__ == "__main__":
    raise SystemExit(main())
