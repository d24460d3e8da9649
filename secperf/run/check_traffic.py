"""`secperf check` of a rule-set review: does the traffic pass, before any measurement?

A scenario whose traffic is placed flows (TrafficPlan.flows) is checked on a throwaway
testbed: the plan's topology (the DUT's interfaces named as the rule set expects, the
mapped addresses on their hosts), each variant loaded in turn, one traced probe per
flow (secperf.run.verdict_probe). Each flow the variant would drop is named with the
rule that drops it (file:line); a variant that lets no flow through is an error, since
its run would measure nothing. The testbed is gone again when the check returns.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from secperf.errors import MechanismError
from secperf.mechanisms.base import reset_dut
from secperf.plan import BASELINE, Plan
from secperf.run.verdict_probe import placed_flows, probe_variant
from secperf.scenario.scenario import Scenario
from secperf.testbed.testbed import Testbed, new_prefix
from secperf.testbed.topology import DUT


@dataclass
class TrafficCheck:
    """What the probes found, per variant."""

    flows: int = 0
    dropped: dict[str, list[str]] = field(default_factory=dict)  # variant -> lines
    passed: dict[str, int] = field(default_factory=dict)  # variant -> flows through
    # variant -> (probes meant to be denied, those that were)
    probes: dict[str, tuple[int, int]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out: list[str] = []
        for variant, n in self.passed.items():
            drops = self.dropped.get(variant, [])
            meant, denied = self.probes.get(variant, (0, 0))
            out.append(
                f"{variant}: {n} of {self.flows} flows pass"
                + (f", {denied} of {meant} probes meant to be denied are" if meant else "")
                + (f"; {len(drops)} other flow(s) dropped:" if drops else "")
            )
            out += [f"  {d}" for d in drops]
        return out


def needs_traffic_check(plan: Plan) -> bool:
    return any(placed_flows(v.mechanisms) for v in plan.variants)


def check_traffic(sc: Scenario) -> TrafficCheck | None:
    """Probe every variant's decision on every flow (needs root); None when the scenario
    has no placed flows. Raises MechanismError when a variant lets no flow through."""
    plan = Plan.of(sc)
    result = TrafficCheck()
    with tempfile.TemporaryDirectory(prefix="secperf-check-") as tmp:
        prefix = new_prefix()
        plan.render(Path(tmp), prefix)
        if not needs_traffic_check(plan):
            return None
        with Testbed.build(plan.topology, prefix=prefix) as tb:
            hosts = {name: tb.host(name) for name in plan.topology.names}
            for variant in plan.variants:
                if variant.name == BASELINE:
                    continue
                for mech, ctx in variant.mechanisms:
                    mech.apply_group([tb.host(n) for n in ctx.hosts], ctx)
                try:
                    rows = probe_variant(
                        tb.host(DUT),
                        hosts,
                        variant.mechanisms,
                        f"secperf_{prefix}_trace",
                        plan.family,
                    )
                finally:
                    for mech, ctx in reversed(variant.mechanisms):
                        mech.release_group([tb.host(n) for n in ctx.hosts], ctx)
                    for name in variant.hosts():
                        reset_dut(tb.host(name), variant.backends_on(name))
                if rows is None:
                    continue
                result.flows = len(rows)
                through = [r for r in rows if r["verdict"] == "accept"]
                result.passed[variant.name] = len(through)
                meant = [r for r in rows if r.get("expect") == "deny"]
                result.probes[variant.name] = (
                    len(meant),
                    sum(r["verdict"] == "deny" for r in meant),
                )
                result.dropped[variant.name] = [
                    f"{r['flow']} {r['describe']}: {r['verdict']} ({r['decided_by']})"
                    + (
                        f" (derived for {r['derived_for']})"
                        if r.get("derived_for") and r.get("expect") == "accept"
                        else ""
                    )
                    for r in rows
                    if r["verdict"] not in ("accept", "not probed") and r.get("expect") != "deny"
                ]
                if not through:
                    raise MechanismError(
                        f"variant {variant.name} lets none of the {len(rows)} flows through: "
                        "its run would measure nothing\n  "
                        + "\n  ".join(result.dropped[variant.name][:10]),
                        where=str(sc.source) if sc.source else None,
                        fix="check the interfaces map (which host lies behind each name) and "
                        "the traffic: the rule that drops each flow is named above",
                    )
    return result
