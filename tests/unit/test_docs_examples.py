"""Every TOML example in docs/scenario-format.md parses with the schema, and together
they show every mechanism and workload kind the schema knows (issue 15)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from secperf.cli import app
from secperf.scenario.loader import parse_scenario
from secperf.scenario.scenario import Mechanism, Scenario, Workload

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "scenario-format.md"
BLOCKS = re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def kinds(union: object) -> set[str]:
    members = typing.get_args(typing.get_args(union)[0])
    return {typing.get_args(m.model_fields["kind"].annotation)[0] for m in members}


def as_scenario(block: str) -> Scenario:
    """A block as a whole scenario: a name, and a plain variant or workload if it has none."""
    text = block
    if not re.search(r"^name\s*=", text, re.M):
        text = 'name = "doc"\n' + text
    if "[variants." not in text:
        text += '\n[variants.v]\nmechanisms = [{ kind = "acl", rules = 10 }]\n'
    if "[[workloads]]" not in text:
        text += '\n[[workloads]]\nkind = "rr"\n'
    # relative rule files resolve next to the file: docs/ for the per-kind blocks,
    # docs/examples/ for the full example (which ships there)
    where = DOC.parent / "examples" / "acl-cost.toml" if 'file = "rules/' in text else DOC
    return parse_scenario(text, where)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_example_block_parses(block: str) -> None:
    as_scenario(block)


def test_examples_show_every_kind() -> None:
    mechanisms: set[str] = set()
    workloads: set[str] = set()
    for block in BLOCKS:
        sc = as_scenario(block)
        if "[variants." in block:
            mechanisms |= {m.kind for v in sc.variants.values() for m in v.mechanisms}
        if "[[workloads]]" in block:
            workloads |= {w.kind for w in sc.workloads}
    assert kinds(Mechanism) <= mechanisms, kinds(Mechanism) - mechanisms
    assert kinds(Workload) <= workloads, kinds(Workload) - workloads


def test_full_example_ships_with_its_rule_file() -> None:
    shipped = ROOT / "docs" / "examples" / "acl-cost.toml"
    assert shipped.read_text(encoding="utf-8") in BLOCKS
    result = CliRunner().invoke(app, ["check", str(shipped)])
    assert result.exit_code == 0, result.output  # as root, nft -c checks filter.nft too
