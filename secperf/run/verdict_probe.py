"""Each variant's decision on every flow of a rule-set review, before any measurement.

When the scenario's traffic is placed flows (a rule-set review: TrafficPlan.flows),
every variant, once loaded, gets one traced probe per flow (secperf.rulesets.verdicts):
what it decides (accept / deny) and the rule that decides it, named by its file:line
when a mechanism knows its source (Mechanism.rule_source), else by its place in the
loaded rule set. The result goes to run.json under `verdicts` (variant -> flows); the
summary's `behaviour` section compares the variants flow by flow from it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from secperf.mechanisms.base import Mechanism, MechanismContext
from secperf.rulesets.model import PlacedFlow
from secperf.rulesets.verdicts import Decision, probe
from secperf.testbed.hosts import Host


def placed_flows(
    mechanisms: Sequence[tuple[Mechanism, MechanismContext]],
) -> tuple[PlacedFlow, ...]:
    """The review's placed flows, as the variant's mechanisms were rendered for them."""
    for _mech, ctx in mechanisms:
        if ctx.plan.flows:
            return ctx.plan.flows
    return ()


def chain_positions(dut: Host) -> dict[tuple[str, str, str, int], int]:
    """(family, table, chain, handle) -> the rule's 0-based place in its chain, as loaded."""
    out = dut.run(["nft", "-j", "-a", "list", "ruleset"]).stdout
    seen: dict[tuple[str, str, str], int] = {}
    places: dict[tuple[str, str, str, int], int] = {}
    for obj in json.loads(out or '{"nftables": []}').get("nftables", []):
        rule = obj.get("rule")
        if not rule:
            continue
        chain = (rule["family"], rule["table"], rule["chain"])
        places[(*chain, int(rule["handle"]))] = seen.get(chain, 0)
        seen[chain] = seen.get(chain, 0) + 1
    return places


def rule_name(
    family: str,
    table: str,
    chain: str,
    handle: int,
    places: dict[tuple[str, str, str, int], int],
    mechanisms: Sequence[tuple[Mechanism, MechanismContext]],
) -> str:
    """A loaded rule as a person reads it: its file:line where a mechanism knows it."""
    index = places.get((family, table, chain, handle))
    if index is None:
        return f"{family} {table} {chain}, handle {handle}"
    for mech, _ctx in mechanisms:
        where = mech.rule_source(family, table, chain, index)
        if where is not None:
            return where
    return f"{family} {table} {chain}, rule {index + 1}"


def decided_by(
    d: Decision,
    places: dict[tuple[str, str, str, int], int],
    mechanisms: Sequence[tuple[Mechanism, MechanismContext]],
) -> str:
    """Where a decision was taken, as a person reads it."""
    if d.verdict == "unseen":
        return "never reached the DUT"
    if d.verdict == "not probed":
        return "not probed: no probe of this kind is sent (an ICMPv6 echo)"
    if d.chain is None or d.family is None or d.table is None:
        return "no rule: every chain's policy accepts"
    if d.handle is None:
        return f"the policy of {d.family} {d.table} {d.chain}"
    return rule_name(d.family, d.table, d.chain, d.handle, places, mechanisms)


def probe_variant(
    dut: Host,
    hosts: dict[str, Host],
    mechanisms: Sequence[tuple[Mechanism, MechanismContext]],
    table: str,
    family: int,
) -> list[dict[str, Any]] | None:
    """The loaded variant's decision on each flow (None: not a rule-set review)."""
    placed = placed_flows(mechanisms)
    if not placed:
        return None
    decisions = probe(dut, hosts, placed, table=table, family=family)
    places = chain_positions(dut)
    own = {f for mech, _ in mechanisms for f in mech.rule_files()}
    rows: list[dict[str, Any]] = []
    for pf in placed:
        d = decisions[pf.flow.name]
        mine = pf.flow.rule_in(own)
        rule = mine or pf.flow.rule
        rows.append(
            {
                "flow": pf.flow.name,
                "describe": pf.flow.describe(),
                "expect": pf.flow.expect,
                "derived_for": None if rule is None else rule.where(),
                # derived from this variant's own rule set: its verdict is expected here
                "own": pf.flow.rule is None or mine is not None,
                "origin": pf.flow.origin,
                **d.as_dict(),
                "decided_by": decided_by(d, places, mechanisms),
                # the rules it matched on its way: did it reach the rule it was made for?
                "matched": [rule_name(*m, places, mechanisms) for m in d.matched],
            }
        )
    return rows
