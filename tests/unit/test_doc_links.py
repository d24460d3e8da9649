"""Every relative link in README.md and docs/**/*.md reaches a file that exists, and every
#anchor a heading of the page it names (GitHub's slugs), so a section that moves takes
its links with it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: links and code marks dropped, lower case,
    punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text("utf-8")).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken(doc: Path) -> list[str]:
    out = []
    for target in LINK.findall(FENCE.sub("", doc.read_text("utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        page = (doc.parent / path).resolve() if path else doc
        if not page.exists():
            out.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and page.suffix == ".md" and anchor not in anchors(page):
            out.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    return out


def test_every_link_and_anchor_in_the_docs_resolves() -> None:
    assert [b for doc in DOCS for b in broken(doc)] == []


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Title\n\n## The `gate`: thresholds\n\n## Title\n")
    doc = tmp_path / "a.md"
    doc.write_text(
        "[ok](b.md#the-gate-thresholds) [ok2](b.md#title-1) [web](https://x.test/#y)\n"
        "[gone](c.md) [moved](b.md#old-section)\n```\n[in code](nowhere.md)\n```\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert broken(doc) == [
            "a.md: c.md (no such file)",
            "a.md: b.md#old-section (no such heading)",
        ]
    finally:
        ROOT = saved
