"""The IPS rule-file subset: parsing, file:line errors, the generator, fwsnort glue."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from secperf import ips_rules
from secperf.errors import MechanismError
from secperf.mechanisms import nfq
from secperf.mechanisms.base import MechanismContext, TrafficPlan
from secperf.mechanisms.ids import IdsSpec, render_mirror
from secperf.mechanisms.ips import (
    Ips,
    IpsSpec,
    fwsnort_counters,
    fwsnort_input,
    fwsnort_save,
    render_iptables,
)

SHIPPED = Path(__file__).resolve().parents[2] / "rules" / "secperf-attacks.rules"


def test_shipped_rule_file_parses_and_normalizes() -> None:
    rules = ips_rules.parse_rules(SHIPPED)
    assert len(rules) >= 10
    sids = {r.sid for r in rules}
    assert {9000001, 9000002, 9000003} <= sids
    assert {"alert", "drop"} == {r.action for r in rules}
    js = ips_rules.normalized(rules)
    assert '"expr": "\\\\x53\\\\x45' in js  # content bytes as Hyperscan escapes


def test_content_hex_nocase_offset_depth_and_pcre() -> None:
    (r,) = ips_rules.parse_text(
        'drop tcp [198.18.1.0/24,198.18.3.4] 1024: -> any [80,8000:8080] (msg:"m\\"x"; '
        'content:"A|3b 0a|B"; nocase; offset:2; depth:10; pcre:"/ab+c/is"; flow:to_server,'
        "established; classtype:x; sid:7; rev:3;)"
    )
    assert r.src == ["198.18.1.0/24", "198.18.3.4/32"]
    assert r.sport == [(1024, 65535)] and r.dport == [(80, 80), (8000, 8080)]
    c, p = r.patterns
    assert c.data == b"A;\nB" and c.nocase and (c.offset, c.depth) == (2, 10)
    assert p.kind == "pcre" and p.nocase and p.dotall and p.expression() == "ab+c"
    assert r.msg == 'm\\"x' or r.msg == 'm"x'
    assert (r.sid, r.rev, r.flow) == (7, 3, ["to_server", "established"])


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('alert tcp any any -> any 80 (content:"x"; bogus; sid:1;)', "bogus"),
        ('reject tcp any any -> any 80 (content:"x"; sid:1;)', "action"),
        ('alert icmp any any -> any any (content:"x"; sid:1;)', "protocol"),
        ('alert tcp any any <> any 80 (content:"x"; sid:1;)', "direction"),
        ('alert tcp any any -> any 80 (content:"x";)', "sid"),
        ('alert tcp any any -> any 99999 (content:"x"; sid:1;)', "port"),
        ('alert tcp any any -> any 80 (nocase; content:"x"; sid:1;)', "must follow"),
        ('alert tcp any any -> any 80 (content:"|zz|"; sid:1;)', "hex"),
        ('alert tcp any any -> any 80 (pcre:"/a/x"; sid:1;)', "flags"),
        ('alert tcp any any -> any 80 (content:"abc"; depth:2; sid:1;)', "shorter"),
        ('alert tcp any any -> any 80 (content:"x" sid:1)', "closing"),
    ],
)
def test_bad_rules_name_file_and_line(line: str, says: str) -> None:
    text = f"# a comment\n\n{line}\n"
    with pytest.raises(MechanismError) as exc:
        ips_rules.parse_text(text, "my.rules")
    assert exc.value.where == "my.rules:3"
    assert says in exc.value.message or says in str(exc.value)


def test_duplicate_sid_and_empty_file() -> None:
    line = 'alert tcp any any -> any 80 (content:"x"; sid:5;)'
    with pytest.raises(MechanismError, match="first at line 1"):
        ips_rules.parse_text(f"{line}\n{line}\n", "d.rules")
    with pytest.raises(MechanismError, match="no rules"):
        ips_rules.parse_text("# nothing\n", "e.rules")


@pytest.mark.parametrize("n", [10, 1000, 10_000])
def test_generator_writes_n_valid_distinct_rules(n: int) -> None:
    rules = ips_rules.parse_text(ips_rules.generate_rules(n))
    assert len(rules) == n
    assert len({r.patterns[0].data for r in rules}) == n
    assert any(len(r.patterns) == 2 for r in rules)  # some carry a pcre


def test_schema_checks_the_rule_file_before_a_run(tmp_path: Path) -> None:
    bad = tmp_path / "bad.rules"
    bad.write_text('alert tcp any any -> any 80 (content:"x"; sid:1;)\nalert tcp oops\n')
    with pytest.raises(ValueError, match=r"bad.rules:2"):
        IpsSpec.model_validate({"kind": "ips", "rules": str(bad)})
    ok = IpsSpec.model_validate({"kind": "ips", "engine": "fwsnort", "rules": 100})
    assert ok.rules == 100 and ok.on == "dut"
    ids = IdsSpec.model_validate({"kind": "ids", "rules": str(SHIPPED)})
    assert ids.on == ["dut", "ids"]


PLAN = TrafficPlan(4, "198.18.1.2/32", "198.18.2.2/32", "198.18.1.2", "198.18.2.2")


def test_nfq_queues_fail_open_and_the_control_connection_beside_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = MechanismContext(plan=PLAN, files_dir=tmp_path, name="ips.0", table="t")
    one = render_iptables(IpsSpec(rules=SHIPPED), ctx).splitlines()
    queue = next(i for i, line in enumerate(one) if "NFQUEUE" in line)
    assert one[queue] == "-A FORWARD -j NFQUEUE --queue-num 0"  # fail closed
    # the engine's control connection skips the queue, and nothing else does
    assert one[:queue][-2:] == [
        f"-A FORWARD -p tcp --dport {PLAN.control_port} -j ACCEPT",
        f"-A FORWARD -p tcp --sport {PLAN.control_port} -j ACCEPT",
    ]
    spread = IpsSpec(rules=SHIPPED, queue=4, queues=2, fail_open=True)
    text = render_iptables(spread, ctx)
    assert "-A FORWARD -j NFQUEUE --queue-balance 4:5 --queue-bypass\n" in text
    ctx.hook = "input"
    assert "-A INPUT -j NFQUEUE --queue-num 0" in render_iptables(IpsSpec(rules=SHIPPED), ctx)
    # the daemon binds what the rule sends to
    ips = Ips(spread)
    ips.render(ctx)
    argv: list[list[str]] = []

    def start_matcher(host: object, c: object, a: list[str], what: str, t: float) -> None:
        argv.append(a)

    monkeypatch.setattr(nfq, "start_matcher", start_matcher)
    ips.restart_daemons(SimpleNamespace(role="dut"), ctx)  # type: ignore[arg-type]
    assert argv[0][:5] == ["--queue", "4", "--queues", "2", "--fail-open"]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"engine": "fwsnort", "queues": 2}, "queues needs engine"),
        ({"engine": "fwsnort", "fail_open": True}, "fail_open needs engine"),
        ({"queue": 65535, "queues": 2}, "past 65535"),
        ({"queues": 0}, "greater than or equal to 1"),
    ],
)
def test_queue_settings_are_checked(entry: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        IpsSpec.model_validate({"kind": "ips", "rules": 10, **entry})


def test_fwsnort_glue_keeps_drop_only_for_drop_rules() -> None:
    text = (
        'drop tcp any any -> any 80 (content:"a"; sid:1;)\n'
        'alert tcp any any -> any 80 (content:"b"; sid:2;)\n'
    )
    assert fwsnort_input(ips_rules.parse_text(text), text).startswith("alert tcp")
    save = (
        '-A FWSNORT_FORWARD -p tcp -m string --hex-string "|61|" -m comment --comment '
        '"sid:1; msg:a;" -j LOG\n-A FWSNORT_FORWARD -p tcp -m string --hex-string "|61|" -j DROP\n'
        '-A FWSNORT_FORWARD -p tcp -m string --hex-string "|62|" -m comment --comment '
        '"sid:2; msg:b;" -j LOG\n-A FWSNORT_FORWARD -p tcp -m string --hex-string "|62|" -j DROP\n'
    )
    out, sids = fwsnort_save(save, {1})
    assert sids == [1, 2]
    assert out.count("-j DROP") == 1 and '"|61|" -j DROP' in out
    counted = "\n".join(f"[{i + 3}:100] {line}" for i, line in enumerate(out.splitlines()))
    assert fwsnort_counters(counted) == {"alerts": 3 + 5, "drops": 4, "by_sid": {"1": 3, "2": 5}}


def test_mirror_duplicates_every_interface_but_the_sensors() -> None:
    nft = render_mirror("t_ids", ["a-cl", "a-sv"], "a-id")
    assert nft.count("dup to") == 2 and 'device "a-id"' not in nft


def test_ids_variant_adds_an_ids_host_and_fwsnort_is_a_required_tool() -> None:
    from secperf.plan import topology_for
    from secperf.run.preflight import tools_for
    from secperf.scenario.scenario import Scenario

    def scenario(mechanisms: list[dict[str, object]]) -> Scenario:
        return Scenario.model_validate(
            {
                "name": "t",
                "variants": {"v": {"mechanisms": mechanisms}},
                "workloads": [{"kind": "rr"}],
            }
        )

    with_ids = topology_for(scenario([{"kind": "ids", "rules": str(SHIPPED)}]), [])
    assert with_ids.host("ids").role == "ids"
    assert with_ids.primary_address("ids", 4) == "198.18.5.2"
    without = topology_for(scenario([{"kind": "ips", "engine": "fwsnort", "rules": 10}]), [])
    assert "ids" not in without.roles
    fw = scenario([{"kind": "ips", "engine": "fwsnort", "rules": 10}])
    assert "fwsnort" in {t.program for t in tools_for(fw)}
    nfq = scenario([{"kind": "ips", "rules": 10}])
    assert "fwsnort" not in {t.program for t in tools_for(nfq)}


def test_secperf_check_takes_a_rule_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from secperf.cli import app

    ok = CliRunner().invoke(app, ["check", str(SHIPPED)])
    assert ok.exit_code == 0 and "15 rule(s)" in ok.output
    bad = tmp_path / "b.rules"
    bad.write_text(ips_rules.generate_rules(3) + "alert tcp any any -> any 80 (sid:9;\n")
    res = CliRunner().invoke(app, ["check", str(bad)])
    assert res.exit_code != 0
    assert "b.rules:5" in res.output + str(res.stderr if res.stderr_bytes else "")
