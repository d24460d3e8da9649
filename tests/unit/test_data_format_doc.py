"""docs/data-format.md's tables are generated (secperf/docgen/data_format.py) from the
record models (secperf/results/records.py) and equal the generator's output: a field
added to a model without `make docs` fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from secperf.docgen import data_format as gen
from secperf.results import records

ROOT = Path(__file__).resolve().parents[2]


def _page() -> str:
    return (ROOT / gen.PAGE).read_text("utf-8")


def test_data_format_page_is_its_generators_output() -> None:
    page = _page()
    assert page == gen.render(page), "docs/data-format.md differs from its generator: `make docs`"


def test_every_generator_has_its_block_and_every_model_its_table() -> None:
    page = _page()
    assert sorted(m.group(2) for m in gen.BLOCK.finditer(page)) == sorted(gen.BLOCKS)
    for model in (*records.ENGINE_MODELS, records.RecordLine, records.SummaryRow):
        for name in model.model_fields:
            assert f"`{name}`" in page, (model.__name__, name)


def test_a_block_without_a_generator_is_an_error() -> None:
    with pytest.raises(KeyError, match="nothing-here"):
        gen.render("<!-- generated: nothing-here -->\n<!-- /generated: nothing-here -->")


def test_a_new_field_changes_the_table() -> None:
    class Row(records.Model):
        kept: int

    class Grown(records.Model):
        kept: int
        added: str | None = None

    assert "`added` | string \\| null" in gen.field_table(Grown)
    assert "`added`" not in gen.field_table(Row)
