"""Host backends are registered like kinds: one name each (testbed/hosts/registry.py),
what each is as data on its KIND, and no backend name written anywhere outside
testbed/hosts: every other module asks the registry."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

from secperf.scenario.scenario import Variant
from secperf.schema.sections import InventoryHost
from secperf.testbed.hosts.registry import BACKENDS
from secperf.testbed.testbed import FACTORIES

SOURCE = Path(__file__).resolve().parents[2] / "secperf"
WORDS = {word for kind in BACKENDS for word in (kind.name, *kind.aliases)}
# The same words that mean something else there (file, word): why each is not a backend.
OTHER_MEANING = {
    ("mechanisms/external.py", "external"),  # the mechanism kind's own name
    ("mechanisms/ids.py", "local"),  # `ip -j addr`'s key for an address
    ("plan/inventory.py", "local"),  # the same key
    ("docgen/scenario_format.py", "vm"),  # the [testbed.vm] section's key
    ("report/header.py", "vm"),  # run.json's `vm` section ([testbed.vm])
    ("report/tags.py", "vm"),  # the same section
    ("testbed/ledger.py", "ssh"),  # a ledger entry type (an SSH host's session)
    ("testbed/teardown.py", "ssh"),  # the same entry type
}


def test_no_backend_name_is_a_string_outside_testbed_hosts() -> None:
    found = set()
    for path in SOURCE.rglob("*.py"):
        rel = path.relative_to(SOURCE).as_posix()
        if rel.startswith("testbed/hosts/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in WORDS:
                found.add((rel, node.value, node.lineno))
    named = {(rel, word, line) for rel, word, line in found if (rel, word) not in OTHER_MEANING}
    assert not named, f"backend names outside testbed/hosts (ask BACKENDS): {sorted(named)}"


def test_every_backend_has_one_factory_and_the_default_is_a_namespace() -> None:
    assert [k.name for k in BACKENDS] == list(FACTORIES)
    assert all(FACTORIES[k.name] is k.build for k in BACKENDS)
    assert BACKENDS.default.name == "namespace"
    assert BACKENDS.names(inventory=True) == ["namespace", "ssh", "external"]
    assert BACKENDS.names(variant=True) == ["namespace", "vm"]
    assert [k.name for k in BACKENDS if k.lab] == ["ssh", "external"]
    assert [k.name for k in BACKENDS if k.logs_in] == ["ssh"]
    assert [k.name for k in BACKENDS if k.virtual] == ["vm"]


def test_local_is_the_inventory_alias_of_namespace() -> None:
    """An inventory (and a kept run's scenario) may say "local": it is the namespace."""
    assert InventoryHost().backend == "namespace"
    assert InventoryHost(backend="local").backend == "namespace"
    with pytest.raises(ValidationError, match='use "namespace" \\| "ssh" \\| "external"'):
        InventoryHost(backend="vm")
    assert Variant.model_validate({"backend": "vm"}).backend == "vm"
    with pytest.raises(ValidationError, match='use "namespace" \\| "vm"'):
        Variant.model_validate({"backend": "ssh"})
