"""What limited each row: the bottleneck rule (docs/methodology.md, "The bottleneck").

A row (one point under one configuration) is limited by the first of these that its
rounds show, on average over the measured window:

1. a search's bound: every search of the row ended at its range's end;
2. the offered rate (open loop): the achieved rate is within 5 % of the asked one;
   nothing saturated, which is the point of an open-loop test;
3. a shaped link: a direction sent ≥ 95 % of its rate (≥ 85 % while its shaper
   held packets back or dropped them: the span read includes the test's end);
4. placement "one": the one CPU, when it was ≥ 90 % busy (exact: its idle
   residency; the hosts, ksoftirqd and, on a shared machine, other processes): the
   whole path's CPU per unit of work;
5. the DUT: its processes (a user-space mechanism's daemons) ≥ 90 % of a CPU (80 % of
   its CPU quota, where it has one), or, placement "split", the DUT's own CPUs
   ≥ 90 % busy;
6. the generator: a client host's processes ≥ 90 % of a CPU or 80 % of its quota (on a
   namespace testbed the DUT's kernel work runs in the sender's softirq and is in
   that figure);
7. the server: the same; then any other host the same way;
8. the machine's CPUs: the testbed used ≥ 90 % of all the CPUs it may use;
9. otherwise round trips: nothing was at its limit, so the rate is set by waiting
   (a closed loop waits for each answer; cross-CPU wake-ups), the largest share named.

A comparison in which the baseline and a variant are limited by the same thing,
and that thing is not the DUT, the whole path's one CPU nor the machine's CPUs,
cannot show the mechanism's cost in its rate: `comparison` says so and what to
change. Pure functions over plain numbers: the summary gathers them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CPU_SATURATED_PCT = 90.0
# A host under a CPU quota is held in bursts (CFS bandwidth: its share of each 100 ms
# period, then nothing): over a test of a second or two it shows less than its quota
# even when the quota limits it (22 % of a 25 % quota, seen in a fresh-clone CI run).
QUOTA_SATURATED_PCT = 80.0
OFFERED_MET = 0.95

# Limits that say nothing about the mechanism when both sides of a comparison hit them.
NOT_THE_MECHANISM = {
    "link": (
        "both are limited by the shaped link, so this rate cannot show the mechanism's cost "
        '(its CPU per unit still can): unshape the link (link_rate = "unlimited") to see it'
    ),
    "generator": (
        "both are limited by the generator's CPU, so this rate measures the generator: add "
        "generators (generators = N) or give the client a CPU of its own (cpus = { client = "
        "\"…\" }); on a namespace testbed the DUT's kernel work runs in the sender's "
        "context, so part of the cost may still show"
    ),
    "server": (
        "both are limited by the server's CPU, so this rate measures the server: give it a "
        "CPU of its own, or lighter responses"
    ),
    "search_bound": (
        "both searches ended at their range's end, so the mechanism's cost is outside it: "
        "widen the search's range (low / high)"
    ),
    "tool_limit": (
        "both searches stopped where this machine could not run a larger trial, so the "
        "mechanism's cost is beyond it: raise the limit the search names (e.g. the hard "
        "RLIMIT_NOFILE, which needs CAP_SYS_RESOURCE to raise)"
    ),
    "offered": (
        "both ran at the offered rate (open loop), so the rate is the same by design: "
        "compare latency and CPU per unit of work instead"
    ),
}

SHORT = {
    "search_bound": "search bound",
    "tool_limit": "tool limit",
    "offered": "offered rate",
    "link": "link",
    "one_cpu": "one CPU",
    "dut": "DUT",
    "dut_cpus": "DUT CPUs",
    "generator": "generator CPU",
    "server": "server CPU",
    "host": "host CPU",
    "machine_cpus": "machine CPUs",
    "round_trips": "round trips",
    "not_measured": "not measured",
}


@dataclass(frozen=True)
class LinkUse:
    """One shaped direction over a test: mean utilization, saturated in most rounds."""

    link: str
    sender: str
    rate_bps: float | None
    utilization: float
    saturated: bool


@dataclass
class Evidence:
    """What one row's rounds measured (means over its rounds)."""

    placement: str = "shared"  # one | split | shared | map | remote
    cpus: int = 1  # how many CPUs the testbed's work may use
    host_pct: dict[str, float] = field(default_factory=dict)  # % of one CPU, window
    roles: dict[str, str] = field(default_factory=dict)  # host -> generator|server|dut|other
    # host -> the most of one CPU it may use, % (its CPU quota); absent: 100
    caps: dict[str, float] = field(default_factory=dict)
    ksoftirqd_pct: float = 0.0  # the kernel's deferred softirq threads, % of one CPU
    busy_pct: float | None = None  # the testbed's CPUs busy (exact), % of their capacity
    others_pct: float | None = None  # ... of which other processes, % of one CPU
    dut_cpu_busy_pct: float | None = None  # placement split: the DUT's CPUs, busiest
    links: list[LinkUse] = field(default_factory=list)
    censored: str | None = None  # "below" | "at_least": every search censored
    ceiling: str | None = None  # at_least: the trial the tool could not run, why
    asked: float | None = None  # open loop: the offered rate
    achieved: float | None = None  # ... and the rate reached


@dataclass(frozen=True)
class Bottleneck:
    kind: str  # a key of SHORT
    text: str  # what the report prints in full
    host: str | None = None

    @property
    def short(self) -> str:
        what = SHORT.get(self.kind, self.kind)
        if self.kind == "link" and self.host:
            return f"link {self.host}"
        if self.kind == "host" and self.host:
            return f"{self.host} CPU"
        return what

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "short": self.short, "text": self.text, "host": self.host}


def _pct(x: float) -> str:
    return f"{x:.0f} %"


def _shares(host_pct: Mapping[str, float]) -> str:
    ranked = sorted(host_pct.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{h} {_pct(v)}" for h, v in ranked if v >= 0.5)


def _rate(bps: float | None) -> str:
    if not bps:
        return "?"
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g} {unit}"
    return f"{bps:g} bit/s"


def bottleneck(e: Evidence) -> Bottleneck:
    """The row's limit, by the rule in this module's docstring."""
    if e.censored == "at_least" and e.ceiling:
        return Bottleneck("tool_limit", f"the tool's own limit: {e.ceiling}")
    if e.censored == "at_least":
        return Bottleneck("search_bound", "the search's range: its highest value passed")
    if e.censored == "below":
        return Bottleneck("search_bound", "the search's range: its lowest value already failed")
    if e.asked and e.achieved is not None and e.achieved >= OFFERED_MET * e.asked:
        return Bottleneck(
            "offered",
            f"the offered rate (open loop, {e.achieved:,.0f} of {e.asked:,.0f}/s): nothing "
            "saturated",
        )
    saturated = [u for u in e.links if u.saturated]
    if saturated:
        top = max(saturated, key=lambda u: u.utilization)
        return Bottleneck(
            "link",
            f"link {top.link} ({_rate(top.rate_bps)}, from {top.sender}) at "
            f"{_pct(top.utilization * 100)} of its rate",
            host=top.link,
        )
    if not e.host_pct:
        return Bottleneck("not_measured", "not measured: no CPU was counted on these hosts")
    total = sum(e.host_pct.values()) + e.ksoftirqd_pct
    busy = max(total, e.busy_pct or 0.0)
    if e.placement == "one" and busy >= CPU_SATURATED_PCT:
        parts = {**e.host_pct, "ksoftirqd": e.ksoftirqd_pct}
        if e.others_pct is not None and e.others_pct >= 5:
            parts["other processes"] = e.others_pct
        return Bottleneck(
            "one_cpu",
            f"the one CPU the whole path shares, {_pct(busy)} busy ({_shares(parts)})",
        )
    by_role = sorted(e.host_pct.items(), key=lambda kv: -kv[1])

    def full(host: str, pct: float) -> bool:
        cap = e.caps.get(host)
        if cap is None:
            return pct >= CPU_SATURATED_PCT
        return pct >= QUOTA_SATURATED_PCT / 100.0 * cap

    def at(host: str, pct: float) -> str:
        cap = e.caps.get(host)
        return f"{host} at {_pct(pct)} of a CPU" + (
            f" (its quota {_pct(cap)})" if cap is not None else ""
        )

    for role, kind in (("dut", "dut"), ("generator", "generator"), ("server", "server")):
        for host, pct in by_role:
            if e.roles.get(host) == role and full(host, pct):
                what = {
                    "dut": "the DUT's processes (a user-space mechanism's daemons)",
                    "generator": "the generator's CPU",
                    "server": "the server's CPU",
                }[kind]
                return Bottleneck(kind, f"{what}: {at(host, pct)}", host=host)
        dut_busy = e.dut_cpu_busy_pct
        if role == "dut" and dut_busy is not None and dut_busy >= CPU_SATURATED_PCT:
            return Bottleneck("dut_cpus", f"the DUT's own CPUs, {_pct(dut_busy)} busy")
    for host, pct in by_role:
        if full(host, pct):
            return Bottleneck("host", f"{host}'s CPU: {at(host, pct)}", host=host)
    if e.placement != "one" and total >= CPU_SATURATED_PCT * max(1, e.cpus):
        return Bottleneck(
            "machine_cpus",
            f"the machine's {e.cpus} CPUs, {_pct(total)} of one CPU busy ({_shares(e.host_pct)})",
        )
    largest = _shares(dict(by_role[:2]))
    return Bottleneck(
        "round_trips",
        f"no CPU or link at its limit (largest: {largest}): the rate is set by waiting "
        "(round trips, wake-ups)",
    )


def comparison(baseline: Bottleneck, variant: Bottleneck) -> str | None:
    """What a comparison limited by the same non-DUT thing on both sides cannot show,
    and what to change (None: the comparison can show the mechanism's cost)."""
    if baseline.kind != variant.kind or baseline.kind not in NOT_THE_MECHANISM:
        return None
    return NOT_THE_MECHANISM[baseline.kind]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
