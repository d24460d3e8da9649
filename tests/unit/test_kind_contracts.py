"""Kinds stand alone: the import-linter contracts in pyproject.toml list every
registered kind, and a kind that imports another kind fails `lint-imports` (proved on a
copy of the package with one such import added, and shown to pass without the contract,
so the contract is what catches it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

import secperf.mechanisms.registry as mechanism_registry
import secperf.workloads.registry as workload_registry

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {c.get("id", c["name"]): c for c in config["tool"]["importlinter"]["contracts"]}


def kind_modules(registry: ModuleType, package: str) -> set[str]:
    """The kind modules a registry imports (one a kind)."""
    return {
        v.__name__
        for v in vars(registry).values()
        if isinstance(v, ModuleType) and v.__name__.startswith(package + ".")
    }


@pytest.mark.parametrize(
    ("contract", "registry", "package"),
    [
        ("workload-kinds", workload_registry, "secperf.workloads"),
        ("mechanism-kinds", mechanism_registry, "secperf.mechanisms"),
    ],
)
def test_every_registered_kind_is_in_its_independence_contract(
    contract: str, registry: ModuleType, package: str
) -> None:
    listed = set(contracts()[contract]["modules"])  # type: ignore[arg-type]
    assert listed == kind_modules(registry, package)


def lint(tree: Path, config: str, *ids: str) -> subprocess.CompletedProcess[str]:
    (tree / "lint.toml").write_text(config)
    argv = [str(LINT), "--no-cache", "--no-logo", "lint.toml", *(f"--contract={i}" for i in ids)]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)}
    return subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)


@pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed in this venv")
def test_a_kind_importing_a_kind_fails_the_lint(tmp_path: Path) -> None:
    tree = tmp_path / "src"
    shutil.copytree(
        ROOT / "secperf", tree / "secperf", ignore=shutil.ignore_patterns("__pycache__")
    )
    config = (ROOT / "pyproject.toml").read_text()
    kept = lint(tree, config, "workload-kinds", "mechanism-kinds", "workload-parts")
    assert kept.returncode == 0, kept.stdout + kept.stderr

    # one workload kind reaching into another, one mechanism kind into another
    stream = tree / "secperf" / "workloads" / "stream.py"
    stream.write_text(
        stream.read_text() + "\nfrom secperf.workloads.rr import RrWorkload  # noqa\n"
    )
    nat = tree / "secperf" / "mechanisms" / "nat.py"
    nat.write_text(nat.read_text() + "\nfrom secperf.mechanisms.acl import AclSpec  # noqa\n")
    broken = lint(tree, config, "workload-kinds", "mechanism-kinds")
    assert broken.returncode != 0
    out = broken.stdout
    assert "Workload kinds stand alone: no workload kind imports another BROKEN" in out
    assert "Mechanism kinds stand alone: no mechanism kind imports another BROKEN" in out
    assert "secperf.workloads.stream -> secperf.workloads.rr" in out
    assert "secperf.mechanisms.nat -> secperf.mechanisms.acl" in out

    # without the independence contracts nothing else notices the same imports
    start = config.index("# Kinds stand alone")
    others = config[:start]
    without = lint(tree, others)
    assert without.returncode == 0, without.stdout + without.stderr


def test_a_side_flow_is_what_its_own_kind_would_send() -> None:
    """parts.specs mirrors the stream and rr kinds' engine fields and defaults: the
    spec another kind sends (min_flood, illegal) is the one the owning kind builds."""
    from secperf.workloads.base import engine_spec
    from secperf.workloads.parts import specs
    from secperf.workloads.rr import RrWorkload
    from secperf.workloads.stream import StreamWorkload

    for keys in ({"message": 16384, "rate": None}, {"message": 1024, "rate": 10_000_000}):
        own = StreamWorkload.model_construct(
            kind="stream", protocol="tcp", duration=2.0, warmup=0.5, **keys
        )
        side = specs.stream(duration=2.0, warmup=0.5, **keys)
        assert engine_spec(side, server="s:1") == engine_spec(own, server="s:1")
    own_rr = RrWorkload.model_construct(kind="rr", protocol="tcp", duration=2.0, warmup=0.5)
    side_rr = specs.rr(duration=2.0, warmup=0.5)
    assert engine_spec(side_rr, server="s:1") == engine_spec(own_rr, server="s:1")
    for model, mirror in ((StreamWorkload, specs.TcpStream), (RrWorkload, specs.TcpRr)):
        assert mirror.engine_fields == model.engine_fields
        assert mirror.engine_names == model.engine_names
