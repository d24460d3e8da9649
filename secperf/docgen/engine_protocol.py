"""The spec fields of docs/engine-protocol.md, from the engine's own spec types.

The engine is the one that reads a spec, so its Rust types are the single source:
`kinds!(…)` in engine/secperf-engine/src/spec/mod.rs lists the kinds, each kind's
`impl KindSpec` names the struct it reads (`type Raw = …`), and that struct's fields
(with the fields `server_kind_raw!` in spec/common.rs gives every kind that runs
against a server) are what the kind takes. Each field's `///` comment is its meaning;
a line of it that starts with `Value:` is its type, default and bounds. A field's
`#[serde(alias = "…")]` is an old name still read. This module replaces only the
part of the page between its two markers; tests/unit/test_engine_protocol_doc.py
fails when the page differs, and checks the field lists against the built engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from secperf.docgen.page import between, write_or_check

ROOT = Path(__file__).resolve().parents[2]
PAGE = Path("docs") / "engine-protocol.md"
SPEC = Path("engine") / "secperf-engine" / "src" / "spec"
BEGIN = "<!-- BEGIN generated spec fields: secperf/docgen/engine_protocol.py (make docs) -->"
END = "<!-- END generated spec fields -->"
MACRO = "server_kind_raw"


@dataclass
class RustField:
    name: str
    type: str
    doc: list[str] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)

    def _split(self) -> tuple[list[str], list[str]]:
        """The comment's meaning, and its `Value:` part (that line and those after it)."""
        at = next((i for i, d in enumerate(self.doc) if d.startswith("Value:")), len(self.doc))
        return self.doc[:at], self.doc[at:]

    @property
    def meaning(self) -> str:
        return " ".join(self._split()[0]).strip()

    @property
    def value(self) -> str:
        return " ".join(self._split()[1]).removeprefix("Value:").strip()


@dataclass
class Kind:
    name: str
    module: str
    raw: str
    common: list[RustField]  # the server_kind_raw! fields (empty for the others)
    own: list[RustField]

    @property
    def fields(self) -> list[RustField]:
        return self.common + self.own


def kind_list(root: Path) -> list[tuple[str, str]]:
    """(enum variant, spec type) of each kind, in `kinds!` order."""
    text = (root / SPEC / "mod.rs").read_text("utf-8")
    call = re.search(r"^kinds!\((.*?)\);", text, re.S | re.M)
    if call is None:
        raise ValueError("spec/mod.rs has no kinds!(…) list")
    return re.findall(r"(\w+)\((\w+)\)", call.group(1))


def _body(text: str, start: int) -> str:
    """The text between the `{` at or after `start` and its matching `}`."""
    open_at = text.index("{", start)
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
    raise ValueError("unbalanced braces")


def parse_fields(body: str) -> list[RustField]:
    """A struct body's fields, each with its `///` lines and serde aliases; fields
    serde skips are left out."""
    out: list[RustField] = []
    doc: list[str] = []
    attrs: list[str] = []
    for raw in body.splitlines():
        line = raw.strip()
        if line.startswith("///"):
            doc.append(line[3:].strip())
            continue
        if line.startswith("#["):
            attrs.append(line)
            continue
        m = re.match(r"(?:pub(?:\([^)]*\))?\s+)?(\w+)\s*:\s*(.+?),?$", line)
        if m and not line.startswith("//"):
            if not any("skip" in a for a in attrs):
                aliases = [x for a in attrs for x in re.findall(r'alias\s*=\s*"(\w+)"', a)]
                out.append(RustField(m.group(1), m.group(2).rstrip(","), doc, aliases))
            doc, attrs = [], []
        elif not line:
            continue
        else:
            doc, attrs = [], []
    return out


def common_fields(root: Path) -> list[RustField]:
    text = (root / SPEC / "common.rs").read_text("utf-8")
    at = text.index(f"macro_rules! {MACRO}")
    body = _body(text, text.index("pub(crate) struct $name", at))
    return [f for f in parse_fields(body) if not f.name.startswith("$")]


def module_of(root: Path, spec_type: str) -> Path:
    for path in sorted((root / SPEC).glob("*.rs")):
        if re.search(rf"impl KindSpec for {spec_type}\b", path.read_text("utf-8")):
            return path
    raise ValueError(f"no `impl KindSpec for {spec_type}` in {SPEC}")


def read_kinds(root: Path = ROOT) -> list[Kind]:
    common = common_fields(root)
    kinds = []
    for _, spec_type in kind_list(root):
        path = module_of(root, spec_type)
        text = path.read_text("utf-8")
        impl = text.index(f"impl KindSpec for {spec_type}")
        name = re.search(r'const NAME: &\'static str = "(\w+)"', text[impl:])
        raw = re.search(r"type Raw = (\w+);", text[impl:])
        if name is None or raw is None:
            raise ValueError(f"{path.name}: its KindSpec lacks NAME or Raw")
        in_macro = re.search(rf"{MACRO}!\s*\{{[^{{]*?struct {raw.group(1)}\s*\{{", text)
        struct = re.search(rf"struct {raw.group(1)}\s*\{{", text)
        assert struct is not None
        own = parse_fields(_body(text, struct.start()))
        kinds.append(
            Kind(
                name.group(1),
                path.name,
                raw.group(1),
                list(common) if in_macro else [],
                own,
            )
        )
    return kinds


_TYPES = {
    "u16": "integer (u16)",
    "u32": "integer",
    "u64": "integer",
    "usize": "integer",
    "f64": "number",
    "bool": "bool",
    "String": "string",
    "IpAddr": "IP address",
    "SocketAddr": '"ADDR:PORT"',
    "Value": "JSON",
}


def json_type(rust: str) -> str:
    """A Rust field type as the JSON it takes: Option<u64> → integer, Vec<IpAddr> →
    list of IP address; a type of the engine's own by its name."""
    rust = rust.strip()
    m = re.fullmatch(r"Option<(.+)>", rust)
    if m:
        return json_type(m.group(1))
    m = re.fullmatch(r"Vec<(.+)>", rust)
    if m:
        return f"list of {json_type(m.group(1))}"
    last = rust.split("::")[-1]
    return _TYPES.get(last, f"`{last}`")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def table(fields: list[RustField]) -> list[str]:
    out = ["| field | type | value, default | meaning |", "|---|---|---|---|"]
    for f in fields:
        name = f"`{f.name}`" + "".join(f" (was `{a}`)" for a in f.aliases)
        out.append(
            f"| {name} | {_cell(json_type(f.type))} | {_cell(f.value)} | {_cell(f.meaning)} |"
        )
    return out


def render_fields(root: Path = ROOT) -> str:
    """The generated part: the fields of every kind that runs against a server, then
    each kind's own."""
    kinds = read_kinds(root)
    served = [k.name for k in kinds if k.common]
    out = [
        "## Spec fields by kind",
        "",
        "From the engine's spec types (engine/secperf-engine/src/spec/: the `kinds!` "
        "list, each kind's raw struct and its `///` comments). Every spec holds "
        f"`kind` ({', '.join(f'`{k.name}`' for k in kinds)}); a field not listed "
        "for its kind is refused.",
        "",
        "### Fields of every kind with a server",
        "",
        f"Kinds {', '.join(f'`{n}`' for n in served)}.",
        "",
        *table(common_fields(root)),
        "",
    ]
    for k in kinds:
        out += [f"### Kind `{k.name}`", ""]
        if k.common:
            out += ["The fields of every kind with a server, and:", ""]
        out += [*table(k.own), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def render(page_text: str, root: Path = ROOT) -> str:
    return between(page_text, BEGIN, END, render_fields(root), PAGE)


def main(argv: list[str] | None = None) -> int:
    return write_or_check(argv, PAGE, render, f"{PAGE}'s spec fields")


if __name__ == "__main__":
    raise SystemExit(main())
