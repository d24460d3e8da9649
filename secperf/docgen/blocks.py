"""Generated parts inside hand-written pages.

A page marks a part it does not own by hand with an opening and a closing comment:

    <!-- KIND: NAME ARG ... -->
    (generated: everything here is rewritten)
    <!-- /KIND: NAME -->

and `fill` rewrites what lies between them with the output of KIND's maker, given the
repository and the opening's words. The prose around a block stays the author's; the
block is the generator's, so a number in it is always its source file's own
(tests/unit/test_generated_docs.py checks each page against `fill`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

Maker = Callable[[Path, list[str]], str]

BLOCK = re.compile(
    r"(?P<open><!-- (?P<kind>[\w-]+): (?P<args>[^>]*?) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<close><!-- /(?P=kind): (?P<name>[\w.-]+) -->)",
    re.S,
)
OPENING = re.compile(r"<!-- ([\w-]+): ([\w.-]+)[^>]*? -->")


class BlockError(ValueError):
    """A block that is not closed, closed under another name, or of no known kind."""


def blocks(text: str) -> list[tuple[str, list[str], str]]:
    """Each block's kind, its opening's words (the name first) and its body."""
    return [(m["kind"], m["args"].split(), m["body"]) for m in BLOCK.finditer(text)]


def fill(text: str, root: Path, makers: Mapping[str, Maker]) -> str:
    """The page with every known block's body made again."""
    opened = [(k, n) for k, n in OPENING.findall(text) if k in makers]
    closed = [(k, a[0]) for k, a, _ in blocks(text) if k in makers]
    if sorted(opened) != sorted(closed):
        unclosed = sorted(set(opened) - set(closed))
        raise BlockError(f"blocks opened and not closed (or closed as another name): {unclosed}")

    def made(m: re.Match[str]) -> str:
        kind, args = m["kind"], m["args"].split()
        if kind not in makers:
            return m.group(0)
        if args[0] != m["name"]:
            raise BlockError(f"block {kind}: {args[0]} is closed as {m['name']}")
        body = makers[kind](root, args)
        return f"{m['open']}{body.rstrip()}\n{m['close']}"

    return BLOCK.sub(made, text)
