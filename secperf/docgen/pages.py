"""Every generated block of README.md and docs/**/*.md made again (`make docs`), or
`--check`ed: exit 1 when a page differs from what its blocks' generators print."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from secperf.docgen import benchtables, papertables, runtables
from secperf.docgen.blocks import Maker, fill

ROOT = Path(__file__).resolve().parents[2]
MAKERS: dict[str, Maker] = {
    papertables.KIND: papertables.make,
    runtables.KIND: runtables.make,
    benchtables.KIND: benchtables.make,
}


def pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("**/*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write (or --check) the docs' generated blocks.")
    parser.add_argument("--check", action="store_true", help="exit 1 if a page differs")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository")
    args = parser.parse_args(argv)
    stale = []
    for page in pages(args.root):
        if not page.exists():
            continue
        text = page.read_text("utf-8")
        made = fill(text, args.root, MAKERS)
        if made == text:
            continue
        stale.append(page.relative_to(args.root))
        if not args.check:
            page.write_text(made, encoding="utf-8")
            print(f"wrote {page.relative_to(args.root)}")
    if args.check and stale:
        print(f"differ from their generators (`make docs`): {stale}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
