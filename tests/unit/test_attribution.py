"""Where the cost goes, without a testbed: the walk arithmetic, the counted copy of a
rule set, legacy counters, the folding of `perf script` and the differential."""

from __future__ import annotations

from typing import Any

from secperf.mechanisms.acl import Acl, AclSpec
from secperf.plan import Variant
from secperf.report.attribution import attribution_tables, cost_lines
from secperf.results.attribution import differential, left_at, mean_walked, summarise, walks
from secperf.run import profile, rulecount
from secperf.run.attribution import profiled_cpus, rule_where
from secperf.testbed.placement import Placement


def rule(packets: int, verdict: str = "continue", **more: Any) -> dict[str, Any]:
    return {"packets": packets, "bytes": packets * 100, "verdict": verdict, **more}


def chain(name: str, entering: int, rules: list[dict[str, Any]]) -> dict[str, Any]:
    for i, r in enumerate(rules):
        r.setdefault("index", i)
    return {"family": "inet", "table": "t", "chain": name, "entering": entering, "rules": rules}


def test_mean_walked_of_three_rules() -> None:
    # 100 packets enter; 20 accepted at rule 0, 30 dropped at rule 1, the rest fall
    # through rule 2 (it only counts) to the policy: 100 + 80 + 50 walks
    fw = chain("fw", 100, [rule(20, "accept"), rule(30, "drop"), rule(50)])
    assert left_at(fw, {}) == [20, 30, 0]
    assert mean_walked(100, [20, 30, 0]) == (100 + 80 + 50) / 100
    (row,) = walks({"chains": [fw]})
    assert row["mean_walked"] == 2.3 and row["rules"] == 3 and row["entering"] == 100


def test_nothing_entered_has_no_mean() -> None:
    assert mean_walked(0, [0, 0]) is None


def test_a_jump_leaves_with_what_its_chain_decided() -> None:
    # 100 enter fw; all jump to u; u accepts 60 and returns 40; fw's last rule drops 40
    fw = chain("fw", 100, [rule(100, "jump", target="u"), rule(40, "drop")])
    u = chain("u", 100, [rule(60, "accept"), rule(40, "return")])
    rows = {r["chain"]: r for r in walks({"chains": [fw, u]})}
    assert rows["fw"]["mean_walked"] == (100 + 40) / 100
    assert rows["u"]["mean_walked"] == (100 + 40) / 100


def test_legacy_counts_have_no_walk() -> None:
    save = (
        "*filter\n:FORWARD DROP [0:0]\n"
        "[7:700] -A FORWARD -s 198.18.1.2/32 -p tcp -j ACCEPT\n"
        "[3:120] -A FORWARD -j DROP\nCOMMIT\n"
    )
    chains = rulecount.legacy_counts(save, "ip", lambda *a: None)
    assert [(r["packets"], r["verdict"]) for r in chains[0]["rules"]] == [
        (7, "accept"),
        (3, "drop"),
    ]
    (row,) = walks({"walk": False, "chains": chains})
    assert row["mean_walked"] is None and row["entering"] is None


RULESET: dict[str, Any] = {
    "nftables": [
        {"metainfo": {"version": "1.0.6"}},
        {"table": {"family": "inet", "name": "t", "handle": 1}},
        {
            "chain": {
                "family": "inet",
                "table": "t",
                "name": "fw",
                "handle": 1,
                "type": "filter",
                "hook": "forward",
                "prio": 0,
                "policy": "drop",
            }
        },
        {
            "rule": {
                "family": "inet",
                "table": "t",
                "chain": "fw",
                "handle": 4,
                "expr": [
                    {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}},
                    {"accept": None},
                ],
            }
        },
        {
            "rule": {
                "family": "inet",
                "table": "t",
                "chain": "fw",
                "handle": 5,
                "expr": [{"counter": {"packets": 5, "bytes": 9}}, {"drop": None}],
            }
        },
    ]
}


def test_the_counted_copy_counts_every_rule_and_each_chains_entering() -> None:
    cmds = rulecount.instrument(RULESET)["nftables"]
    assert cmds[0] == {"flush": {"ruleset": None}}
    rules = [c["add"]["rule"] for c in cmds if "rule" in c.get("add", {})]
    # a counter before the verdict; the rule's own counter kept (zeroed), not doubled
    assert rules[0]["expr"][1] == {"counter": {"packets": 0, "bytes": 0}}
    assert "accept" in rules[0]["expr"][2]
    assert [s for s in rules[1]["expr"] if "counter" in s] == [{"counter": rulecount.ZERO}]
    assert all("handle" not in r for r in rules)
    (head,) = [c["insert"]["rule"] for c in cmds if "insert" in c]
    assert head["chain"] == "fw" and head["comment"] == rulecount.HEAD_COMMENT


def test_counts_are_read_back_by_place() -> None:
    live = {
        "nftables": [
            *RULESET["nftables"][:3],
            {
                "rule": {
                    "family": "inet",
                    "table": "t",
                    "chain": "fw",
                    "handle": 9,
                    "comment": rulecount.HEAD_COMMENT,
                    "expr": [{"counter": {"packets": 10, "bytes": 1000}}],
                }
            },
            {
                "rule": {
                    "family": "inet",
                    "table": "t",
                    "chain": "fw",
                    "handle": 10,
                    "expr": [{"counter": {"packets": 8, "bytes": 800}}, {"accept": None}],
                }
            },
            {
                "rule": {
                    "family": "inet",
                    "table": "t",
                    "chain": "fw",
                    "handle": 11,
                    "expr": [{"counter": {"packets": 2, "bytes": 200}}, {"drop": None}],
                }
            },
        ]
    }
    texts = {("inet", "t", 4): "meta l4proto tcp accept"}
    (fw,) = rulecount.counts(RULESET, live, texts, lambda f, t, c, i: "a.nft:3" if i else None)
    assert fw["entering"] == 10
    assert [(r["handle"], r["packets"], r["verdict"]) for r in fw["rules"]] == [
        (4, 8, "accept"),
        (5, 2, "drop"),
    ]
    assert fw["rules"][0]["text"] == "meta l4proto tcp accept"
    assert fw["rules"][1]["where"] == "a.nft:3"


def test_restored_equals_original_without_handles_or_counter_values() -> None:
    again = rulecount.restore(RULESET)["nftables"]
    assert again[0] == {"flush": {"ruleset": None}}
    reloaded = {
        "nftables": [{"metainfo": {}}, *[{k: v} for c in again[1:] for k, v in c["add"].items()]]
    }
    assert rulecount.comparable(reloaded) == rulecount.comparable(RULESET)


def test_rule_texts_from_the_listing() -> None:
    listing = (
        "table inet t { # handle 3\n\tchain fw { # handle 2\n"
        "\t\ttype filter hook forward priority filter; policy drop;\n"
        "\t\tip saddr 10.0.0.1 counter packets 4 bytes 5 accept # handle 7\n\t}\n}\n"
    )
    assert rulecount.rule_texts(listing) == {("inet", "t", 7): "ip saddr 10.0.0.1 counter accept"}


SCRIPT = """\
engine
\tffffffff81000001 nft_do_chain ([kernel.kallsyms])
\tffffffff81000002 nft_do_chain_inet ([kernel.kallsyms])
\tffffffff81000003 nf_hook_slow ([kernel.kallsyms])

engine
\tffffffff81000001 nft_do_chain ([kernel.kallsyms])
\tffffffff81000003 nf_hook_slow ([kernel.kallsyms])

engine
\t7f0000000001 [unknown] (/usr/lib/x86_64-linux-gnu/libc.so.6)

swapper
\tffffffff81000009 default_idle ([kernel.kallsyms])
"""


def test_fold_takes_leaf_and_inclusive_shares() -> None:
    samples, leaf, inclusive = profile.fold(SCRIPT.splitlines())
    assert samples == 4
    assert leaf == {"nft_do_chain": 2, "[unknown] libc.so.6": 1, "default_idle": 1}
    assert inclusive["nf_hook_slow"] == 2 and inclusive["nft_do_chain"] == 2
    rec = profile.record_of(SCRIPT.splitlines(), [1], 1.0)
    assert rec["profiled"] and rec["self"]["nft_do_chain"] == 0.5 and rec["cpus"] == [1]
    assert rec["by_comm"] == {"engine": 0.75, "swapper": 0.25}


def test_no_samples_is_said_not_zero() -> None:
    rec = profile.record_of([], None, 1.0)
    assert rec["profiled"] is False and rec["why"].startswith("not profiled")


def test_differential_lists_what_grew() -> None:
    base = {"default_idle": 0.5, "veth_xmit": 0.2, "tcp_ack": 0.3}
    variant = {"nft_do_chain": 0.6, "default_idle": 0.1, "veth_xmit": 0.25, "tcp_ack": 0.05}
    grew = differential(base, variant)
    assert [g["function"] for g in grew] == ["nft_do_chain", "veth_xmit"]
    assert abs(grew[1]["delta"] - 0.05) < 1e-9 and grew[0]["base_share"] == 0.0


def line(variant: str, record: dict[str, Any]) -> dict[str, Any]:
    return {
        "workload": "crr",
        "point_id": "crr#0",
        "variant": variant,
        "phase": "attribution",
        "record": record,
    }


def test_summary_rows_and_report_tables() -> None:
    prof = profile.record_of(SCRIPT.splitlines(), None, 1.0)
    base = profile.record_of(["swapper", "\tffff default_idle ([kernel.kallsyms])", ""], None, 1.0)
    fw = chain("fw", 100, [rule(20, "accept", text="tcp dport 80 accept"), rule(80, "accept")])
    counts = {"type": "rule_counts", "host": "dut", "source": "nft", "chains": [fw]}
    rows = summarise([line("baseline", base), line("acl", prof), line("acl", counts)])
    acl = next(r for r in rows if r["variant"] == "acl")
    assert acl["profile"]["grew"][0]["function"] == "nft_do_chain"
    (hot1, hot2) = acl["rules"][0]["hot"]
    assert (hot1["packets"], hot1["share"]) == (80, 0.8) and hot2["rule"] == "tcp dport 80 accept"
    tables = attribution_tables("crr", rows)
    assert [t.metric for t in tables] == ["hot_rules", "rules_walked", "profile"]
    assert tables[2].rows[0][0].text == "nft_do_chain"
    (gist,) = cost_lines({"attribution": rows})
    assert gist.startswith("acl (crr): hottest rule rule 1, 80.0% of its chain")
    assert "1.800 rules walked a packet in inet t fw" in gist and "nft_do_chain +50.0 pp" in gist
    missing = summarise([line("acl", profile.not_profiled(profile.MISSING))])
    (table,) = attribution_tables("crr", missing)
    assert table.footnotes == ["not profiled: perf missing (install linux-perf)"]
    assert cost_lines({"attribution": missing}) == [
        "acl (crr): not profiled: perf missing (install linux-perf)"
    ]


def test_a_verdict_map_is_counted_before_it() -> None:
    vmap = {"vmap": {"key": {"payload": {"protocol": "ip", "field": "saddr"}}, "data": "@m"}}
    expr = [{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}}, vmap]
    assert rulecount.counted(expr)[1] == {"counter": rulecount.ZERO}
    assert rulecount.verdict_of(expr) == ("vmap", None)


def test_a_mechanism_names_its_rules_source() -> None:
    class Sourced(Acl):
        def rule_source(self, family: str, table: str, chain: str, index: int) -> str | None:
            return f"rules.nft:{10 + index}" if chain == "forward" else None

    ctx: Any = type("Ctx", (), {"hosts": ("dut",)})()
    plain: Any = Acl(AclSpec(rules=1))
    variant = Variant("v", mechanisms=[(plain, ctx), (Sourced(AclSpec(rules=1)), ctx)])
    where = rule_where(variant, "dut")
    assert where("inet", "t", "forward", 2) == "rules.nft:12"
    assert where("inet", "t", "input", 0) is None
    assert rule_where(variant, "server")("inet", "t", "forward", 2) is None


def test_the_profile_samples_the_dut_cpus_where_it_has_its_own() -> None:
    assert profiled_cpus(Placement("shared", testbed_cpus=[0, 1])) is None
    assert profiled_cpus(Placement("one", hosts={"dut": [1]}, testbed_cpus=[1])) == [1]
    split = Placement("split", hosts={"dut": [3]}, testbed_cpus=[2, 3], rps={"dut": [3]})
    assert profiled_cpus(split) == [3]
