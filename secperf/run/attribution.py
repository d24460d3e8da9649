"""The attribution round's parts: which hosts' rules are counted, and how a rule is named.

After a point's measured rounds (and its softirq round), every configuration is
measured twice more, outside the figures (records with `phase: "attribution"`):

1. **profiled**: `perf record -e cpu-clock -g` over the test (secperf.run.profile),
   the rule set as loaded;
2. **counted**: every nft rule set on the hosts that carry the variant's packet
   filters replaced by its counted copy (secperf.run.rulecount) once the variant is
   loaded, read back after the test and restored; legacy iptables rules read with
   `iptables-legacy-save -c`. The baseline (plain forwarding) has no rules to count.

Two tests, not one: a counter on every rule adds an expression to each rule a packet
walks, so a profile taken with them would be of another rule set than the one
measured. The separate test costs one test per configuration; it keeps the profile
of the rule set as measured. (What perf or the counters cost a test is not measured
here: neither round's rates enter a figure.)

A rule is named by the mechanism that loaded it where it knows its source
(`Mechanism.rule_source`: a rule set's file:line), else by its text.
"""

from __future__ import annotations

from typing import Any

from secperf.plan import Variant
from secperf.run.rulecount import CountedRules, Where, legacy_record
from secperf.testbed.placement import Placement
from secperf.testbed.testbed import Testbed

NFT_BACKENDS = frozenset({"nft", "iptables-nft"})


def profiled_cpus(placement: Placement) -> list[int] | None:
    """The CPUs the profile samples: the forwarding hosts' own where the placement
    gives them theirs (`split`: the DUT's CPU, its receive processing steered there),
    else the testbed's where it is confined to them; None: every CPU."""
    if not placement.confined:
        return None
    if placement.rps:
        return sorted({cpu for cpus in placement.rps.values() for cpu in cpus})
    return list(placement.testbed_cpus) or None


def counted_hosts(testbed: Testbed, variant: Variant) -> list[str]:
    """The variant's hosts that carry packet filters and run commands."""
    return [
        name
        for name in variant.hosts()
        if variant.backends_on(name) - {"ipset"} and testbed.host(name).runs_commands
    ]


def rule_where(variant: Variant, host: str) -> Where:
    """The source of a rule on `host` as the variant's mechanisms there know it."""
    mechs = [mech for mech, ctx in variant.mechanisms if host in ctx.hosts]

    def where(family: str, table: str, chain: str, index: int) -> str | None:
        for mech in mechs:
            found = mech.rule_source(family, table, chain, index)
            if found is not None:
                return found
        return None

    return where


class Counting:
    """The counted test of one variant: `start` once it is loaded, `finish` after."""

    def __init__(self, testbed: Testbed, variant: Variant, family: int) -> None:
        self.testbed = testbed
        self.variant = variant
        self.family = family
        self.nft: list[CountedRules] = []
        self.hosts = counted_hosts(testbed, variant)

    def start(self) -> None:
        for name in self.hosts:
            if self.variant.backends_on(name) & NFT_BACKENDS:
                counted = CountedRules(
                    self.testbed.host(name), rule_where(self.variant, name), name
                )
                if counted.start():
                    self.nft.append(counted)

    def finish(self) -> list[dict[str, Any]]:
        """The `rule_counts` records; a MechanismError when a rule set is not back."""
        records = [c.finish() for c in self.nft]
        for name in self.hosts:
            if "iptables-legacy" in self.variant.backends_on(name):
                rec = legacy_record(
                    self.testbed.host(name), self.family, rule_where(self.variant, name), name
                )
                if rec is not None:
                    records.append(rec)
        return records
