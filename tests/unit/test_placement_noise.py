"""Placement, CPU quota, the machine's noise and the links' counters, without root."""

from __future__ import annotations

import pytest

from secperf.errors import TestbedError
from secperf.run.budget import Budget, Visit, estimate_rounds, next_round
from secperf.run.observe import End, Shaper, links_record, parse_tbf
from secperf.run.softirq import Traced, parse_maps
from secperf.schema.sections import Testbed as TestbedSection
from secperf.testbed.cgroups import detect, quota_us
from secperf.testbed.machine import Reading, window
from secperf.testbed.placement import check_quota, cpu_list, cpu_mask, resolve
from secperf.testbed.topology import Topology

STD = Topology.standard()


def test_one_puts_every_host_on_the_last_cpu_and_secperf_on_the_rest() -> None:
    p = resolve("one", STD, {0, 1})
    assert p.mode == "one" and p.testbed_cpus == [1] and p.secperf_cpus == [0]
    assert set(p.hosts) == set(STD.names) and all(c == [1] for c in p.hosts.values())
    assert p.confined and "cost" in p.describe()["meaning"]
    one_cpu = resolve("one", STD, {0})
    assert one_cpu.secperf_cpus is None and one_cpu.notes


def test_split_needs_three_cpus_and_steers_the_duts_receive_processing() -> None:
    with pytest.raises(TestbedError, match="at least 3 CPUs"):
        resolve("split", STD, {0, 1})
    p = resolve("split", STD, {0, 1, 2, 3})
    assert p.hosts["dut"] == [3] and p.hosts["client"] == [2] and p.hosts["server"] == [2]
    assert p.rps == {"dut": [3]} and p.secperf_cpus == [0, 1]
    assert cpu_mask([3]) == "8" and cpu_list([0, 1, 2, 5]) == "0-2,5"


def test_shared_a_map_and_real_hosts() -> None:
    assert resolve(None, STD, {0, 1}).mode == "shared"
    assert resolve("shared", STD, {0, 1}).testbed_cpus == [0, 1]
    p = resolve({"client": "0", "dut": "1"}, STD, {0, 1})
    # the server is not placed: the testbed's work may be anywhere
    assert p.mode == "map" and p.testbed_cpus == [0, 1] and "server" not in p.hosts
    with pytest.raises(TestbedError, match="router"):
        resolve({"router": "0"}, STD, {0, 1})
    with pytest.raises(TestbedError, match="not available"):
        resolve({"client": "7"}, STD, {0, 1})
    assert resolve(None, STD, {0, 1}, lab=True).mode == "remote"
    with pytest.raises(TestbedError, match="real machines"):
        resolve("one", STD, {0, 1}, lab=True)


def test_the_scenarios_default_is_one_here_and_nothing_on_real_hosts() -> None:
    t = TestbedSection.model_validate({})
    assert t.placement_setting(lab=False) == "one" and t.placement_setting(lab=True) is None
    # pin is the map form's older name
    assert TestbedSection.model_validate({"pin": {"client": "0"}}).cpus == {"client": "0"}
    with pytest.raises(ValueError, match="both pin and cpus"):
        TestbedSection.model_validate({"pin": {"client": "0"}, "cpus": "one"})
    with pytest.raises(ValueError, match="not a placement"):
        TestbedSection.model_validate({"cpus": "two"})


def test_quota_is_a_share_of_one_cpu() -> None:
    assert quota_us(0.5) == 50_000 and quota_us(0.001) == 1000  # the kernel's 1 ms floor
    assert check_quota(STD, {"dut": 0.5}, 2) == {"dut": 0.5}
    with pytest.raises(TestbedError, match="router"):
        check_quota(STD, {"router": 0.5}, 2)
    with pytest.raises(TestbedError, match=r"between 0\.01 and 2"):
        check_quota(STD, {"dut": 3.0}, 2)
    v1 = (
        "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n"
        "cgroup /sys/fs/cgroup/cpuacct cgroup rw,cpuacct 0 0\n"
    )
    layout = detect(v1, prefer="v1")
    assert str(layout.quota_root) == "/sys/fs/cgroup/cpu"
    assert detect("cgroup /x cgroup rw,cpuacct 0 0\n", prefer="v1").quota_root is None


def reading(
    at: float, idle: dict[int, int], client: float, ksoft: int = 0, me: float = 0.0
) -> Reading:
    return Reading(
        at=at,
        idle_us=dict(idle),
        root_ns=None,
        groups={"client": client, "server": 0.0},
        ksoftirqd_ns={1: ksoft},
        secperf_s=me,
        load=0.4,
    )


def test_a_quiet_test_is_not_disturbed_and_accounts_for_its_cpu() -> None:
    # 2 s on CPU 1: idle 0.05 s, the client 1.9 s, ksoftirqd 0.03 s: others 0.02 s (1 %)
    a = reading(0.0, {1: 0}, 10.0, 0)
    b = reading(2.0, {1: 50_000}, 11.9, 30_000_000)
    w = window(a, b, [1])
    assert w.source == "cpuidle" and w.busy_s == pytest.approx(1.95)
    assert w.others_pct == pytest.approx(1.0)
    assert not w.disturbed(10.0)
    assert w.accounted_pct == pytest.approx((1.9 + 0.03) / 1.95 * 100)
    rec = w.record(10.0)
    assert rec["type"] == "machine" and rec["disturbed"] is False


def test_other_work_on_the_testbeds_cpu_disturbs_the_test() -> None:
    # busy all 2 s, the testbed only 1.5 s of it: others took 25 % of the CPU
    a = reading(0.0, {1: 0}, 0.0)
    b = reading(2.0, {1: 0}, 1.5)
    w = window(a, b, [1])
    assert w.others_pct == pytest.approx(25.0) and w.disturbed(10.0)
    # secperf's own CPU counts as others only where it shares the testbed's CPUs
    a, b = reading(0.0, {1: 0}, 0.0, me=1.0), reading(2.0, {1: 0}, 1.5, me=1.4)
    assert window(a, b, [1], secperf_shares=True).others_pct == pytest.approx(5.0)
    # without cpuidle nor cpuacct there is no figure: never 0
    a = Reading(0.0, {1: None}, None, {}, {}, 0.0, None)
    b = Reading(2.0, {1: None}, None, {}, {}, 0.0, None)
    none = window(a, b, [1])
    assert none.source == "none" and none.others_pct is None and not none.disturbed(10.0)


def test_a_shaper_that_sent_its_rate_is_saturated() -> None:
    out = (
        '[{"kind":"tbf","root":true,"options":{"rate":1250000},'
        '"bytes":100,"drops":0,"overlimits":5}]'
    )
    first = parse_tbf(out)
    assert first is not None and first.rate_bps == 10e6
    end = End("client-dut", "client", "if0")
    # 10 Mbit/s for 2 s is 2.5 MB: 2.45 MB sent is 98 %
    a = {end: Shaper(0.0, 0, 0, 0, 10e6)}
    b = {end: Shaper(2.0, 2_450_000, 0, 0, 10e6)}
    (d,) = links_record(a, b)["directions"]
    assert d["utilization"] == pytest.approx(0.98) and d["saturated"]
    # 88 % while holding packets back (the span includes the test's end): saturated too
    b = {end: Shaper(2.0, 2_200_000, 3, 900, 10e6)}
    assert links_record(a, b)["directions"][0]["saturated"]
    # 60 %: not
    b = {end: Shaper(2.0, 1_500_000, 0, 0, 10e6)}
    assert not links_record(a, b)["directions"][0]["saturated"]
    assert parse_tbf('[{"kind":"pfifo_fast","root":true}]') is None


def test_bpftrace_maps_parse_into_seconds_by_cpu_and_vector() -> None:
    lines = [
        '{"type": "attached_probes", "data": {"probes": 2}}',
        '{"type": "map", "data": {"@ns": {"1,3": 2000000000, "1,1": 5000, "0,3": 7}}}',
    ]
    maps = parse_maps(lines)
    assert maps == {1: {3: 2_000_000_000, 1: 5000}, 0: {3: 7}}
    t = Traced(2.0, {c: {v: ns / 1e9 for v, ns in vs.items()} for c, vs in maps.items()})
    rec = t.record([1])
    assert rec["net_rx_s"] == pytest.approx(2.0) and rec["by_vector_s"]["NET_RX"] == 2.0
    assert rec["machine_total_s"] > rec["total_s"]
    assert parse_maps(['{"type": "attached_probes"}']) is None  # nothing printed: no figure


def test_budget_shares_and_the_next_round() -> None:
    now = [0.0]
    budget = Budget(60.0, clock=lambda: now[0])
    visit = Visit.of(budget, 3)  # 20 s each
    assert visit.deadline == 20.0
    args = {"min_rounds": 3, "max_rounds": 10, "met": False, "visit": visit}
    assert next_round(rounds=0, longest_round_s=100.0, **args) is None  # the minimum runs
    assert next_round(rounds=3, longest_round_s=5.0, **args) is None
    now[0] = 16.0
    assert next_round(rounds=5, longest_round_s=5.0, **args) == "budget"
    assert next_round(rounds=5, longest_round_s=5.0, **{**args, "met": True}) == "ci_met"
    assert next_round(rounds=10, longest_round_s=1.0, **{**args, "visit": Visit(1e9)}) == (
        "max_reached"
    )
    # what is left is shared: 44 s between 2 points
    assert budget.share(2) == pytest.approx(22.0)
    assert estimate_rounds(60.0, [(3, 10)] * 3, [5.0, 2.0, 20.0]) == [4, 10, 3]
    # a point's own minimum holds however long its rounds are
    assert estimate_rounds(60.0, [(3, 10), (12, 12), (3, 10)], [5.0, 2.0, 20.0]) == [4, 12, 3]
    # and what it spends past its share is not there for the points after it
    assert estimate_rounds(60.0, [(10, 10), (3, 10), (3, 10)], [5.0, 1.0, 1.0]) == [10, 5, 5]
    assert estimate_rounds(60.0, [(3, 10), (3, 10), (3, 10)], [5.0, 1.0, 1.0]) == [4, 10, 10]
