"""The run directories in an output folder: the results store (history.sqlite) sits beside them."""

from __future__ import annotations

from pathlib import Path


def run_dirs(out: Path) -> list[Path]:
    """Every run directory in `out`, oldest name first; files (the store) are not runs."""
    return sorted(p for p in out.iterdir() if p.is_dir())


def only_run(out: Path) -> Path:
    """The one run directory a single `secperf run --out out` wrote; fails if there are more."""
    dirs = run_dirs(out)
    assert len(dirs) == 1, f"expected one run directory in {out}, found {[p.name for p in dirs]}"
    return dirs[0]
