"""docs/scenario-format.md's reference part is generated from the schema
(secperf/docgen/scenario_format.py) and equals the generator's output, so a key added,
removed or changed in a model cannot be missing from the page; the keys it lists are
the models' keys."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from secperf.docgen import scenario_format as gen
from secperf.mechanisms.registry import MECHANISMS
from secperf.schema.units import parse_size
from secperf.workloads.registry import WORKLOADS

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / gen.PAGE).read_text("utf-8")


def reference() -> str:
    return PAGE.partition(gen.BEGIN)[2].partition(gen.END)[0]


def test_the_reference_is_its_generators_output() -> None:
    assert gen.render(PAGE) == PAGE, "docs/scenario-format.md is stale: `make docs`"


def test_every_kind_has_its_section_with_its_own_keys() -> None:
    ref = reference()
    for registry in (MECHANISMS, WORKLOADS):
        for kind in registry:
            head = f'#### `kind = "{kind.name}"`'
            assert head in ref, head
            section = ref.partition(head)[2].split("\n#### ")[0]
            own = [k for k in kind.model.model_fields if gen.owner(kind.model, k) is kind.model]
            for key in own:
                if key not in ("kind", *gen.HIDDEN):
                    assert f"| `{key}` |" in section, (kind.name, key)


def test_a_row_says_type_unit_default_and_example() -> None:
    ref = reference()
    stream = ref.partition('#### `kind = "stream"`')[2].split("\n#### ")[0]
    message = next(ln for ln in stream.splitlines() if ln.startswith("| `message` |"))
    cells = [c.strip() for c in message.strip("|").split("|")]
    assert cells[1] == "size, or a list (a sweep), 1 B … 64 MiB"
    assert cells[2] == "bytes"
    assert cells[3] == '`"128KiB"`'
    # the example: a value a shipped scenario gives the key, else one the type allows
    assert 1 <= parse_size(tomllib.loads(f"v = {cells[4].strip('`')}")["v"]) <= 64 * 1024**2
    link_rate = next(ln for ln in stream.splitlines() if ln.startswith("| `link_rate` |"))
    assert "| bits/s | unset |" in link_rate  # unset: the links as the testbed made them
    repeat = ref.partition("### `[repeat]`")[2].split("\n### ")[0]
    budget = next(ln for ln in repeat.splitlines() if ln.startswith("| `budget` |"))
    assert '| s | `"10m"` |' in budget


def test_shared_keys_name_the_kinds_they_apply_to() -> None:
    ref = reference()
    flood = ref.partition("#### A flood beside the measured flow")[2].split("\n#### ")[0]
    kinds = set(re.findall(r"`(\w+)`", flood.split("\n\n")[1]))
    with_part = {k.name for k in WORKLOADS if "flood_rate" in k.model.model_fields}
    assert {"stream", "rr", "crr"} <= kinds
    assert kinds <= with_part


def test_examples_come_from_the_shipped_files(tmp_path: Path) -> None:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "a.toml").write_text(
        'name = "a"\n[variants.v]\nmechanisms = []\n'
        '[[workloads]]\nkind = "stream"\nmessage = "4KiB"\nparallel = 1\n'
    )
    found = gen.shipped_examples(tmp_path)
    stream = WORKLOADS.get("stream").model
    assert found[(stream, "message")] == "4KiB"
    assert (stream, "parallel") not in found  # its default is no example


def test_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    page = tmp_path / gen.PAGE
    page.parent.mkdir(parents=True)
    page.write_text(f"# t\n\n{gen.BEGIN}\nold\n{gen.END}\n")
    assert gen.main(["--root", str(tmp_path), "--check"]) == 1
    assert gen.main(["--root", str(tmp_path)]) == 0
    assert gen.main(["--root", str(tmp_path), "--check"]) == 0
    page.write_text("no markers\n")
    with pytest.raises(ValueError):
        gen.main(["--root", str(tmp_path)])


def test_every_key_says_what_it_means() -> None:
    """A key added without its description (the string below the field) fails here."""
    rows = [ln for ln in reference().splitlines() if ln.startswith("| `")]
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", ln.strip().strip("|"))] for ln in rows]
    keys = [c for c in cells if len(c) == 6]
    assert len(keys) > 300
    assert [c[0] for c in keys if not c[5]] == []
