"""The project's docs stand alone: no pointer to a file outside the repository (issue 15)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_docs_do_not_point_outside_the_repository() -> None:
    outside = re.compile(r"(?<![\w.])/(work|home|root|srv)/[\w./-]+|FIELD-NOTES")
    found = [
        f"{doc.relative_to(ROOT)}:{n}: {m.group(0)}"
        for doc in DOCS
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1)
        for m in [outside.search(line)]
        if m
    ]
    assert found == []


def test_relative_links_in_docs_exist() -> None:
    missing = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if not (doc.parent / target).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {target}")
    assert missing == []
