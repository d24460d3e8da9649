"""`secperf CMD --help` as a reader sees it: placeholders in words, the text literal."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

COMMANDS = ["run", "check", "report", "compare", "clean", "doctor", "review", "history"]
# typer's own placeholders: <path>, <bool>, <list[str]>, <int>, <float>, <str>
TYPED = re.compile(r"<(?:path|bool|str|int|float|list\[[a-z]+\])>")


def _help(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "secperf", *args, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", "TERM": "dumb"},
        check=True,
    )
    return proc.stdout


@pytest.mark.parametrize("command", [[], *[[c] for c in COMMANDS]], ids=lambda c: c[0] if c else "")
def test_no_placeholder_is_a_python_type(command: list[str]) -> None:
    text = _help(*command)
    assert "Usage: secperf" in text
    assert not TYPED.findall(text), TYPED.findall(text)


def test_help_is_literal_and_names_its_placeholders() -> None:
    text = _help("run")
    assert "[[expect]]" in text  # rich markup would have eaten it
    assert re.search(r"--out\s+DIR\b", text) and re.search(r"--junit\s+FILE\b", text)
    assert re.search(r"--expect\s+THRESHOLD\b", text)
    assert re.search(r"--json\s+Print", text)  # a flag takes no placeholder
    assert "SCENARIO" in _help("run").split("Arguments")[1]
