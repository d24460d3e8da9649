"""What every page generator's command line does: write the page, or `--check` it
(exit 1 when the page differs from what its generator makes), and the one way a
generated part sits between two markers of a hand-written page."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def between(text: str, begin: str, end: str, body: str, page: Path) -> str:
    """`text` with what lies between its `begin` and `end` markers replaced by `body`."""
    head, found_begin, rest = text.partition(begin)
    _, found_end, tail = rest.partition(end)
    if not found_begin or not found_end:
        raise ValueError(f"{page} lacks its markers {begin!r} … {end!r}")
    return f"{head}{begin}\n\n{body}\n{end}{tail}"


def write_or_check(
    argv: Sequence[str] | None, page: Path, make: Callable[[str, Path], str], what: str
) -> int:
    """The generator's command: `make(the page's text now, the repository)` is the page;
    write it, or with --check say whether it is current (0) or stale (1)."""
    parser = argparse.ArgumentParser(description=f"Write (or --check) {what}.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository")
    args = parser.parse_args(argv)
    path = args.root / page
    current = path.read_text("utf-8") if path.exists() else ""
    text = make(current, args.root)
    if text == current:
        return 0
    if args.check:
        print(f"{page} differs from its generator: run `make docs`", file=sys.stderr)
        return 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {page}")
    return 0
