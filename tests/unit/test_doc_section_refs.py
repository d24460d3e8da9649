"""A reference to a section by its title (`docs/X.md, "Title"`, in the docs, the code's
messages and descriptions, the scenario files) names a heading that page has: when a
section moves or is renamed, every reader sent to it would otherwise find nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# `docs/page.md, "Title"` or `docs/page.md "Title"`, the title possibly wrapped over
# comment or docstring lines; a title starts with a capital, a digit or a backquote.
REFERENCE = re.compile(r'((?:docs/)?[\w/.-]+\.md),?\s+(?:#\s*)?"([A-Z0-9`][^"]*)"')


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"\n\s*(#|//+|\*)?\s*", " ", text)).strip()


def _headings(page: Path) -> list[str]:
    return [
        _flat(re.sub(r"^#+\s*", "", line))
        for line in page.read_text("utf-8").splitlines()
        if line.startswith("#")
    ]


def _sources() -> list[Path]:
    found = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("scenarios/*.toml")]
    found += ROOT.glob("secperf/**/*.py")
    found += ROOT.glob("engine/*/src/**/*.rs")
    return [p for p in found if "docs/runs" not in str(p)]


def references(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), _flat(m.group(2))) for m in REFERENCE.finditer(text)]


def test_every_section_reference_names_a_heading_of_its_page() -> None:
    missing = []
    for source in _sources():
        for page, title in references(source.read_text("utf-8")):
            path = ROOT / page if page.startswith("docs/") else ROOT / "docs" / page
            if not path.exists() and page == "README.md":
                path = ROOT / "README.md"
            if not path.exists():
                continue  # a file name, not a page of this repository (the links test)
            if not any(h == title or h.startswith(title) for h in _headings(path)):
                missing.append(f'{source.relative_to(ROOT)}: {page}, "{title}"')
    assert not missing, "sections that are not there:\n" + "\n".join(missing)


def test_a_wrapped_title_is_read_whole_and_a_moved_one_is_found() -> None:
    text = 'see docs/methodology.md, "Precision\n    # by budget"; docs/x.md "Gone"'
    assert references(text) == [
        ("docs/methodology.md", "Precision by budget"),
        ("docs/x.md", "Gone"),
    ]
