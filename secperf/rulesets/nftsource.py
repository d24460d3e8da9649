"""Where each rule of an nftables file was written: a scan of the source text.

nft's JSON holds no line numbers, so the loader scans the file (and every file it
includes, spliced in where the `include` stands, as nft does) for the rules of each
chain in order: block syntax (`table ... { chain ... { RULE } }`) and command syntax
(`add rule FAMILY TABLE CHAIN RULE`, `insert rule ...`), with `\\` continuations,
comments, `define`s and anonymous sets over several lines. The k-th rule found for a
chain is the k-th rule nft lists for it; where commands make the order unknowable
(`insert ... position`, `replace`, `delete rule`) the chain is marked unknown.

Includes are resolved as nft 1.0.6 resolves them (tested in test_rulesets_load.py):
an absolute name as is; a `./` or `../` name relative to nft's working directory
(the loader runs nft in the top file's directory); any other name in the include
search path, /etc first, then the directories given with -I (the loader gives the
top file's directory). A glob is expanded in every search directory, sorted; one
that matches nothing is accepted silently by nft and a warning here.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

FAMILIES = frozenset({"ip", "ip6", "inet", "arp", "bridge", "netdev"})
DEFAULT_INCLUDE_PATH = Path("/etc")
# Table-level objects whose blocks hold no rules.
_OBJECTS = frozenset(
    {"set", "map", "flowtable", "counter", "quota", "ct", "limit", "secmark", "synproxy"}
)
_CHAIN_PROPERTIES = frozenset({"type", "policy", "comment", "devices", "device"})
_VERBS = frozenset({"add", "create", "insert", "replace", "delete", "destroy", "flush"})
_DEFINES = frozenset({"define", "redefine", "undefine"})


@dataclass(frozen=True)
class Token:
    kind: str  # "word", "nl", ";", "{", "}"
    text: str
    file: Path
    line: int
    start: int  # offsets in the file's text
    end: int


@dataclass(frozen=True)
class SourceRule:
    file: Path
    line: int
    text: str


ChainKey = tuple[str, str, str]  # family, table, chain


@dataclass
class Scan:
    """What the scan found: each chain's rules in order (None: the order is unknown),
    where each chain and each named set or map is declared, the files read."""

    rules: dict[ChainKey, list[SourceRule] | None] = field(default_factory=dict)
    chain_lines: dict[ChainKey, tuple[Path, int]] = field(default_factory=dict)
    set_lines: dict[ChainKey, tuple[Path, int]] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    texts: dict[Path, str] = field(default_factory=dict)


def tokenize(text: str, file: Path) -> list[Token]:
    """Words, separators and braces; comments dropped, `\\`-newline joins lines. A file
    ends with a newline token, so its last statement ends with it."""
    out: list[Token] = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\\" and text.startswith("\n", i + 1):
            i, line = i + 2, line + 1
        elif c == "\n":
            out.append(Token("nl", c, file, line, i, i + 1))
            i, line = i + 1, line + 1
        elif c in " \t\r":
            i += 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif c in ";{}":
            out.append(Token(c, c, file, line, i, i + 1))
            i += 1
        else:
            start = i
            while i < n and text[i] not in " \t\r\n;{}" and not text.startswith("\\\n", i):
                if text[i] == '"':
                    close = text.find('"', i + 1)
                    i = n if close < 0 else close + 1
                else:
                    i += 1
            out.append(Token("word", text[start:i], file, line, start, i))
    out.append(Token("nl", "\n", file, line, n, n))
    return out


def resolve_include(name: str, cwd: Path, include_dirs: list[Path]) -> tuple[list[Path], bool]:
    """The files `include "name"` reads, in order, and whether the name is a glob."""
    wild = any(ch in name for ch in "*?[")
    if name.startswith("/"):
        bases = [Path(name)]
    elif name.startswith(("./", "../")):
        bases = [cwd / name]
    else:
        bases = [d / name for d in [DEFAULT_INCLUDE_PATH, *include_dirs]]
    found: list[Path] = []
    for base in bases:
        if wild:
            found += [Path(p) for p in sorted(glob.glob(str(base))) if not Path(p).is_dir()]
        elif base.is_file():
            return [base], False  # nft stops at the first directory that has it
    return found, wild


class _Stream:
    """Tokens of the top file, with included files spliced in where they stand."""

    def __init__(self, tokens: list[Token]):
        self._stack: list[Iterator[Token]] = [iter(tokens)]

    def push(self, tokens: list[Token]) -> None:
        self._stack.append(iter(tokens))

    def __iter__(self) -> Iterator[Token]:
        while self._stack:
            tok = next(self._stack[-1], None)
            if tok is None:
                self._stack.pop()
            else:
                yield tok


def rule_text(toks: list[Token], texts: dict[Path, str]) -> str:
    """The rule as written, on one line: original spacing within a line, one space
    where the rule went on to the next line."""
    parts: list[str] = []
    prev: Token | None = None
    for t in toks:
        if t.kind == "nl":
            continue
        if prev is not None:
            gap = texts[t.file][prev.end : t.start] if prev.file == t.file else " "
            parts.append(" " if "\n" in gap else gap)
        parts.append(t.text)
        prev = t
    return "".join(parts).strip()


def _unquote(word: str) -> str:
    return word[1:-1] if len(word) >= 2 and word[0] == word[-1] == '"' else word


def _spec(words: list[str], count: int) -> tuple[list[str], int]:
    """[family, table, (chain)] from a command's object spec, and the words it took."""
    if words and words[0] in FAMILIES:
        return [_unquote(w) for w in words[: count + 1]], count + 1
    return ["ip", *[_unquote(w) for w in words[:count]]], count


class Scanner:
    def __init__(self, top: Path, cwd: Path, include_dirs: list[Path]):
        self.top, self.cwd, self.include_dirs = top, cwd, include_dirs
        self.scan = Scan()

    def _read(self, path: Path) -> list[Token]:
        text = path.read_text(errors="replace")
        self.scan.texts[path] = text
        if path not in self.scan.files:
            self.scan.files.append(path)
        return tokenize(text, path)

    def run(self) -> Scan:
        stream = _Stream(self._read(self.top))
        # The context stack: ("top",), ("table", fam, tbl), ("chain", fam, tbl, ch), ("skip",)
        ctx: list[tuple[str, ...]] = [("top",)]
        stmt: list[Token] = []
        depth = 0
        for tok in stream:
            if depth:
                stmt.append(tok)
                depth += {"{": 1, "}": -1}.get(tok.kind, 0)
            elif tok.kind in ("nl", ";"):
                self._finish(ctx[-1], stmt, stream)
                stmt = []
            elif tok.kind == "}":
                self._finish(ctx[-1], stmt, stream)
                stmt = []
                if len(ctx) > 1:
                    ctx.pop()
            elif tok.kind == "{":
                opened = self._open(ctx[-1], stmt)
                if opened is None:
                    stmt.append(tok)
                    depth = 1
                else:
                    ctx.append(opened)
                    stmt = []
            else:
                stmt.append(tok)
        return self.scan

    def _open(self, ctx: tuple[str, ...], stmt: list[Token]) -> tuple[str, ...] | None:
        """The context a `{` after `stmt` opens, or None when it is a value's brace."""
        words = [t.text for t in stmt]
        if not words or ctx[0] in ("chain", "skip"):
            return None
        if ctx[0] == "table":
            if words[0] == "chain" and len(words) >= 2:
                key = (ctx[1], ctx[2], _unquote(words[1]))
                return self._declare_chain(key, stmt[0])
            if words[0] in ("set", "map") and len(words) >= 2:
                self.scan.set_lines.setdefault(
                    (ctx[1], ctx[2], _unquote(words[1])), (stmt[0].file, stmt[0].line)
                )
            return ("skip",)
        if words[0] in _DEFINES:
            return None
        if words[0] in _VERBS:
            words = words[1:]
        if not words or words[0] == "rule":
            return None  # an anonymous set of a rule: `add rule ... tcp dport { 22, 80 }`
        if words[0] == "table":
            (fam, tbl), _ = _spec(words[1:], 1)
            return ("table", fam, tbl)
        if words[0] == "chain":
            (fam, tbl, ch), _ = _spec(words[1:], 2)
            return self._declare_chain((fam, tbl, ch), stmt[0])
        if words[0] in ("set", "map"):
            (fam, tbl, name), _ = _spec(words[1:], 2)
            self.scan.set_lines.setdefault((fam, tbl, name), (stmt[0].file, stmt[0].line))
        return ("skip",)

    def _declare_chain(self, key: ChainKey, tok: Token) -> tuple[str, ...]:
        self.scan.chain_lines.setdefault(key, (tok.file, tok.line))
        self.scan.rules.setdefault(key, [])
        return ("chain", *key)

    def _include(self, stmt: list[Token], stream: _Stream) -> None:
        name = _unquote(stmt[1].text)
        files, wild = resolve_include(name, self.cwd, self.include_dirs)
        where = f"{stmt[0].file}:{stmt[0].line}"
        if wild and not files:
            self.scan.warnings.append(
                f'{where}: include "{name}" matches no file (nft loads the rest silently)'
            )
        for f in files:
            if f.is_relative_to(DEFAULT_INCLUDE_PATH) and not self.top.is_relative_to(
                DEFAULT_INCLUDE_PATH
            ):
                self.scan.warnings.append(
                    f'{where}: include "{name}" read {f}: nft 1.0.6 searches /etc before '
                    f"the file's directory"
                )
        # Spliced in reverse so that the first file's tokens come first.
        for f in reversed(files):
            stream.push(self._read(f))

    def _finish(self, ctx: tuple[str, ...], stmt: list[Token], stream: _Stream) -> None:
        if not stmt:
            return
        words = [t.text for t in stmt]
        if words[0] == "include" and len(words) >= 2:
            self._include(stmt, stream)
            return
        if words[0] in _DEFINES or ctx[0] in ("skip", "table"):
            return
        if ctx[0] == "chain":
            if words[0] not in _CHAIN_PROPERTIES:
                rules = self.scan.rules.setdefault((ctx[1], ctx[2], ctx[3]), [])
                if rules is not None:
                    rules.append(SourceRule(stmt[0].file, stmt[0].line, self._text(stmt)))
            return
        self._command(words, stmt)

    def _text(self, toks: list[Token]) -> str:
        return rule_text(toks, self.scan.texts)

    def _command(self, words: list[str], stmt: list[Token]) -> None:
        """A top-level command: what it does to the rules of the chains it names."""
        verb = words[0] if words[0] in _VERBS else "add"
        rest = words[1:] if words[0] in _VERBS else words
        if not rest:
            return
        obj, args = rest[0], rest[1:]
        rules = self.scan.rules
        if obj == "ruleset" and verb == "flush":
            rules.clear()
        elif obj == "table" and verb in ("delete", "destroy", "flush"):
            (fam, tbl), _ = _spec(args, 1)
            for key in [k for k in rules if k[:2] == (fam, tbl)]:
                if verb == "flush":
                    rules[key] = []
                else:
                    del rules[key]
        elif obj == "chain":
            (fam, tbl, ch), _ = _spec(args, 2)
            key = (fam, tbl, ch)
            if verb in ("add", "create"):
                self._declare_chain(key, stmt[0])
            elif verb == "flush":
                rules[key] = []
            elif verb in ("delete", "destroy"):
                rules.pop(key, None)
        elif obj == "rule":
            (fam, tbl, ch), took = _spec(args, 2)
            key = (fam, tbl, ch)
            current = rules.setdefault(key, [])
            positional = bool(args[took:]) and args[took] in ("position", "handle", "index")
            if current is None:
                return
            body = stmt[len(stmt) - len(args) + took :]
            if verb == "add" and not positional:
                current.append(SourceRule(stmt[0].file, stmt[0].line, self._text(body)))
            elif verb == "insert" and not positional:
                current.insert(0, SourceRule(stmt[0].file, stmt[0].line, self._text(body)))
            else:
                rules[key] = None
        elif obj in ("set", "map") and verb in ("add", "create"):
            (fam, tbl, name), _ = _spec(args, 2)
            self.scan.set_lines.setdefault((fam, tbl, name), (stmt[0].file, stmt[0].line))


def scan(top: Path, cwd: Path, include_dirs: list[Path]) -> Scan:
    return Scanner(top, cwd, include_dirs).run()
