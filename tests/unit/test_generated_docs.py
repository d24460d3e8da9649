"""Every generated page and block in README.md and docs/ equals its generator's output:
`make docs` (python -m secperf.docgen) writes them all again, and this fails when one is
stale: whole pages (scenarios.md, scenario-format.md's reference, engine-protocol.md's
fields) and the blocks inside hand-written pages (the study pages' paper tables and kept
runs' answers, performance.md's bench tables)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from secperf.docgen import benchtables, pages
from secperf.docgen.__main__ import GENERATORS
from secperf.docgen.blocks import BlockError, blocks, fill

ROOT = Path(__file__).resolve().parents[2]
PAGES = [p for p in pages.pages(ROOT) if p.exists()]


@pytest.mark.parametrize("name", GENERATORS)
def test_generated_page_is_current(name: str) -> None:
    module = importlib.import_module(name)
    page = getattr(module, "PAGE", "a page with generated blocks")
    assert module.main(["--check"]) == 0, f"{page} is stale: run `make docs`"


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


def test_performance_shows_the_newest_kept_file_of_every_bench() -> None:
    # several kept files of one bench: the newest is current, the others are listed
    shown = {
        args[1]
        for kind, args, _ in blocks((ROOT / "docs" / "performance.md").read_text("utf-8"))
        if kind == benchtables.KIND
    }
    runs = sorted((ROOT / "bench" / "runs").glob("*.json"))
    for bench in {benchtables.bench_of(p) for p in runs}:
        assert bench in benchtables.BENCHES, f"{bench}: no table for its kept files"
        newest = max((p for p in runs if benchtables.bench_of(p) == bench), key=benchtables.started)
        assert str(newest.relative_to(ROOT)) in shown, f"{newest.name} is not in performance.md"


def test_a_bench_table_is_its_files_rows_and_lists_the_others(tmp_path: Path) -> None:
    runs = tmp_path / "bench" / "runs"
    runs.mkdir(parents=True)
    row = {
        "path": "plain",
        "engine_median_bps": 14.9e9,
        "iperf3_median_bps": 14.5e9,
        "ratio": 1.0328,
    }
    older = {"started": "2026-01-01", "pairs": 3, "duration_s": 3.0, "rows": [row]}
    (runs / "vpn_vs_iperf3-2026-01-01.json").write_text(json.dumps(older))
    newer = {**older, "started": "2026-01-02", "pairs": 5, "rows": [row, {**row, "path": "tinc"}]}
    (runs / "vpn_vs_iperf3-2026-01-02.json").write_text(json.dumps(newer))
    text = benchtables.make(tmp_path, ["vpn_vs_iperf3", "bench/runs/vpn_vs_iperf3-2026-01-02.json"])
    assert (
        "bench/vpn_vs_iperf3.py --pairs 5 --duration 3 "
        "--out bench/runs/vpn_vs_iperf3-2026-01-02.json" in text
    )
    assert "| plain | 14.90 | 14.50 | 1.033 |" in text and "| tinc |" in text
    assert "Other kept files of this bench: vpn_vs_iperf3-2026-01-01.json." in text
    only = benchtables.make(
        tmp_path, ["vpn_vs_iperf3", "bench/runs/vpn_vs_iperf3-2026-01-02.json", "tin"]
    )
    assert "| tinc |" in only and "| plain |" not in only
