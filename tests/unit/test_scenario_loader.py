"""Loading scenario files: good files load; every problem names file, line, key and fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from secperf.errors import ScenarioError
from secperf.mechanisms.custom import CustomSpec
from secperf.scenario.loader import (
    Problem,
    ScenarioValidationError,
    check_scenario,
    format_path,
    load_scenario,
    parse_scenario,
)
from secperf.scenario.sweep import expand_scenario
from secperf.workloads.stream import StreamWorkload

DATA = Path(__file__).resolve().parent.parent / "data" / "scenarios"
SHIPPED = Path(__file__).resolve().parents[2] / "scenarios"

GOOD_HEAD = """name = "t"
[variants.acl]
mechanisms = [{ kind = "acl", rules = 10 }]
"""


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(path: Path) -> list[Problem]:
    with pytest.raises(ScenarioValidationError) as info:
        load_scenario(path)
    return info.value.problems


def test_good_quick_loads() -> None:
    sc = load_scenario(DATA / "good-quick.toml")
    assert sc.name == "quick"
    assert list(sc.variants) == ["acl-linear", "acl-set"]
    assert [w.name for w in sc.workloads] == ["tcp-rr", "tcp-stream"]
    stream = sc.workloads[1]
    assert isinstance(stream, StreamWorkload)
    assert stream.message == [16384, 131072] and stream.duration == 10.0
    assert sc.source == (DATA / "good-quick.toml").absolute()


def test_good_custom_loads_and_resolves_rule_file() -> None:
    sc = check_scenario(DATA / "good-custom.toml")
    mech = sc.variants["my-rules"].mechanisms[0]
    assert isinstance(mech, CustomSpec)
    assert mech.file == DATA / "rules" / "filter.nft"
    assert sc.variants["plain-forward"].mechanisms == []
    assert sc.testbed.rate_bps == 100_000_000 and sc.testbed.family == "ipv6"


def test_shipped_scenarios_load() -> None:
    files = sorted(SHIPPED.glob("*.toml"))
    if not files:
        pytest.skip("no shipped scenarios yet")
    for path in files:
        load_scenario(path)


def test_unknown_key_gives_line_path_and_suggestion() -> None:
    with pytest.raises(ScenarioValidationError) as info:
        load_scenario(DATA / "bad-typo.toml")
    err = info.value
    assert err.where == f"{(DATA / 'bad-typo.toml')}:11"
    assert err.fix == "did you mean 'message'?"
    assert "workloads[1].mesage: unknown key 'mesage'" in str(err)
    assert [p.key for p in err.problems] == ["workloads[1].mesage"]


def test_many_problems_reported_at_once_with_lines() -> None:
    found = {p.key: p for p in problems(DATA / "bad-many.toml")}
    expected_lines = {
        "name": 1,
        "repeat.max": 5,
        "timing.duration": 8,
        "variants.acl-linear.mechanisms[1].rules": 13,
        "variants.acl-linear.mechanisms[1].layout": 13,
        "variants.nat.mechanisms[0].kind": 17,
        "workloads[0].protocol": 21,
        "workloads[0].parallel": 22,
    }
    assert {k: p.line for k, p in found.items()} == expected_lines
    assert (
        "expected 'linear' or 'set', got 'tree'"
        in found["variants.acl-linear.mechanisms[1].layout"].message
    )
    assert "unknown kind 'nta'" in found["variants.nat.mechanisms[0].kind"].message
    assert "negative" in found["timing.duration"].message
    assert "must be at least min (5)" in found["repeat.max"].message
    with pytest.raises(ScenarioError) as info:
        load_scenario(DATA / "bad-many.toml")
    text = str(info.value)
    assert text.startswith(f"{DATA / 'bad-many.toml'}:1: 8 problems in the scenario:")
    assert "  line 22: workloads[0].parallel: item 1: parallel must be at least 1" in text


def test_unknown_kind_suggests_nearest() -> None:
    text = GOOD_HEAD.replace('kind = "acl"', 'kind = "acls"') + '[[workloads]]\nkind = "rr"\n'
    with pytest.raises(ScenarioValidationError) as info:
        parse_scenario(text, Path("/nowhere/s.toml"))
    (problem,) = info.value.problems
    assert problem.key == "variants.acl.mechanisms[0].kind"
    assert problem.fix == "did you mean 'acl'?"
    assert problem.line == 3


def test_syntax_error_keeps_tomllib_line_and_column() -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(DATA / "bad-syntax.toml")
    assert not isinstance(info.value, ScenarioValidationError)
    assert info.value.where == f"{DATA / 'bad-syntax.toml'}:4"
    assert "line 4, column 16" in info.value.message
    assert info.value.fix and "quotes" in info.value.fix


def test_missing_rule_file_is_reported_at_its_line() -> None:
    (problem,) = problems(DATA / "bad-missing-file.toml")
    assert problem.key == "variants.mine.mechanisms[0].file"
    assert problem.line == 4
    assert "'nowhere.nft' not found" in problem.message


def test_missing_scenario_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(tmp_path / "absent.toml")
    assert info.value.where == str(tmp_path / "absent.toml")
    assert "not found" in info.value.message and info.value.fix
    with pytest.raises(ScenarioError, match="directory"):
        load_scenario(tmp_path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_bytes(b'name = "\xff"\n')
    with pytest.raises(ScenarioError, match="UTF-8"):
        load_scenario(path)


def test_unknown_top_level_and_table_keys(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        GOOD_HEAD + '[testbd]\nlink_rate = "1gbit"\n\n[[workloads]]\nkind = "rr"\nrequst = 5\n',
    )
    found = {p.key: p for p in problems(path)}
    assert found["testbd"].line == 4 and found["testbd"].fix == "did you mean 'testbed'?"
    assert found["workloads[0].requst"].line == 9
    assert found["workloads[0].requst"].fix == "did you mean 'request'?"


def test_unknown_key_far_from_any_lists_valid_keys(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD_HEAD + '[repeat]\nzzzz = 1\n[[workloads]]\nkind = "rr"\n')
    (problem,) = problems(path)
    assert problem.key == "repeat.zzzz" and problem.line == 5
    assert problem.fix == (
        "valid keys here: attribution, budget, calibrate, confidence, degradation_pp, "
        "disturbed_pct, "
        "halfwidth_pct, max, min, remeasure, seed, trace_softirq"
    )


def test_source_is_not_a_file_key(tmp_path: Path) -> None:
    path = write(tmp_path, 'source = "/etc"\n' + GOOD_HEAD + '[[workloads]]\nkind = "rr"\n')
    (problem,) = problems(path)
    assert (problem.key, problem.line) == ("source", 1)


def test_missing_required_keys(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'description = "no name"\n[variants.a]\nmechanisms = [{ kind = "acl" }]\n'
        '[[workloads]]\nprotocol = "tcp"\n',
    )
    found = {p.key: p for p in problems(path)}
    assert found["name"].message == "missing required key 'name'"
    assert found["name"].line is None
    assert found["variants.a.mechanisms[0].rules"].line == 3
    assert "missing key 'kind'" in found["workloads[0]"].message
    assert "'stream', 'rr', 'crr'" in found["workloads[0]"].message
    assert found["workloads[0]"].line == 4


def test_lines_found_through_tricky_toml(tmp_path: Path) -> None:
    text = (
        'name = "t"  # a comment with [brackets] and key = "x"\n'
        'description = """\n'
        "multi-line [variants.fake]\n"
        'mesage = 3\n"""\n'
        '[variants."quoted-name"]\n'
        "mechanisms = [\n"
        '  # a comment, { kind = "acl" }\n'
        '  { kind = "acl", rules = 1, note = "a, }] tricky" },\n'
        '  { kind = "acl", rules = 2, layot = "set" },\n'
        "]\n"
        "[[workloads]]\n"
        'kind = "rr"\n'
        "[[workloads]]\n"
        'kind = "stream"\n'
        'message = [ "1KiB",\n'
        '  "2KiB", "bad" ]\n'
    )
    found = {p.key: p.line for p in problems(write(tmp_path, text))}
    assert found == {
        "variants.quoted-name.mechanisms[0].note": 9,
        "variants.quoted-name.mechanisms[1].layot": 10,
        "workloads[1].message": 16,
    }


def test_dotted_keys_and_subtables_of_array_tables(tmp_path: Path) -> None:
    text = (
        'name = "t"\n'
        "variants.a.mechanisms = []\n"
        "variants.b.mechanisms = [{ kind = 'acl', rules = 1, layout = 'tree' }]\n"
        "[[workloads]]\n"
        'kind = "rr"\n'
        "[[workloads]]\n"
        'kind = "rr"\n'
        'name = "second"\n'
        "inflight = 0\n"
    )
    found = {p.key: p.line for p in problems(write(tmp_path, text))}
    assert found == {"variants.b.mechanisms[0].layout": 3, "workloads[1].inflight": 9}


def test_bad_variant_name_points_at_its_table(tmp_path: Path) -> None:
    text = GOOD_HEAD + '[variants.baseline]\n[variants.Big]\n[[workloads]]\nkind = "rr"\n'
    found = {p.key: p for p in problems(write(tmp_path, text))}
    assert found["variants.baseline"].line == 4
    assert "bad name 'baseline'" in found["variants.baseline"].message
    assert found["variants.Big"].line == 5


def test_wrong_type_message(tmp_path: Path) -> None:
    text = GOOD_HEAD + '[repeat]\nmin = "three"\n[[workloads]]\nkind = "rr"\n'
    (problem,) = problems(write(tmp_path, text))
    assert problem.key == "repeat.min" and problem.line == 5
    assert problem.message == "expected a valid integer, got 'three'"


def test_format_path() -> None:
    assert format_path(("workloads", 1, "message")) == "workloads[1].message"
    assert format_path(("variants", "a b", "mechanisms", 0)) == 'variants."a b".mechanisms[0]'
    assert format_path(()) == ""


DOC = Path(__file__).resolve().parents[2] / "docs" / "scenario-format.md"


def _toml_blocks() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_documented_full_example_loads(tmp_path: Path) -> None:
    full = next(b for b in _toml_blocks() if b.startswith('name = "acl-cost"'))
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "filter.nft").write_text("table inet t {}\n")
    sc = load_scenario(write(tmp_path, full))
    assert list(sc.variants) == ["acl-linear", "acl-set", "my-rules"]
    assert [w.name for w in sc.workloads] == ["tcp-rr", "tcp-stream", "udp-modem", "tcp-crr"]


def test_documented_sweep_labels_are_true() -> None:
    block = next(b for b in _toml_blocks() if 'sweep = "zip"' in b and "tcp-rr#" in b)
    sc = parse_scenario('name = "d"\n[variants.v]\n' + block, Path("/nowhere/d.toml"))
    claimed = re.findall(r"# (\S+#\d+) (.*)", block)
    points = {p.point_id: p.label for p in expand_scenario(sc)}
    assert len(points) == 9
    for point_id, label in claimed:
        assert points[point_id] == label.strip()


def test_key_named_like_the_kind_is_not_mistaken_for_the_tag(tmp_path: Path) -> None:
    text = GOOD_HEAD + '[[workloads]]\nkind = "stream"\nstream = 1\n'
    (problem,) = problems(write(tmp_path, text))
    assert (problem.key, problem.line) == ("workloads[0].stream", 6)
