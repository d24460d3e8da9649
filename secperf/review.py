"""`secperf review CURRENT PROPOSED`: a change to a rule set, measured as a scenario.

The review is an ordinary scenario, written here from the two files: both rule sets as
variants of one interleaved run (the `ruleset` mechanism: each file loaded as written
on a DUT whose interfaces carry the rule set's names, addresses mapped into the
testbed), against plain forwarding, with traffic that exercises them (the `flows`
workload: flows derived from both rule sets, or the user's own flow file). What the
review adds to a run's report is its order: behaviour changes first (flows the two rule
sets decide differently), then "proposed vs current" per metric, paired by round.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from secperf.errors import ScenarioError
from secperf.report.answer import headline, verdicts
from secperf.report.gate import run_figures
from secperf.results.rundir import RunDir

CURRENT, PROPOSED, SUGGESTED = "current", "proposed", "suggested"
TRAFFIC_KINDS = ("coverage",)
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")


def rule_format(path: Path) -> str:
    """nft for .nft files (and files that look like nft), nft-json for .json (libnftables
    JSON, `nft -j list ruleset`), iptables for iptables-save."""
    if path.suffix == ".nft":
        return "nft"
    if path.suffix == ".json":
        return "nft-json"
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError as exc:
        raise ScenarioError(f"cannot read the rule file: {exc.strerror}", where=str(path)) from None
    if re.search(r"^\*(filter|nat|mangle|raw)\s*$", head, re.M) or "COMMIT" in head:
        return "iptables"
    return "nft"


def rule_text(path: Path) -> str:
    """The file's text; for libnftables JSON, one line per rule of what the interface
    guess reads (`iifname "lan0" oifname "wan0" masquerade`)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if rule_format(path) != "nft-json":
        return text
    try:
        items = json.loads(text).get("nftables", [])
    except (json.JSONDecodeError, AttributeError):
        return ""
    lines = []
    for item in items:
        rule = item.get("rule") if isinstance(item, dict) else None
        if not isinstance(rule, dict):
            continue
        words = []
        for stmt in rule.get("expr", []):
            match = stmt.get("match") if isinstance(stmt, dict) else None
            if isinstance(match, dict) and isinstance(match.get("left"), dict):
                key = (match["left"].get("meta") or {}).get("key")
                if key in ("iifname", "oifname") and isinstance(match.get("right"), str):
                    words.append(f'{key} "{match["right"]}"')
            elif isinstance(stmt, dict) and ("masquerade" in stmt or "snat" in stmt):
                words.append("masquerade")
        lines.append(" ".join(words))
    return "\n".join(lines) + "\n"


def interface_names(path: Path) -> list[str]:
    """The interface names a rule file matches on (iifname/oifname, -i/-o), in order."""
    text = rule_text(path)
    names: list[str] = []
    for m in re.finditer(
        r'\b(?:iifname|oifname|iif|oif)\s+(?:!=\s*)?"?([A-Za-z0-9_.:@-]+)"?', text
    ):
        names.append(m.group(1))
    for m in re.finditer(
        r"(?:^|\s)(?:-i|-o|--in-interface|--out-interface)\s+(?:!\s+)?(\S+)", text
    ):
        names.append(m.group(1))
    return [n for n in dict.fromkeys(names) if n != "lo" and not n.startswith("@") and "*" not in n]


def guess_interfaces(files: Sequence[Path]) -> dict[str, str]:
    """Which testbed host lies behind each interface the rule sets name, when the user
    did not say: the interface a `masquerade` (or SNAT) goes out of, else the one the
    rules drop inbound traffic from, faces the outside (the server); the others face
    the inside (the client). Two names at most: more need `--interfaces`."""
    names: list[str] = []
    outside: list[str] = []
    for path in files:
        names += [n for n in interface_names(path) if n not in names]
        text = rule_text(path)
        for m in re.finditer(r'oifname\s+"?([\w.:@-]+)"?[^\n;]*\b(?:masquerade|snat)\b', text):
            outside.append(m.group(1))
        for m in re.finditer(r"-o\s+(\S+)[^\n]*-j\s+(?:MASQUERADE|SNAT)", text):
            outside.append(m.group(1))
    if not names:
        return {}
    if len(names) > 2:
        raise ScenarioError(
            f"the rule sets name {len(names)} interfaces ({', '.join(names)}): "
            "which host lies behind each cannot be guessed",
            where=", ".join(str(f) for f in files),
            fix='say it: --interfaces "lan0=client,wan0=server" (the testbed has a client '
            "and a server host beside the DUT)",
        )
    wan = next((n for n in outside if n in names), names[-1])
    return {n: ("server" if n == wan else "client") for n in names}


def parse_interfaces(text: str) -> dict[str, str]:
    """`lan0=client,wan0=server` -> {"lan0": "client", "wan0": "server"}."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, host = part.partition("=")
        if not sep or not _IFNAME.match(name.strip()) or not host.strip():
            raise ScenarioError(
                f"--interfaces: {part!r} is not NAME=HOST",
                fix='write e.g. --interfaces "lan0=client,wan0=server"',
            )
        out[name.strip()] = host.strip()
    return out


def review_scenario(
    current: Path,
    proposed: Path,
    *,
    traffic: str = "coverage",
    interfaces: Mapping[str, str] | None = None,
    duration: str = "1s",
    budget: float | None = None,
    rounds: int | None = None,
    suggested: Path | None = None,
) -> dict[str, Any]:
    """The scenario the review runs (a dict the scenario loader validates); `suggested`,
    a rewrite of the proposed rule set (secperf.rulesets.suggest), is a third variant."""
    for path in (current, proposed):
        if not path.is_file():
            raise ScenarioError(
                "rule file not found", where=str(path), fix="give the path of a rule file"
            )
    ifaces = dict(interfaces) if interfaces else guess_interfaces([current, proposed])
    if traffic not in TRAFFIC_KINDS:
        flow_file = Path(traffic)
        if not flow_file.is_file():
            raise ScenarioError(
                "traffic file not found",
                where=traffic,
                fix="give `coverage` (flows derived from the rules) or a CSV, conntrack "
                "dump or pcap file",
            )
        traffic = str(flow_file.resolve())

    def variant(path: Path, what: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "kind": "ruleset",
            "file": str(path.resolve()),
            "format": rule_format(path),
        }
        if ifaces:
            entry["interfaces"] = ifaces
        return {"description": f"the {what} rule set ({path.name})", "mechanisms": [entry]}

    scenario: dict[str, Any] = {
        "name": "review",
        "description": f"{proposed.name} (proposed) against {current.name} (current)",
        "variants": {CURRENT: variant(current, CURRENT), PROPOSED: variant(proposed, PROPOSED)},
        "workloads": [{"kind": "flows", "name": "flows", "traffic": traffic, "duration": duration}],
    }
    if suggested is not None:
        scenario["variants"][SUGGESTED] = variant(suggested, "suggested rewrite of the proposed")
    repeat: dict[str, Any] = {}
    if budget is not None:
        repeat["budget"] = budget
    if rounds is not None:
        repeat["min"] = repeat["max"] = rounds
    if repeat:
        scenario["repeat"] = repeat
    extra = [h for h in dict.fromkeys(ifaces.values()) if h not in STANDARD_HOSTS]
    if extra:
        scenario["topology"] = topology_for(extra)
    return scenario


STANDARD_HOSTS = ("client", "server")


def topology_for(extra: Sequence[str]) -> dict[str, Any]:
    """The standard plan (client – dut – server) with one more host linked to the DUT
    for each other name the interfaces map gives (`eth2=dmz`: a router's third leg).
    Each answers flows and sends them (a DMZ server, or a zone that reaches the others)."""
    hosts: list[dict[str, Any]] = [
        {"name": "client", "role": "client", "zone": "inside"},
        {"name": "dut", "role": "dut"},
        {"name": "server", "role": "server", "zone": "outside"},
    ]
    for name in extra:
        if not re.match(r"^[a-z][a-z0-9-]{0,19}$", name) or name == "dut":
            raise ScenarioError(
                f"--interfaces: host {name!r} cannot be a testbed host",
                fix="name it with a lowercase letter then up to 19 letters, digits or -, "
                "not dut (e.g. eth2=dmz)",
            )
        hosts.append({"name": name, "role": "server", "zone": name})
    links = [{"between": ["dut", h["name"]]} for h in hosts if h["name"] != "dut"]
    return {"hosts": hosts, "links": links}


def versus_summary(summary: Mapping[str, Any], run: RunDir) -> dict[str, Any]:
    """The summary with each proposed headline row's degradation taken against the
    current rule set instead of the baseline, paired by round (as the gate pairs it)."""
    figures = run_figures(summary, run, where=str(run.path))
    rows: list[dict[str, Any]] = []
    for row in summary.get("rows") or []:
        if row.get("variant") != PROPOSED or not headline(row):
            continue
        est = figures.degradation(row, CURRENT)
        rows.append(
            {
                **row,
                "variant": f"{PROPOSED} vs {CURRENT}",
                "degradation_pct": est.mean,
                "degradation_ci_low": est.low,
                "degradation_ci_high": est.high,
            }
        )
    return {**summary, "rows": rows}


def versus_lines(summary: Mapping[str, Any], run: RunDir) -> list[str]:
    """ "proposed vs current", one line per headline metric, in the answer's words."""
    found = verdicts(versus_summary(summary, run))
    if not found:
        return []
    lines = [f"The review — {PROPOSED} against {CURRENT}, paired by round (positive = worse)"]
    for v in found:
        limit = f"   {v.limited_by}" if v.limited_by else ""
        lines.append(f"  {v.where:<12} {v.metric_label:<18} {v.text}{limit}")
    return lines
