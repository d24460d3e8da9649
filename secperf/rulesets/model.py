"""What a rule set and a flow are, for every part of secperf that reads them.

A `RuleSet` is a user's file as the tool that loads it understood it: nftables files
are parsed by nft itself (libnftables' JSON, `nft -j list ruleset` after loading the
file in a throwaway network namespace), iptables-save files line by line. Every rule
keeps where it was written (`RuleRef`), so each message, hot rule and behaviour change
names its file:line.

A `Flow` is one kind of connection of the measured traffic, in the rule set's own
addresses (production addresses: 10.1.5.200, not the testbed's); `AddressMap.flow`
turns it into testbed addresses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Format = Literal["nft", "iptables"]
# A rule file as given: nft text, libnftables JSON (`nft -j list ruleset`), iptables-save.
FileFormat = Literal["nft", "nft-json", "iptables"]
# A rule's terminal decision, or what it does when it is not terminal.
Verdict = Literal[
    "accept",
    "drop",
    "reject",
    "jump",
    "goto",
    "return",
    "continue",  # matches, counts, logs, marks: the packet goes on to the next rule
    "dnat",
    "snat",
    "masquerade",
    "redirect",
    "queue",
    "vmap",  # a verdict map: the verdict is the matching element's (see Rule.expr)
]
DENYING: frozenset[str] = frozenset({"drop", "reject"})
# NAT statements end evaluation in their chain the way accept does.
ACCEPTING: frozenset[str] = frozenset({"accept", "dnat", "snat", "masquerade", "redirect"})


@dataclass(frozen=True)
class RuleRef:
    """Where a rule stands: in its file (line, when known) and in the loaded rule set."""

    file: Path
    line: int | None
    family: str  # nft family ("inet", "ip", "ip6", ...) or iptables' "ip"/"ip6"
    table: str
    chain: str
    index: int  # 0-based position in its chain
    handle: int | None = None  # nft's rule handle once loaded (None for iptables)

    def where(self) -> str:
        """`file:line`, or the file and the rule's place when the line is unknown."""
        if self.line is not None:
            return f"{self.file}:{self.line}"
        return f"{self.file} ({self.family} {self.table} {self.chain}, rule {self.index + 1})"

    def key(self) -> str:
        """A stable name of the rule within its rule set: FAMILY/TABLE/CHAIN#INDEX."""
        return f"{self.family}/{self.table}/{self.chain}#{self.index}"


@dataclass(frozen=True)
class Rule:
    ref: RuleRef
    verdict: Verdict
    # The chain a jump or goto enters; a NAT statement's target as written
    # ("10.1.5.200", "10.1.5.200:8080", "198.51.100.1-198.51.100.9").
    target: str | None
    # nft: the rule's libnftables JSON expressions; iptables: the rule's arguments
    # after the chain name (`-s 10.0.0.0/8 -p tcp --dport 22 -j ACCEPT` split).
    expr: tuple[Any, ...]
    text: str  # the rule as written (one line; continuation lines joined)


@dataclass(frozen=True)
class Chain:
    family: str
    table: str
    name: str
    hook: str | None  # "input", "forward", "prerouting", ...; None for a user chain
    type: str | None  # "filter", "nat", "route"
    priority: int | None
    policy: str | None  # "accept" / "drop" for a base chain
    rules: tuple[Rule, ...]
    line: int | None = None  # where the chain is declared


@dataclass
class RuleSet:
    """A loaded rule file: its chains in load order, the file's own objects, and what
    loading it warned about (an include glob that matched nothing)."""

    source: Path
    format: Format
    chains: tuple[Chain, ...]
    # nft: the `nftables` list of `nft -j -a list ruleset` (tables, chains, sets, maps,
    # rules, ...); iptables: the file's text.
    raw: Any
    files: tuple[Path, ...] = ()  # the file and every file it includes
    warnings: list[str] = field(default_factory=list)
    # Where each named set or map is declared, "file:line", by (family, table, name):
    # the place a message about its elements names.
    set_lines: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def rules(self) -> list[Rule]:
        return [r for c in self.chains for r in c.rules]

    def chain(self, family: str, table: str, name: str) -> Chain | None:
        for c in self.chains:
            if (c.family, c.table, c.name) == (family, table, name):
                return c
        return None

    def by_handle(self, family: str, table: str, handle: int) -> Rule | None:
        for r in self.rules():
            if (r.ref.family, r.ref.table, r.ref.handle) == (family, table, handle):
                return r
        return None


Protocol = Literal["tcp", "udp", "icmp"]
Expect = Literal["accept", "deny"]


@dataclass(frozen=True)
class Flow:
    """One kind of connection of the measured traffic, as the rule set sees it.

    Addresses are the rule set's own (before the map). `ingress`/`egress` are the
    interface names the rule set uses (the mechanism's `interfaces` key maps each to
    the testbed host behind it); `to_dut` marks a flow to the DUT's own address
    (input-chain rules). A TCP flow is a real connection (handshake, `request` bytes,
    `response` bytes, close), a UDP flow one datagram of `request` bytes answered by
    `response` bytes, an ICMP flow one echo request."""

    name: str  # stable within its traffic: "f1", "f2", ... or the user's label
    protocol: Protocol
    src: str
    dst: str
    dport: int | None
    ingress: str | None
    egress: str | None
    to_dut: bool = False
    sport: int | None = None
    request: int = 64
    response: int = 64
    weight: float = 1.0
    # What the rule set should do with it: a flow derived for an accepting rule is
    # expected through, a probe for a denying rule expected dropped; None for the
    # user's own traffic (its verdict is measured, not assumed).
    expect: Expect | None = None
    rule: RuleRef | None = None  # the rule it was derived for
    # The same flow derived for rules of other rule sets (a review's two files): each
    # variant expects its verdict from the rule of its own file.
    also_for: tuple[RuleRef, ...] = ()
    origin: str = "coverage"  # "coverage", "csv:LINE", "conntrack:LINE", "pcap:FILE"
    # After a DNAT: the address and port the flow really reaches (the rule set's own
    # address), so the testbed puts a server there.
    served_by: str | None = None
    served_port: int | None = None

    def describe(self) -> str:
        port = f":{self.dport}" if self.dport is not None else ""
        return f"{self.protocol} {self.src} -> {self.dst}{port}"

    def rule_in(self, files: Sequence[Path] | set[Path]) -> RuleRef | None:
        """The rule of `files` it was derived for (its own, or one it shares), if any."""
        for ref in (self.rule, *self.also_for):
            if ref is not None and ref.file in files:
                return ref
        return None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rule"] = None if self.rule is None else self.rule.where()
        out["also_for"] = [r.where() for r in self.also_for]
        return out


@dataclass(frozen=True)
class PlacedFlow:
    """A flow placed on the testbed: which host opens it from which testbed address,
    where it is sent, and which host answers it on which address and port (after a
    DNAT the server listens on the rewritten address, not on `dst`)."""

    flow: Flow
    client: str  # the testbed host that opens it (owns `src`)
    server: str  # the testbed host that answers (the DUT for a flow to the DUT)
    src: str  # testbed addresses, inside the map's range
    dst: str
    listen: str
    listen_port: int | None


@dataclass(frozen=True)
class Named:
    """A prefix, address or range end that a rule set or the traffic names: what the
    address map must place (secperf.rulesets.prefixes collects them, addrmap maps)."""

    network: str  # "10.1.0.0/16"; an address or a range's end as "/32" or "/128"
    where: str  # "router.nft:12", or "flow f3 (csv:12)"
    what: str = "prefix"  # "prefix", "address", "range end", "nat target", "flow"
