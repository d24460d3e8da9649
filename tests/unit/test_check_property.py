"""Property: `secperf check` on any mutation of a shipped scenario either accepts it or
gives a clear error (exit 3 or 4, a message) — never a traceback (issue 15)."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from secperf.cli import app

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "scenarios").glob("*.toml"))
ASSIGNMENT = re.compile(r"^(\s*[A-Za-z0-9_.\"-]+\s*=\s*)(.+)$")

LITERALS = [
    "nan",
    "inf",
    "-inf",
    "+inf",
    "1e999",
    "-1",
    "0",
    "-0.0",
    "1e6",
    "0.5",
    "1.5e-300",
    "99999999999999999999",
    "9223372036854775807",
    "true",
    "false",
    '""',
    '"x"',
    '"nan"',
    '"-5s"',
    '"1e6"',
    '"0B"',
    '"unlimited"',
    '"default"',
    "[]",
    "[1, 1]",
    '["a", 2]',
    "{}",
    '{ kind = "acl" }',
    "[nan]",
    "[[1]]",
    "1979-05-27",
    '"\\u00e9"',
    "'..'",
]
value = st.one_of(
    st.sampled_from(LITERALS),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(
        lambda f: (
            "nan"
            if f != f
            else ("inf" if f == float("inf") else "-inf" if f == float("-inf") else repr(f))
        )
    ),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters='"\\\n\r'), max_size=12).map(
        lambda s: f'"{s}"'
    ),
)

runner = CliRunner()
COPY = Path(tempfile.mkdtemp(prefix="secperf-mutated-"))
shutil.copytree(ROOT / "scenarios", COPY, dirs_exist_ok=True)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    scenario=st.sampled_from(SHIPPED),
    picks=st.lists(st.tuples(st.integers(min_value=0), value), min_size=1, max_size=3),
    drop_line=st.booleans(),
)
def test_check_never_tracebacks(
    scenario: Path, picks: list[tuple[int, str]], drop_line: bool
) -> None:
    lines = scenario.read_text().splitlines()
    assignments = [i for i, line in enumerate(lines) if ASSIGNMENT.match(line)]
    for index, literal in picks:
        at = assignments[index % len(assignments)]
        match = ASSIGNMENT.match(lines[at])
        assert match is not None
        lines[at] = match.group(1) + literal
    if drop_line:
        del lines[assignments[picks[0][0] % len(assignments)]]
    # relative rule files resolve next to the scenario: a copy of scenarios/ holds it
    path = COPY / f"mutated-{scenario.name}"
    path.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["check", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"traceback for {scenario.name} with {picks}: {result.exception!r}"
    )
    assert result.exit_code in (0, 3, 4), result.output
    if result.exit_code:
        assert "error:" in result.output and "Traceback" not in result.output
