"""`secperf review` on rule sets no one here wrote (rules/public: ferm's own examples,
compiled by ferm, and the rule set ufw loads), with the command docs/ruleset-review.md
gives: a three-legged router (LAN, internet, DMZ; SNAT, DNAT, IPsec) before and after a
change, a workstation against a web server, and ufw's user chains before and after three
`ufw allow`s, and the nftables rule set firewalld writes for a router (zones on three
interfaces, a blocklist ipset as a named set, masquerade, port forwards, policies)
before and after a change. Each review reaches every accepting rule it has a flow for, says
which rules no flow can exercise and why, lists the behaviour changes, names the hot
rules and functions, and gives a verdict per metric. Not about rates: two short rounds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns

PUBLIC = Path(__file__).parent.parent.parent / "rules" / "public"
ROUTER = ("dmz-router.rules", "dmz-router-https.rules")
ROUTER_IFACES = ("--interfaces", "eth0=client,eth1=server,eth2=dmz")
HOST = ("workstation.rules", "webserver.rules")
UFW = ("ufw-host.rules", "ufw-host-web.rules")
FIREWALLD = ("firewalld-router.nft", "firewalld-router-changed.nft")
FIREWALLD_IFACES = ("--interfaces", "lan0=client,wan0=server,dmz0=dmz")
SHORT = ("--rounds", "2")


def review(tmp_path: Path, files: tuple[str, str], *extra: str) -> tuple[str, dict[str, Any]]:
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "secperf", "review"),
            *(str(PUBLIC / f) for f in files),
            *extra,
            *SHORT,
            *("--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    return text, json.loads((only_run(out) / "summary.json").read_text())


def changed(summary: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each changed flow's description -> (current verdict, proposed verdict)."""
    return {
        c["describe"]: (c["variants"]["current"]["verdict"], c["variants"]["proposed"]["verdict"])
        for c in summary["behaviour"]["changes"]
    }


def assert_reviewed(text: str, summary: dict[str, Any], accepting: int | tuple[int, int]) -> None:
    b = summary["behaviour"]
    each = accepting if isinstance(accepting, tuple) else (accepting, accepting)
    for variant, n in zip(("current", "proposed"), each, strict=True):
        cover = b["coverage"][variant]
        assert cover == {"accepting_rules": n, "hit": n}, b["coverage"]
        assert variant not in b["misses"], b["misses"]
        # a probe for a denying rule stays denied in both
        for f in b["flows"]:
            if f["expect"] == "deny" and f["variants"].get(variant):
                assert f["variants"][variant]["verdict"] == "deny", f
    assert text.index("decided differently") < text.index("The review — proposed against current")
    # a verdict per metric, proposed against current
    versus = text[text.index("The review — proposed against current") :]
    assert "Flow rate" in versus.split("\n\n")[0] and "Service demand" in versus.split("\n\n")[0]
    # hot rules by file:line, and the functions where the CPU grew
    where = text[text.index("Where the cost goes") :]
    flat = " ".join(where.split())  # the console wraps long lines: read the words
    for variant in ("current", "proposed"):
        mine = flat[flat.index(f"{variant} (") :].split(" (flows): ")[1]
        assert "hottest rule" in mine and "rules walked a packet" in mine, where
    assert flat.count("CPU grew most in") == 2, where
    rows = summary.get("attribution") or []
    assert {r["variant"] for r in rows} >= {"current", "proposed"}


def test_the_public_router_before_and_after_its_change(tmp_path: Path) -> None:
    text, summary = review(tmp_path, ROUTER, *ROUTER_IFACES)
    # 21 accepting rules each (filter accepts, SNAT, DNAT) have a flow; ESP and AH do not
    assert_reviewed(text, summary, accepting=21)
    assert changed(summary) == {
        "tcp 198.51.100.1 -> 192.168.1.3:25": ("accept", "deny"),  # the mail server's forward
        "tcp 198.51.100.1 -> 193.43.91.203:25": ("accept", "deny"),  # ... and its DNAT
        "tcp 198.51.100.1 -> 192.168.1.2:443": ("deny", "accept"),  # HTTPS to the web server
        "tcp 198.51.100.1 -> 193.43.91.203:443": ("deny", "accept"),
    }
    never = summary["behaviour"]["unexercised"]
    for proto in ("esp", "ah"):
        assert any(f"protocol {proto} is not sent" in n for n in never), never
    assert "rule(s) no coverage flow can exercise" in text
    # the DNAT'd flows were answered in the DMZ, and the SNAT address is the router's
    meta = json.loads((only_run(tmp_path / "results") / "run.json").read_text())
    flows = {f["name"]: f for f in meta["rule_set_map"]["flows"]}
    dnat = [f for f in flows.values() if f.get("served_by")]
    assert dnat and all(f["server"] == "dmz" for f in dnat), dnat
    assert meta["topology"]["extra_addresses"]["dut"]


def test_a_public_workstation_against_a_public_web_server(tmp_path: Path) -> None:
    text, summary = review(tmp_path, HOST)
    # workstation: ping, ssh, ident; web server: ping, ssh from its network, http, https, smtp
    b = summary["behaviour"]
    assert b["coverage"]["current"] == {"accepting_rules": 3, "hit": 3}, b["coverage"]
    assert b["coverage"]["proposed"] == {"accepting_rules": 5, "hit": 5}, b["coverage"]
    got = changed(summary)
    assert got["tcp 198.51.100.1 -> 198.51.100.2:113"] == ("accept", "deny")  # ident closed
    for port in (80, 443, 25):
        assert got[f"tcp 198.51.100.1 -> 198.51.100.2:{port}"] == ("deny", "accept")
    assert "decided differently" in text and "Where the cost goes" in text


def test_ufws_own_rule_set_before_and_after_three_ufw_commands(tmp_path: Path) -> None:
    text, summary = review(tmp_path, UFW)
    # through ufw's user chains: ping, DHCP (from port 67), mDNS, SSDP, SSH; + HTTP(S), 5432
    b = summary["behaviour"]
    assert b["coverage"]["current"] == {"accepting_rules": 6, "hit": 6}, b
    assert b["coverage"]["proposed"] == {"accepting_rules": 8, "hit": 8}, b
    assert not b["misses"], b["misses"]
    got = changed(summary)
    assert got["tcp 198.51.100.1 -> 198.51.100.2:80"] == ("deny", "accept")
    assert got["tcp 10.8.0.1 -> 198.51.100.2:5432"] == ("deny", "accept")
    assert "addrtype dst-type BROADCAST" in text and "Where the cost goes" in text


def test_firewalld_s_router_before_and_after_its_change(tmp_path: Path) -> None:
    text, summary = review(tmp_path, FIREWALLD, *FIREWALLD_IFACES)
    # every zone's services, the policies, both port forwards and masquerade are hit;
    # the proposed set lost DNS (two rules) and gained a port forward
    assert_reviewed(text, summary, accepting=(16, 15))
    assert changed(summary) == {
        # DNS removed from the internal zone
        "tcp 198.51.100.3 -> 192.0.2.1:53": ("accept", "deny"),
        "udp 198.51.100.3 -> 192.0.2.1:53": ("accept", "deny"),
        # the new port forward 8080 -> 10.0.10.81:80
        "tcp 198.51.100.2 -> 192.0.2.1:8080": ("deny", "accept"),
        # 198.51.100.1 added to the blocklist: its ping, SSH and forwarded web now dropped
        "icmp 198.51.100.1 -> 192.0.2.1": ("accept", "deny"),
        "tcp 198.51.100.1 -> 192.0.2.1:22": ("accept", "deny"),
        "tcp 198.51.100.1 -> 192.0.2.1:80": ("accept", "deny"),
        "tcp 198.51.100.1 -> 192.0.2.1:443": ("accept", "deny"),
    }
    # the named set's zone dispatch (`ip saddr @blocklist goto ...`) met real traffic
    for variant, name in zip(("current", "proposed"), FIREWALLD, strict=True):
        lines = (PUBLIC / name).read_text().splitlines()
        by_set = {f":{n}" for n, t in enumerate(lines, 1) if "ip saddr @blocklist goto" in t}
        met = [
            f["describe"]
            for f in summary["behaviour"]["flows"]
            if any(
                m.endswith(f"{name}{line}")
                for m in f["variants"].get(variant, {}).get("matched", [])
                for line in by_set
            )
        ]
        assert met, (variant, by_set)
    never = summary["behaviour"]["unexercised"]
    flat = " ".join(" ".join(never).split())
    # the reverse-path check, intra-zone forwarding, the INPUT accept of DNAT to itself
    assert "fib saddr . mark . iif oif missing drop" in flat, never
    assert "it forwards between hosts behind one interface (lan0)" in flat, never
    assert "DNAT'd to the DUT itself" in flat, never
    # the flows the proposed set drops (the blocklisted host's) go on the probes' schedule
    # there, so their timeouts starve no other flow: every variant's policy checks hold
    for entry in summary["checks"]:
        assert entry["passed_rounds"] == entry["rounds"], entry
    # the forwarded web flows were answered in the DMZ
    meta = json.loads((only_run(tmp_path / "results") / "run.json").read_text())
    dnat = [f for f in meta["rule_set_map"]["flows"] if f.get("served_by")]
    assert dnat and all(f["server"] == "dmz" for f in dnat), dnat
