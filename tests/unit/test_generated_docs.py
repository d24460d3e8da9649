"""The docs' generated blocks (secperf/docgen/blocks.py) equal their generators' output:
the study pages' paper tables and kept runs' answers, performance.md's bench tables.
`make docs` writes them again."""

from __future__ import annotations

from pathlib import Path

import pytest

from secperf.docgen import pages
from secperf.docgen.blocks import BlockError, blocks, fill

ROOT = Path(__file__).resolve().parents[2]
PAGES = [p for p in pages.pages(ROOT) if p.exists()]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_each_page_is_its_generators_output(page: Path) -> None:
    text = page.read_text("utf-8")
    assert text == fill(text, ROOT, pages.MAKERS), (
        f"{page.relative_to(ROOT)} differs from its generators: `make docs`"
    )


def test_every_study_page_has_its_generated_table() -> None:
    for name in ("000", "001", "002", "003", "004", "rfc"):
        found = blocks((ROOT / "docs" / "studies" / f"{name}.md").read_text("utf-8"))
        assert any(kind in pages.MAKERS and body.strip() for kind, _, body in found), name


def test_fill_rewrites_a_block_and_leaves_the_prose() -> None:
    made = {"echo": lambda root, args: f"made from {' '.join(args[1:])}\n"}
    text = "Prose.\n<!-- echo: one a b -->\nstale\n<!-- /echo: one -->\nMore prose.\n"
    assert fill(text, ROOT, made) == (
        "Prose.\n<!-- echo: one a b -->\nmade from a b\n<!-- /echo: one -->\nMore prose.\n"
    )
    with pytest.raises(BlockError):
        fill("<!-- echo: one -->\nno end\n", ROOT, made)
    with pytest.raises(BlockError):
        fill("<!-- echo: one -->\nx\n<!-- /echo: two -->\n", ROOT, made)


def test_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "p.md"
    run = "docs/runs/seed003-vpn-quick-2026-11-29"
    page.write_text(
        f"<!-- paper-table: seed003-vpn-quick {run} -->\nstale\n"
        "<!-- /paper-table: seed003-vpn-quick -->\n"
    )
    (tmp_path / "docs" / "runs").symlink_to(ROOT / "docs" / "runs")
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    assert pages.main(["--root", str(tmp_path), "--check"]) == 1
    assert pages.main(["--root", str(tmp_path)]) == 0
    assert "| Paper | Row |" in page.read_text("utf-8")
    assert pages.main(["--root", str(tmp_path), "--check"]) == 0
