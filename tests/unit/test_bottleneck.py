"""The bottleneck rule: what limited each row, and when a comparison cannot show the
mechanism's cost (secperf.results.bottleneck)."""

from __future__ import annotations

from secperf.results.bottleneck import Evidence, LinkUse, bottleneck, comparison

ROLES = {"client": "generator", "server": "server", "dut": "dut"}


def shared(**kw: object) -> Evidence:
    base: dict[str, object] = {"placement": "shared", "cpus": 2, "roles": ROLES}
    return Evidence(**{**base, **kw})  # type: ignore[arg-type]


def test_a_saturated_shaped_link_is_the_limit_before_any_cpu() -> None:
    link = LinkUse("client-dut", "client", 100e6, 0.97, True)
    e = shared(host_pct={"client": 95.0, "server": 20.0}, links=[link])
    b = bottleneck(e)
    assert b.kind == "link" and b.short == "link client-dut"
    assert "100 Mbit/s" in b.text and "97 %" in b.text
    # the same link at 60 %: not the limit, the generator is
    e.links = [LinkUse("client-dut", "client", 100e6, 0.6, False)]
    assert bottleneck(e).kind == "generator"


def test_generator_server_and_dut_by_their_cgroups() -> None:
    assert bottleneck(shared(host_pct={"client": 97.0, "server": 40.0})).kind == "generator"
    assert bottleneck(shared(host_pct={"client": 50.0, "server": 93.0})).kind == "server"
    # a user-space mechanism's daemons in the DUT's group come before the endpoints
    b = bottleneck(shared(host_pct={"client": 95.0, "dut": 99.0}))
    assert b.kind == "dut" and b.host == "dut"


def test_a_host_held_to_a_quota_is_limited_at_its_quota() -> None:
    e = shared(host_pct={"client": 24.0, "server": 30.0}, caps={"client": 25.0})
    b = bottleneck(e)
    assert b.kind == "generator" and "its quota 25 %" in b.text
    e.caps = {"dut": 50.0}
    e.host_pct = {"client": 40.0, "dut": 48.0}
    assert bottleneck(e).kind == "dut"


def test_nothing_at_its_limit_is_round_trips_and_names_the_largest() -> None:
    b = bottleneck(shared(host_pct={"client": 45.0, "server": 30.0, "dut": 0.0}))
    assert b.kind == "round_trips" and "client 45 %" in b.text


def test_shared_placement_can_be_limited_by_all_the_machines_cpus() -> None:
    b = bottleneck(shared(host_pct={"client": 85.0, "server": 80.0, "dut": 20.0}))
    assert b.kind == "machine_cpus"


def test_one_cpu_is_the_whole_paths_limit_others_included() -> None:
    e = Evidence(
        placement="one",
        cpus=1,
        roles=ROLES,
        host_pct={"client": 40.0, "server": 20.0},
        busy_pct=99.0,
        others_pct=38.0,
    )
    b = bottleneck(e)
    assert b.kind == "one_cpu" and "other processes 38 %" in b.text
    # on one CPU a generator at 92 % is the one CPU, not "the generator"
    e = Evidence(placement="one", cpus=1, roles=ROLES, host_pct={"client": 92.0, "server": 6.0})
    assert bottleneck(e).kind == "one_cpu"
    # the one CPU half idle: round trips
    e = Evidence(placement="one", cpus=1, roles=ROLES, host_pct={"client": 30.0}, busy_pct=40.0)
    assert bottleneck(e).kind == "round_trips"


def test_split_the_dut_cpus() -> None:
    e = shared(placement="split", host_pct={"client": 50.0, "dut": 0.0}, dut_cpu_busy_pct=96.0)
    assert bottleneck(e).kind == "dut_cpus"


def test_search_bound_and_open_loop_come_first() -> None:
    assert bottleneck(shared(censored="at_least", host_pct={"client": 99.0})).kind == (
        "search_bound"
    )
    # an "at least" because the tool could not run more: that limit, named, not the range
    why = "nginx in server can hold 19744 connections (its worker's open-file limit)"
    tool = bottleneck(shared(censored="at_least", ceiling=why, host_pct={"client": 99.0}))
    assert tool.kind == "tool_limit" and "19744" in tool.text
    assert "CAP_SYS_RESOURCE" in (comparison(tool, tool) or "")
    e = shared(host_pct={"client": 99.0}, asked=10_000.0, achieved=9_990.0)
    assert bottleneck(e).kind == "offered"
    # the open loop fell short: the generator it was
    e.achieved = 7_000.0
    assert bottleneck(e).kind == "generator"


def test_no_cpu_counted_is_not_measured_not_a_guess() -> None:
    assert bottleneck(shared()).kind == "not_measured"


def test_a_comparison_limited_by_the_same_non_dut_thing_is_flagged() -> None:
    link = bottleneck(shared(links=[LinkUse("dut-server", "dut", 10e6, 0.99, True)]))
    gen = bottleneck(shared(host_pct={"client": 99.0}))
    one = bottleneck(Evidence(placement="one", host_pct={"client": 99.0}, roles=ROLES))
    dut = bottleneck(shared(host_pct={"dut": 99.0}))
    assert "unshape the link" in (comparison(link, link) or "")
    assert "add generators" in (comparison(gen, gen) or "")
    # different limits, or the DUT / the one CPU on both sides: the cost can show
    assert comparison(link, gen) is None
    assert comparison(one, one) is None
    assert comparison(dut, dut) is None
