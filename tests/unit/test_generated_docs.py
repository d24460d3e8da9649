"""Every generated page in docs/ equals its generator's output: `make docs` (python -m
secperf.docgen) rewrites them all, and this fails when one of them is stale."""

from __future__ import annotations

import importlib

import pytest

from secperf.docgen.__main__ import GENERATORS


@pytest.mark.parametrize("name", GENERATORS)
def test_generated_page_is_current(name: str) -> None:
    module = importlib.import_module(name)
    assert module.main(["--check"]) == 0, f"{module.PAGE} is stale: run `make docs`"
