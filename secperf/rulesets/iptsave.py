"""iptables-save (and ip6tables-save) output, read line by line.

`*table` opens a table, `:CHAIN POLICY [p:b]` declares a chain (`-` for a user
chain), `-N CHAIN` too, `-A CHAIN ARGS` appends a rule (arguments split as the shell
would), `COMMIT` closes the table. The family is "ip6" when the file's addresses are
IPv6 ones (ip6tables-save writes the same syntax).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from secperf.errors import MechanismError
from secperf.rulesets.model import Chain, Rule, RuleRef, RuleSet, Verdict

HOOKS = {
    "PREROUTING": "prerouting",
    "INPUT": "input",
    "FORWARD": "forward",
    "OUTPUT": "output",
    "POSTROUTING": "postrouting",
}
# The priorities of iptables' tables on their hooks, as nft names them.
PRIORITIES = {"raw": -300, "mangle": -150, "nat": -100, "filter": 0, "security": 50}
_VERDICTS: dict[str, Verdict] = {
    "ACCEPT": "accept",
    "DROP": "drop",
    "REJECT": "reject",
    "RETURN": "return",
    "DNAT": "dnat",
    "SNAT": "snat",
    "MASQUERADE": "masquerade",
    "REDIRECT": "redirect",
    "NFQUEUE": "queue",
    "QUEUE": "queue",
}
_ADDRESS_FLAGS = ("-s", "--source", "-d", "--destination", "--to-destination", "--to-source")
_FIX = "give the output of iptables-save (or ip6tables-save) unchanged"


@dataclass
class _Chain:
    name: str
    policy: str | None
    line: int
    rules: list[tuple[int, list[str], str]] = field(default_factory=list)


def _family(lines: list[list[str]]) -> str:
    for args in lines:
        for i, a in enumerate(args[:-1]):
            if a in _ADDRESS_FLAGS and ":" in args[i + 1].split("/")[0].strip("[]"):
                # an IPv4 --to-destination has one colon before its port; IPv6 more
                value = args[i + 1]
                if a.startswith("--to") and value.count(":") == 1 and "[" not in value:
                    continue
                return "ip6"
    return "ip"


def parse(path: Path) -> RuleSet:
    text = path.read_text(errors="replace")
    tables: dict[str, dict[str, _Chain]] = {}
    table: str | None = None
    all_args: list[list[str]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{path}:{n}"
        if not line or line.startswith("#"):
            continue
        if line.startswith("*"):
            table = line[1:].strip()
            tables.setdefault(table, {})
            continue
        if line == "COMMIT":
            table = None
            continue
        if table is None:
            raise MechanismError(
                f"{line.split()[0]!r} outside a table (no `*filter` line before it)",
                where=where,
                fix=_FIX,
            )
        chains = tables[table]
        if line.startswith(":"):
            parts = line[1:].split()
            if not parts:
                raise MechanismError("a chain line without a name", where=where, fix=_FIX)
            policy = parts[1] if len(parts) > 1 and parts[1] != "-" else None
            chains.setdefault(parts[0], _Chain(parts[0], policy and policy.lower(), n))
            continue
        try:
            args = shlex.split(line, comments=False)
        except ValueError as exc:
            raise MechanismError(f"cannot split the line: {exc}", where=where, fix=_FIX) from exc
        if args[0] in ("-N", "--new-chain") and len(args) == 2:
            chains.setdefault(args[1], _Chain(args[1], None, n))
        elif args[0] in ("-P", "--policy") and len(args) == 3:
            chains.setdefault(args[1], _Chain(args[1], None, n)).policy = args[2].lower()
        elif args[0] in ("-A", "--append") and len(args) >= 2:
            chain = chains.get(args[1])
            if chain is None:
                raise MechanismError(
                    f"rule for chain {args[1]!r}, which the table {table!r} does not declare",
                    where=where,
                    fix=f"declare it (`:{args[1]} - [0:0]`) before its rules",
                )
            chain.rules.append((n, args[2:], line))
            all_args.append(args[2:])
        else:
            raise MechanismError(
                f"not an iptables-save line: {line!r}",
                where=where,
                fix=_FIX + " (lines are *TABLE, :CHAIN, -N, -A, COMMIT)",
            )
    family = _family(all_args)
    out: list[Chain] = []
    for tname, chains in tables.items():
        for c in chains.values():
            rules = tuple(
                _rule(path, family, tname, c.name, i, n, args, line, chains)
                for i, (n, args, line) in enumerate(c.rules)
            )
            builtin = c.name in HOOKS and c.policy is not None
            ctype = None
            if builtin:
                ctype = (
                    "nat"
                    if tname == "nat"
                    else "route"
                    if (tname == "mangle" and c.name == "OUTPUT")
                    else "filter"
                )
            out.append(
                Chain(
                    family=family,
                    table=tname,
                    name=c.name,
                    hook=HOOKS[c.name] if builtin else None,
                    type=ctype,
                    priority=_priority(tname, c.name) if builtin else None,
                    policy=c.policy if builtin else None,
                    rules=rules,
                    line=c.line,
                )
            )
    return RuleSet(source=path, format="iptables", chains=tuple(out), raw=text, files=(path,))


def _priority(table: str, chain: str) -> int | None:
    # nat rewrites destinations before routing (-100) and sources after it (100)
    if table == "nat":
        return 100 if chain in ("POSTROUTING", "INPUT") else -100
    return PRIORITIES.get(table)


def option(args: list[str], *names: str) -> str | None:
    """The value of the first of `names` in a rule's arguments."""
    for i, a in enumerate(args[:-1]):
        if a in names:
            return args[i + 1]
    return None


def _rule(
    path: Path,
    family: str,
    table: str,
    chain: str,
    index: int,
    line: int,
    args: list[str],
    text: str,
    chains: dict[str, _Chain],
) -> Rule:
    ref = RuleRef(file=path, line=line, family=family, table=table, chain=chain, index=index)
    jump = option(args, "-j", "--jump")
    goto = option(args, "-g", "--goto")
    verdict: Verdict = "continue"
    target: str | None = None
    if goto is not None:
        verdict, target = "goto", goto
    elif jump is not None:
        if jump in _VERDICTS:
            verdict = _VERDICTS[jump]
        elif jump in chains:
            verdict, target = "jump", jump
        # LOG, MARK, CONNMARK, ...: the packet goes on to the next rule
        if verdict in ("dnat", "snat"):
            target = option(args, "--to-destination", "--to-source", "--to")
        elif verdict == "redirect":
            port = option(args, "--to-ports", "--to-port")
            target = None if port is None else f":{port}"
    return Rule(ref=ref, verdict=verdict, target=target, expr=tuple(args), text=text)
