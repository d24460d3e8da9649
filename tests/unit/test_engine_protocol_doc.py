"""docs/engine-protocol.md's spec fields are generated from the engine's spec types
(secperf/docgen/engine_protocol.py reads engine/secperf-engine/src/spec/) and equal the
generator's output; the fields it reads for each kind are the ones the built engine
takes (its error for an unknown field lists them), so the reading cannot miss one."""

from __future__ import annotations

import json
import subprocess
import typing
from pathlib import Path

import pytest

from secperf.docgen import engine_protocol as gen
from secperf.tools import engine_path
from secperf.workloads.registry import WORKLOADS

ROOT = Path(__file__).resolve().parents[2]


def test_the_spec_fields_are_their_generators_output() -> None:
    page = (ROOT / gen.PAGE).read_text("utf-8")
    assert page == gen.render(page), "docs/engine-protocol.md is stale: `make docs`"


def test_every_kind_of_the_engine_has_its_table() -> None:
    page = (ROOT / gen.PAGE).read_text("utf-8")
    kinds = gen.read_kinds()
    assert [k.name for k in kinds][:3] == ["stream", "rr", "crr"]
    for kind in kinds:
        assert f"### Kind `{kind.name}`\n" in page, kind.name
        for f in kind.fields:
            assert f.meaning or f.value, f"{kind.module}: `{f.name}` has no /// comment"


def _engine_fields(kind: str) -> list[str]:
    spec = json.dumps({"kind": kind, "no_such_field": 1})
    done = subprocess.run(
        [engine_path(), "run", "--spec", spec], capture_output=True, text=True, timeout=30
    )
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["type"] == "error" and record["field"] == "no_such_field", record
    listed = record["message"].rpartition("use one of: ")[2]
    return [f.strip() for f in listed.split(",")]


@pytest.mark.parametrize("kind", [k.name for k in gen.read_kinds()])
def test_the_fields_read_are_the_engines(kind: str) -> None:
    read = next(k for k in gen.read_kinds() if k.name == kind)
    assert _engine_fields(kind) == ["kind", *(f.name for f in read.fields)]


def test_a_field_comment_splits_into_meaning_and_value() -> None:
    body = """
        /// Bytes of each write.
        /// Value: bytes ≥ 1, default 131072
        /// (tcp), 1024 (udp)
        #[serde(alias = "message_size")]
        message: Option<u64>,
        #[serde(skip)]
        given: Value,
    """
    (f,) = gen.parse_fields(body)
    assert (f.name, f.aliases, gen.json_type(f.type)) == ("message", ["message_size"], "integer")
    assert f.meaning == "Bytes of each write."
    assert f.value == "bytes ≥ 1, default 131072 (tcp), 1024 (udp)"


def test_every_field_a_workload_sends_is_one_its_engine_kind_takes() -> None:
    """The control plane's side of the protocol: each engine-driven workload kind's
    `engine_fields` (under the engine's names) are fields of the engine kind it runs."""
    taken = {k.name: {f.name for f in k.fields} for k in gen.read_kinds()}
    driven = [k.model for k in WORKLOADS if k.model.engine_fields]
    assert len(driven) >= 5
    for model in driven:
        kind = model.engine_kind or typing.get_args(model.model_fields["kind"].annotation)[0]
        sent = {model.engine_names.get(f, f) for f in model.engine_fields}
        assert sent <= taken[kind], (model.__name__, sorted(sent - taken[kind]))
