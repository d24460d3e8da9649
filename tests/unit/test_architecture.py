"""The shape of the code (docs/architecture.md): what import-linter cannot say.

`make lint` runs import-linter's contracts (no import cycle between the modules of
any package; each layer imports only the layers below it). These tests add: no
import of a secperf module hidden in a function (the way a cycle is usually dodged),
and no module grown past about 600 lines unless it is one concept, named below and
in docs/architecture.md."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "secperf"
MAX_LINES = 600
# Modules past MAX_LINES that are one concept each (docs/architecture.md says why).
ONE_CONCEPT = {
    "secperf/testbed/topology.py",  # the testbed graph: hosts, links, addresses, routes
    "secperf/testbed/hosts/vmimage.py",  # the VM image: its recipe, build and cache
    "secperf/results/records.py",  # the record models: field declarations
    "secperf/rulesets/flows.py",  # the coverage traffic: one walk, a flow per rule
}


def _secperf_import(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").startswith("secperf")
    return isinstance(node, ast.Import) and any(a.name.startswith("secperf") for a in node.names)


def _hidden_imports(path: Path) -> list[int]:
    """The lines of every import of a secperf module inside a function or class body."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    top |= {id(n) for n in tree.body if isinstance(n, ast.If) for n in n.body}  # TYPE_CHECKING
    return [n.lineno for n in ast.walk(tree) if id(n) not in top and _secperf_import(n)]  # type: ignore[attr-defined]


def test_no_secperf_import_hides_in_a_function() -> None:
    hidden = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(SOURCE.rglob("*.py"))
        for line in _hidden_imports(path)
    ]
    assert hidden == []


def test_the_check_finds_a_hidden_import(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("import os\n\ndef f():\n    from secperf import errors\n    return errors\n")
    assert _hidden_imports(planted) == [4]


def test_no_module_outgrows_one_concept() -> None:
    long = {
        str(p.relative_to(ROOT))
        for p in SOURCE.rglob("*.py")
        if len(p.read_text().splitlines()) > MAX_LINES
    }
    assert long <= ONE_CONCEPT, f"past {MAX_LINES} lines: {sorted(long - ONE_CONCEPT)}"
    documented = (ROOT / "docs" / "architecture.md").read_text()
    assert all(m in documented for m in ONE_CONCEPT)


def test_the_import_contracts_hold() -> None:
    """The same check as `make lint`, so that a test run alone catches a new cycle."""
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "5 kept, 0 broken" in proc.stdout
