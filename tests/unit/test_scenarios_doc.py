"""docs/scenarios.md is generated (secperf/docgen/scenarios.py) from each scenario file's
description and its kept run, and equals the generator's output: it cannot drift from
the files it describes. `make docs` writes it again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from secperf.docgen import scenarios as gen

ROOT = Path(__file__).resolve().parents[2]


def test_scenarios_page_is_its_generators_output() -> None:
    page = (ROOT / gen.PAGE).read_text("utf-8")
    assert page == gen.render(ROOT), "docs/scenarios.md differs from its generator: `make docs`"


def test_every_scenario_file_has_its_line() -> None:
    page = (ROOT / gen.PAGE).read_text("utf-8")
    for path in (ROOT / "scenarios").glob("*.toml"):
        assert f"[{path.name}](../scenarios/{path.name})" in page, path.name


def test_a_file_without_a_kept_run_says_so_and_one_with_gets_its_time(tmp_path: Path) -> None:
    (tmp_path / "scenarios").mkdir()
    for name in ("quick.toml", "seed002-http.toml"):
        shutil.copy(ROOT / "scenarios" / name, tmp_path / "scenarios" / name)
    run = tmp_path / "docs" / "runs" / "quick-kept"
    run.mkdir(parents=True)
    meta = json.loads((ROOT / "docs" / "runs" / "quick" / "run.json").read_text("utf-8"))
    (run / "run.json").write_text(json.dumps(meta))
    text = gen.render(tmp_path)
    quick = next(ln for ln in text.splitlines() if ln.startswith("| [quick.toml]"))
    assert "[docs/runs/quick-kept](runs/quick-kept)" in quick
    assert "2 min 55 s on 2 CPUs, Intel Xeon Processor" in quick  # 23:35:28 to 23:38:23
    assert "earlier version" not in quick
    http = next(ln for ln in text.splitlines() if ln.startswith("| [seed002-http.toml]"))
    assert "no kept run" in http and " min " not in http
    # a kept run of another version of the file says so
    file = tmp_path / "scenarios" / "quick.toml"
    file.write_text(file.read_text("utf-8").replace('description = "', 'description = "New: ', 1))
    assert "(of an earlier version of the file)" in gen.render(tmp_path)


def test_first_sentence_is_short_and_says_where_it_was_cut() -> None:
    assert gen.first_sentence("One. Two.") == "One"
    assert gen.first_sentence("As in Fig. 3b, et al. too. Then") == "As in Fig. 3b, et al. too"
    long = "Document 9: " + ", ".join(f"part {i}" for i in range(60))
    cut = gen.first_sentence(long)
    assert len(cut) <= gen.SHORT + 2 and cut.endswith(" …")
    assert gen.duration(175) == "2 min 55 s" and gen.duration(180) == "3 min 00 s"
    assert gen.duration(45) == "45 s" and gen.duration(3720) == "1 h 02 min"


def test_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    (tmp_path / "scenarios").mkdir()
    shutil.copy(ROOT / "scenarios" / "quick.toml", tmp_path / "scenarios" / "quick.toml")
    (tmp_path / "docs" / "runs").mkdir(parents=True)
    assert gen.main(["--root", str(tmp_path)]) == 0
    assert gen.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / gen.PAGE).write_text("stale\n")
    assert gen.main(["--root", str(tmp_path), "--check"]) == 1
