"""An iptables-save file with its addresses mapped (owner: the address map).

Only the values of the options that take addresses are replaced, in place: every other
byte (spacing, comments, counters, the line breaks) stays as the user wrote it, so a
line that iptables-restore or nft refuses is still the user's line number.
"""

from __future__ import annotations

import re
from ipaddress import ip_network

from secperf.errors import MechanismError
from secperf.rulesets.lookup import KnownAddresses, is_address

# A token of a rule line: a run of unquoted characters and double-quoted strings (how
# iptables-save writes a comment with spaces).
_TOKEN = re.compile(r'(?:"(?:[^"\\]|\\.)*"|[^\s"])+')
# Options whose value is an address or prefix, or a comma-separated list of them.
_ADDRESSES = frozenset(
    {"-s", "--source", "--src", "-d", "--destination", "--dst"}
    | {"--ctorigsrc", "--ctorigdst", "--ctreplsrc", "--ctrepldst"}  # -m conntrack
    | {"--tunnel-src", "--tunnel-dst"}  # -m policy
    | {"--gateway"}  # -j TEE
)
_RANGES = frozenset({"--src-range", "--dst-range"})  # -m iprange
_NAT_TARGETS = frozenset({"DNAT", "SNAT"})


def map_iptables(text: str, amap: KnownAddresses, *, source: str = "iptables-save") -> str:
    """`text` with every address value rewritten; `source` names the file in errors
    (`source:LINE`). An address the map does not know raises MechanismError."""
    out = []
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        head = line.lstrip()
        if not head or head[0] in "#*:" or head.startswith("COMMIT"):
            out.append(line)
        else:
            out.append(_rule(line, amap, f"{source}:{number}"))
    return "".join(out)


def _rule(line: str, amap: KnownAddresses, where: str) -> str:
    tokens = [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(line)]
    words = [t[2] for t in tokens]
    target = next((words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-j", "--jump")), "")
    edits: list[tuple[int, int, str]] = []
    i = 0
    while i < len(tokens):
        option = words[i]
        kind = _kind(option, target)
        if kind is not None and i + 1 < len(tokens):  # `! -s ADDR`: the `!` comes first
            start, end, value = tokens[i + 1]
            edits.append((start, end, _convert(kind, option, value, amap, where)))
            i += 1
        i += 1
    for start, end, value in reversed(edits):
        line = line[:start] + value + line[end:]
    return line


def _kind(option: str, target: str) -> str | None:
    if option in _ADDRESSES:
        return "addresses"
    if option in _RANGES:
        return "range"
    # DNAT/SNAT's --to-destination/--to-source, also as the prefixes getopt accepts.
    if target in _NAT_TARGETS and option.startswith("--to") and len(option) >= 4:
        return "nat"
    if option == "--to" and target in ("NETMAP", "SAME"):
        return "netmap"
    return None


def _convert(kind: str, option: str, value: str, amap: KnownAddresses, where: str) -> str:
    if kind == "addresses":
        return ",".join(_address(part, option, amap, where) for part in value.split(","))
    if kind == "range":
        return _range(value, option, amap, where)
    if kind == "nat":
        return _nat(value, option, amap, where)
    raise MechanismError(
        f"{option} {value} maps a whole prefix onto another keeping the host bits; the "
        "address map resizes prefixes, so the rewritten addresses would not be the mapped ones",
        where=where,
        fix="write the translation as DNAT/SNAT rules with --to-destination/--to-source",
    )


def _address(part: str, option: str, amap: KnownAddresses, where: str) -> str:
    addr, slash, mask = part.partition("/")
    if not is_address(addr):
        raise MechanismError(
            f"{part!r} after {option} is not an address (a host name cannot be mapped)",
            where=where,
            fix="write the address or prefix itself",
        )
    if not slash:
        return amap.known_address(addr, where)
    if mask.isdigit():
        return amap.known_network(part, where)
    try:
        net = ip_network(f"{addr}/{mask}", strict=False)
    except ValueError as exc:
        raise MechanismError(
            f"{part!r} after {option}: {mask} is not a contiguous mask",
            where=where,
            fix="write a prefix length (10.1.0.0/16); a non-contiguous mask cannot be mapped",
        ) from exc
    mapped = ip_network(amap.known_network(str(net), where))
    return f"{mapped.network_address}/{mapped.netmask}"


def _range(value: str, option: str, amap: KnownAddresses, where: str) -> str:
    ends = value.split("-")
    if len(ends) > 2 or not all(is_address(e) for e in ends):
        raise MechanismError(
            f"{value!r} after {option} is not an address range",
            where=where,
            fix="write FIRST-LAST (10.1.0.10-10.1.0.20)",
        )
    return "-".join(amap.known_address(e, where) for e in ends)


def _nat(value: str, option: str, amap: KnownAddresses, where: str) -> str:
    """ADDR[-ADDR][:PORT[-PORT]], IPv6 in brackets when a port follows; the port kept."""
    if value.startswith("["):
        close = value.find("]")
        if close < 0:
            raise MechanismError(
                f"{value!r} after {option} opens a bracket it does not close",
                where=where,
                fix="write [ADDR]:PORT",
            )
        return f"[{_range(value[1:close], option, amap, where)}]{value[close + 1 :]}"
    if value.count(":") > 1:  # IPv6 without a port
        return _range(value, option, amap, where)
    addrs, colon, ports = value.partition(":")
    if not addrs:  # only a port
        return value
    return f"{_range(addrs, option, amap, where)}{colon}{ports}"
