"""The management guard: no rule set secperf loads on an SSH host cuts the SSH session
that drives it (docs/security.md).

A filter with `policy drop` on a host's input path (an ACL on the target itself, the
appliance's input chain) drops the controller's packets too, and a conntrack flush
makes even a stateful one forget the session: the host is then unreachable until
someone reaches its console. So every rule set an SSH host loads with `nft -f` or an
`*tables-restore` passes through here first: each base chain (nft) and each built-in
chain that sees the host's own packets (iptables) gets an accept for the management
connection as its first rule, in the same transaction as the rules themselves.

The management connection is what the host's sshd reports in $SSH_CONNECTION: the
controller's address, the host's address and sshd's port, as the host sees them (a
NAT between them changes nothing). The accept matches those addresses and the port,
not the source port, so that `secperf clean` can log in again.

A file the guard cannot read completely (an nft `include`) is refused on an SSH host,
with the reason: secperf would rather not load it than lose the host.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from secperf.errors import TestbedError

# IPv6 neighbour and router discovery (RFC 4861: always with hop limit 255, so never
# from off the link): the nft name and the ip6tables name of each type.
ND_TYPES = (
    ("nd-router-solicit", "router-solicitation"),
    ("nd-router-advert", "router-advertisement"),
    ("nd-neighbor-solicit", "neighbour-solicitation"),
    ("nd-neighbor-advert", "neighbour-advertisement"),
)


@dataclass(frozen=True)
class Management:
    """The SSH connection as the host sees it."""

    controller: str  # the controller's address
    host: str  # the host's own address on the management network
    port: int  # sshd's port

    @classmethod
    def parse(cls, ssh_connection: str) -> Management | None:
        """From $SSH_CONNECTION ("CLIENT_IP CLIENT_PORT SERVER_IP SERVER_PORT")."""
        parts = ssh_connection.split()
        if len(parts) != 4:
            return None
        try:
            controller = ipaddress.ip_address(parts[0])
            host = ipaddress.ip_address(parts[2])
            port = int(parts[3])
        except ValueError:
            return None
        mapped = [
            a.ipv4_mapped if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped else a
            for a in (controller, host)
        ]
        if mapped[0].version != mapped[1].version or not 0 < port < 65536:
            return None
        return cls(str(mapped[0]), str(mapped[1]), port)

    @property
    def family(self) -> int:
        return ipaddress.ip_address(self.host).version

    def nft_rules(self) -> list[str]:
        """The two accepts (toward sshd, back from it), as nft statements; over IPv6 also
        neighbour and router discovery (ND_TYPES), without which the host and the
        controller stop finding each other once their neighbour entries expire."""
        ip = "ip" if self.family == 4 else "ip6"
        c, h, p = self.controller, self.host, self.port
        rules = [
            f"{ip} saddr {c} {ip} daddr {h} tcp dport {p} accept",
            f"{ip} saddr {h} {ip} daddr {c} tcp sport {p} accept",
        ]
        if self.family == 6:
            types = ", ".join(nft for nft, _ipt in ND_TYPES)
            rules.append(f"ip6 hoplimit 255 icmpv6 type {{ {types} }} accept")
        return rules

    def iptables_rules(self, chain: str) -> list[str]:
        """The accept for one built-in chain, as an iptables-restore line."""
        n = 32 if self.family == 4 else 128
        c, h, p = f"{self.controller}/{n}", f"{self.host}/{n}", self.port
        inbound = f"-I {chain} 1 -s {c} -d {h} -p tcp --dport {p} -j ACCEPT"
        outbound = f"-I {chain} 1 -s {h} -d {c} -p tcp --sport {p} -j ACCEPT"
        nd = [
            f"-I {chain} 1 -p ipv6-icmp -m icmp6 --icmpv6-type {ipt} -m hl --hl-eq 255 -j ACCEPT"
            for _nft, ipt in ND_TYPES
            if self.family == 6
        ]
        if chain in ("INPUT", "PREROUTING"):
            return [inbound, *nd]
        if chain in ("OUTPUT", "POSTROUTING"):
            return [outbound, *nd]
        return [inbound, outbound, *nd]


class GuardError(TestbedError):
    """A rule set the guard cannot make safe for an SSH host."""


# -- nft ---------------------------------------------------------------------------------

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{};\n]|[^\s{};"]+')
# Families whose base chains can see the management traffic, by the address family
# they match (None: both).
_NFT_FAMILIES = {"inet": None, "ip": 4, "ip6": 6, "bridge": None, "netdev": None}


def _tokens(text: str) -> list[str]:
    """nft's words and separators, comments left out (a `#` outside a string)."""
    out: list[str] = []
    for line in text.splitlines():
        for tok in _TOKEN.findall(line):
            if tok.startswith("#"):
                break
            out.append(tok)
        out.append("\n")
    return out


def base_chains(text: str) -> list[tuple[str, str, str]]:
    """Every base chain (a chain with a `hook`) an nft script declares, as (family,
    table, chain), in either syntax: blocks (`table inet t { chain c { type filter hook
    input ...` ) or commands (`add chain inet t c { type filter hook input ... }`)."""
    found: list[tuple[str, str, str]] = []
    # the open blocks: ("table", family, name), ("chain", family, table, name) or ("other",)
    stack: list[tuple[str, ...]] = []
    statement: list[str] = []
    for tok in _tokens(text):
        if tok in (";", "\n"):
            statement = []
            continue
        if tok == "}":
            if not stack:
                raise GuardError("an nft file with an unmatched `}`")
            stack.pop()
            statement = []
            continue
        if tok == "{":
            stack.append(_opened(statement, stack))
            statement = []
            continue
        statement.append(tok)
        if statement[0] == "include":
            raise GuardError(
                "an nft file that includes another: secperf cannot see the chains it loads"
            )
        if len(statement) >= 2 and statement[-2] == "hook" and stack and stack[-1][0] == "chain":
            chain = stack[-1]
            entry = (chain[1], chain[2], chain[3])
            if entry not in found:
                found.append(entry)
    if stack:
        raise GuardError("an nft file with an unmatched `{`")
    return found


def _opened(statement: list[str], stack: list[tuple[str, ...]]) -> tuple[str, ...]:
    """What the `{` after `statement` opens, inside `stack`."""
    words = statement[1:] if statement[:1] in (["add"], ["create"]) else statement
    if words[:1] == ["table"] and not stack:
        name = words[1:]
        family, table = (name[0], name[1]) if len(name) >= 2 else ("ip", name[0])
        return ("table", family, table)
    if words[:1] == ["chain"]:
        if stack and stack[-1][0] == "table" and len(words) == 2:
            return ("chain", stack[-1][1], stack[-1][2], words[1])
        if not stack and len(words) in (3, 4):
            family, table, chain = words[1:] if len(words) == 4 else ["ip", *words[1:]]
            return ("chain", family, table, chain)
    return ("other",)


def guard_nft(text: str, mgmt: Management) -> str:
    """`text` with an insert of the management accepts at the head of every base chain
    it declares, appended (the file is one transaction: the accepts exist as soon as
    its rules do, and come first whatever the file inserted)."""
    lines = [text.rstrip("\n")]
    for family, table, chain in base_chains(text):
        if family == "arp":
            continue  # ARP chains see no IP packets
        wants = _NFT_FAMILIES.get(family)
        if family not in _NFT_FAMILIES or (wants is not None and wants != mgmt.family):
            continue
        for rule in reversed(mgmt.nft_rules()):
            lines.append(f"insert rule {family} {table} {chain} {rule}")
    return "\n".join(lines) + "\n"


# -- iptables-restore ---------------------------------------------------------------------

# The built-in chains that see the host's own packets, per table (nat cannot drop).
_IPT_CHAINS = {
    "filter": ("INPUT", "OUTPUT"),
    "mangle": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "raw": ("PREROUTING", "OUTPUT"),
    "security": ("INPUT", "OUTPUT"),
}


def guard_iptables(text: str, mgmt: Management, family: int) -> str:
    """An iptables-restore file (for IPv`family`) with the management accept inserted
    first in each built-in chain of each table it loads, just before its COMMIT."""
    if family != mgmt.family:
        return text  # the other family's tables never see the management packets
    out: list[str] = []
    table: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("*"):
            table = stripped[1:].strip()
        elif stripped == "COMMIT" and table is not None:
            for chain in _IPT_CHAINS.get(table, ()):
                out.extend(mgmt.iptables_rules(chain))
            table = None
        out.append(line)
    return "\n".join(out) + "\n"


# -- which commands load rules ----------------------------------------------------------------

RESTORE_TOOLS = {
    "iptables-restore": 4,
    "iptables-legacy-restore": 4,
    "iptables-nft-restore": 4,
    "ip6tables-restore": 6,
    "ip6tables-legacy-restore": 6,
    "ip6tables-nft-restore": 6,
}


def loads_rules(argv: Sequence[str]) -> str | None:
    """ "nft" or "iptables" when `argv` loads a rule set the guard must see (a check
    run, `nft -c` or `--test`, loads nothing), else None."""
    if not argv:
        return None
    tool = argv[0].rsplit("/", 1)[-1]
    if tool == "nft" and "-f" in argv and "-c" not in argv and "--check" not in argv:
        return "nft"
    if tool in RESTORE_TOOLS and "--test" not in argv and "-t" not in argv:
        return "iptables"
    return None


def guarded(argv: Sequence[str], text: str, mgmt: Management) -> tuple[list[str], str]:
    """The command to run instead of `argv` and its input: the rules of `text` (the
    file or input `argv` loads) with the management accepts, read from stdin."""
    tool = argv[0].rsplit("/", 1)[-1]
    if tool == "nft":
        i = list(argv).index("-f")
        return [*argv[:i], "-f", "-", *argv[i + 2 :]], guard_nft(text, mgmt)
    files = [a for a in argv[1:] if not a.startswith("-")]
    rest = [a for a in argv if a not in files]
    return rest, guard_iptables(text, mgmt, RESTORE_TOOLS[tool])
