"""Document 002's NIC firewall rule sets (rules/seed002-nicfw-*.rules) and the scenarios
that use them: every file is what `nicfw_rules` writes (so the sets can be regenerated
and stay alike), parses in secperf's rule subset, holds exactly N header-only rules,
and drops the flood's port 9 only in the "deny" class; the scenarios name files that
exist and keep the regime (the DUT on a CPU of its own, under a quota)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from secperf import ips_rules
from secperf.mechanisms.base import FLOOD_ALLOWED_PORT
from secperf.workloads.parts.flood import FLOOD_DENIED_PORT

ROOT = Path(__file__).resolve().parents[2]
SIZES = (1, 8, 16, 32, 64, 256, 1024)
SCENARIOS = ("seed002-flood-tolerance.toml", "seed002-flood-tolerance-quick.toml")


def nicfw_rules(n: int, cls: str) -> str:
    """The N-rule set of class "allow" (the flood's port 9 passes) or "deny"."""
    ports, what = ("19", "permits the flood (port 9)")
    if cls == "deny":
        ports, what = "[9,19]", "denies the flood (port 9)"
    lines = [
        f"# Document 002's NIC firewall as a secperf-nfq packet filter: {n} rule(s); "
        f"the set {what}.",
        "# Header-only rules: secperf-nfq checks every one against every packet (no content,",
        "# so no Hyperscan scan), as the EFW walked its rule list. The generated entries drop",
        "# sources in 198.19.0.0/17, which no testbed host uses; the last rule drops the flood",
        "# ports the set denies. Everything else is accepted (secperf-nfq's default verdict).",
        "# Written by nicfw_rules in tests/unit/test_seed002_nicfw.py.",
    ]
    sid = 2_002_000
    for i in range(n - 1):
        proto = "tcp" if i % 2 == 0 else "udp"
        lines.append(
            f"drop {proto} 198.19.{i // 250}.{i % 250 + 1} any -> any {10000 + i} "
            f'(msg:"seed002 generated {i}"; sid:{sid + i};)'
        )
    lines.append(f'drop tcp any any -> any {ports} (msg:"seed002 denied ports"; sid:{sid + 9000};)')
    return "\n".join(lines) + "\n"


def path(n: int, cls: str) -> Path:
    return ROOT / "rules" / f"seed002-nicfw-{n}-{cls}.rules"


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("cls", ["allow", "deny"])
def test_rule_set_is_generated_and_parses(n: int, cls: str) -> None:
    assert path(n, cls).read_text() == nicfw_rules(n, cls)
    rules = ips_rules.parse_rules(path(n, cls))
    assert len(rules) == n
    assert all(r.action == "drop" and not r.patterns for r in rules)
    last = rules[-1]
    dropped = {p for lo, hi in last.dport for p in range(lo, hi + 1)}
    assert FLOOD_DENIED_PORT in dropped
    assert (FLOOD_ALLOWED_PORT in dropped) == (cls == "deny")
    # the generated ones match no testbed source
    assert all(r.src and all(a.startswith("198.19.") for a in r.src) for r in rules[:-1])


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenarios_name_existing_rule_sets_and_keep_the_regime(name: str) -> None:
    scenario = ROOT / "scenarios" / name
    data = tomllib.loads(scenario.read_text())
    testbed = data["testbed"]
    assert testbed["cpu_quota"]["dut"] < 1
    assert testbed["cpus"]["dut"] not in {testbed["cpus"][h] for h in ("client", "server")}
    files = [
        m["rules"] for v in data["variants"].values() for m in v["mechanisms"] if m["kind"] == "ips"
    ]
    assert files
    for f in files:
        assert (scenario.parent / f).resolve().is_file(), f
