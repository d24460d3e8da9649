"""IPS rule files: a documented subset of Snort/Suricata rule syntax.

One rule a line (blank lines and `#` comments are skipped)::

    ACTION PROTO SRC SPORT -> DST DPORT (OPTION; OPTION:VALUE; ...)

- ACTION: `alert` (count, let the packet pass) or `drop` (count and drop it inline);
- PROTO: `tcp`, `udp` or `ip`;
- SRC/DST: `any`, an address or prefix, a `[list]` of them, or a `$VARIABLE`
  (`$HOME_NET`, `$EXTERNAL_NET`, ...), which matches any address;
- SPORT/DPORT: `any`, `N`, `N:M`, `N:`, `:M`, or a `[list]` of those;
- options: `msg:"..."`, `content:"..."` (with `|41 42|` hex bytes, `\\"` `\\;` `\\\\`
  escapes), `nocase`, `offset:N`, `depth:N` (both modify the content before them),
  `pcre:"/.../FLAGS"` (flags i, s, m), `flow:to_server|to_client|established|...`,
  `sid:N` (required, unique), `rev:N`; `classtype`, `reference`, `metadata`,
  `priority` are accepted and ignored.

Matching is per packet over the transport payload (UDP/TCP payload, the IP payload
for `ip`): a rule matches when its header matches and every content and pcre is
found (each content within its offset/depth window). `flow` needs connection
state that a per-packet matcher does not keep: it is accepted and the header's
direction decides (a rule `any any -> any 80` sees only packets to port 80).

`parse_rules` turns a file into `Rule`s, raising a MechanismError that names
file:line on anything outside the subset; `normalized` gives the JSON the
secperf-nfq matcher reads (`--rules FILE.json`), with each pattern as a
Hyperscan expression; `generate_rules` writes N rules in the same syntax for
rule-count sweeps.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secperf.errors import MechanismError

ACTIONS = ("alert", "drop")
PROTOS = ("tcp", "udp", "ip")
IGNORED_OPTIONS = {"classtype", "reference", "metadata", "priority", "gid"}
FLOWS = {"to_server", "to_client", "from_server", "from_client", "established", "stateless"}
PCRE_FLAGS = {"i", "s", "m"}

_HEADER = re.compile(
    r"^(?P<action>\S+)\s+(?P<proto>\S+)\s+(?P<src>\S+|\[[^\]]*\])\s+(?P<sport>\S+|\[[^\]]*\])"
    r"\s+(?P<dir>\S+)\s+(?P<dst>\S+|\[[^\]]*\])\s+(?P<dport>\S+|\[[^\]]*\])\s*\((?P<opts>.*)\)\s*$"
)
FIX = "write the rule in the subset docs/studies/004.md 'IPS rule files' describes"


@dataclass
class Pattern:
    kind: str  # "content" | "pcre"
    data: bytes = b""  # content bytes
    regex: str = ""  # pcre body
    nocase: bool = False
    dotall: bool = False
    multiline: bool = False
    offset: int | None = None
    depth: int | None = None

    def expression(self) -> str:
        """The Hyperscan expression: content as escaped bytes, pcre as written."""
        if self.kind == "content":
            return "".join(f"\\x{b:02x}" for b in self.data)
        return self.regex


@dataclass
class Rule:
    action: str
    proto: str
    src: list[str]  # prefixes; empty = any
    sport: list[tuple[int, int]]  # ranges; empty = any
    dst: list[str]
    dport: list[tuple[int, int]]
    sid: int
    rev: int = 1
    msg: str = ""
    flow: list[str] = field(default_factory=list)
    patterns: list[Pattern] = field(default_factory=list)
    line: int = 0

    def normalized(self) -> dict[str, Any]:
        return {
            "sid": self.sid,
            "rev": self.rev,
            "msg": self.msg,
            "action": self.action,
            "proto": self.proto,
            "src": self.src,
            "sport": [list(r) for r in self.sport],
            "dst": self.dst,
            "dport": [list(r) for r in self.dport],
            "patterns": [
                {
                    "kind": p.kind,
                    "expr": p.expression(),
                    "len": len(p.data),
                    "nocase": p.nocase,
                    "dotall": p.dotall,
                    "multiline": p.multiline,
                    "offset": p.offset,
                    "depth": p.depth,
                }
                for p in self.patterns
            ],
        }


class _Err(Exception):
    pass


def _split_list(text: str) -> list[str]:
    if text.startswith("[") and text.endswith("]"):
        return [t.strip() for t in text[1:-1].split(",") if t.strip()]
    return [text]


def _addresses(text: str) -> list[str]:
    out: list[str] = []
    for item in _split_list(text):
        if item == "any" or item.startswith("$"):
            return []
        if item.startswith("!"):
            raise _Err(f"negated address {item!r} is outside the subset")
        try:
            out.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError as e:
            raise _Err(f"bad address {item!r}: {e}") from None
    return out


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise _Err(f"bad port {text!r}: expected 0..65535")
    return int(text)


def _ports(text: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for item in _split_list(text):
        if item == "any" or item.startswith("$"):
            return []
        if item.startswith("!"):
            raise _Err(f"negated port {item!r} is outside the subset")
        if ":" in item:
            lo, hi = item.split(":", 1)
            out.append((_port(lo) if lo else 0, _port(hi) if hi else 65535))
        else:
            p = _port(item)
            out.append((p, p))
    return out


def _options(text: str) -> list[tuple[str, str | None]]:
    """Split `a; b:c; d:"x;y";` honouring quotes and backslash escapes."""
    opts: list[tuple[str, str | None]] = []
    buf: list[str] = []
    quoted = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            buf.append(text[i : i + 2])
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        if ch == ";" and not quoted:
            item = "".join(buf).strip()
            if item:
                name, sep, value = item.partition(":")
                opts.append((name.strip(), value.strip() if sep else None))
            buf = []
        else:
            buf.append(ch)
        i += 1
    if quoted:
        raise _Err("unterminated quoted string in the options")
    if "".join(buf).strip():
        raise _Err(f"option {''.join(buf).strip()!r} lacks its closing ';'")
    return opts


def _unquote(value: str | None, name: str) -> str:
    if value is None or len(value) < 2 or not (value.startswith('"') and value.endswith('"')):
        raise _Err(f'{name} needs a quoted value: {name}:"..."')
    return value[1:-1]


def _content_bytes(text: str) -> bytes:
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "|":
            end = text.find("|", i + 1)
            if end < 0:
                raise _Err("content has an unclosed |hex| block")
            hexpart = text[i + 1 : end].replace(" ", "")
            try:
                out += bytes.fromhex(hexpart)
            except ValueError:
                raise _Err(f"bad hex bytes |{text[i + 1 : end]}| in content") from None
            i = end + 1
        elif ch == "\\" and i + 1 < len(text):
            out += text[i + 1].encode()
            i += 2
        else:
            out += ch.encode()
            i += 1
    if not out:
        raise _Err("empty content")
    return bytes(out)


def _int(value: str | None, name: str) -> int:
    if value is None or not value.strip().isdigit():
        raise _Err(f"{name} needs a non-negative integer: {name}:N")
    return int(value)


def parse_rule(text: str, line: int = 0) -> Rule:
    m = _HEADER.match(text.strip())
    if not m:
        raise _Err("expected ACTION PROTO SRC SPORT -> DST DPORT (OPTIONS;)")
    if m["action"] not in ACTIONS:
        raise _Err(f"action {m['action']!r}: expected one of {', '.join(ACTIONS)}")
    if m["proto"] not in PROTOS:
        raise _Err(f"protocol {m['proto']!r}: expected one of {', '.join(PROTOS)}")
    if m["dir"] != "->":
        raise _Err(f"direction {m['dir']!r}: only '->' is in the subset")
    rule = Rule(
        action=m["action"],
        proto=m["proto"],
        src=_addresses(m["src"]),
        sport=_ports(m["sport"]),
        dst=_addresses(m["dst"]),
        dport=_ports(m["dport"]),
        sid=0,
        line=line,
    )
    if rule.proto == "ip" and (rule.sport or rule.dport):
        raise _Err("an ip rule cannot match ports: use any")
    for name, value in _options(m["opts"]):
        last = rule.patterns[-1] if rule.patterns else None
        if name == "msg":
            rule.msg = _unquote(value, name)
        elif name == "content":
            raw = value or ""
            if raw.startswith("!"):
                raise _Err("negated content is outside the subset")
            rule.patterns.append(Pattern("content", data=_content_bytes(_unquote(raw, name))))
        elif name in ("nocase", "offset", "depth"):
            if last is None or last.kind != "content":
                raise _Err(f"{name} must follow the content it modifies")
            if name == "nocase":
                last.nocase = True
            elif name == "offset":
                last.offset = _int(value, name)
            else:
                last.depth = _int(value, name)
                if last.depth < len(last.data):
                    raise _Err(f"depth {last.depth} is shorter than its content")
        elif name == "pcre":
            body = _unquote(value, name)
            pm = re.fullmatch(r"/(.*)/([A-Za-z]*)", body)
            if not pm:
                raise _Err('pcre must be "/REGEX/FLAGS"')
            flags = set(pm[2])
            if not flags <= PCRE_FLAGS:
                raise _Err(f"pcre flags {''.join(sorted(flags - PCRE_FLAGS))!r} outside i, s, m")
            try:
                re.compile(pm[1].encode())
            except re.error as e:
                raise _Err(f"pcre /{pm[1]}/ does not compile: {e}") from None
            rule.patterns.append(
                Pattern(
                    "pcre",
                    regex=pm[1],
                    nocase="i" in flags,
                    dotall="s" in flags,
                    multiline="m" in flags,
                )
            )
        elif name == "flow":
            items = [f.strip() for f in (value or "").split(",")]
            bad = [f for f in items if f not in FLOWS]
            if bad:
                raise _Err(f"flow {','.join(bad)!r}: expected {', '.join(sorted(FLOWS))}")
            rule.flow = items
        elif name == "sid":
            rule.sid = _int(value, name)
        elif name == "rev":
            rule.rev = _int(value, name)
        elif name in IGNORED_OPTIONS:
            continue
        else:
            raise _Err(f"option {name!r} is outside the subset")
    if rule.sid <= 0:
        raise _Err("every rule needs sid:N (a positive number)")
    return rule


def parse_text(text: str, where: str = "<rules>") -> list[Rule]:
    rules: list[Rule] = []
    sids: dict[int, int] = {}
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            rule = parse_rule(line, no)
        except _Err as e:
            raise MechanismError(str(e), where=f"{where}:{no}", fix=FIX) from None
        if rule.sid in sids:
            raise MechanismError(
                f"sid {rule.sid} is used again (first at line {sids[rule.sid]})",
                where=f"{where}:{no}",
                fix="give every rule its own sid",
            )
        sids[rule.sid] = no
        rules.append(rule)
    if not rules:
        raise MechanismError("the rule file has no rules", where=where, fix=FIX)
    return rules


def parse_rules(path: Path) -> list[Rule]:
    try:
        text = path.read_text()
    except OSError as e:
        raise MechanismError(
            f"cannot read the rule file: {e.strerror}",
            where=str(path),
            fix="give `rules` a readable file (relative paths are relative to the scenario)",
        ) from None
    return parse_text(text, str(path))


def normalized(rules: list[Rule]) -> str:
    """The JSON secperf-nfq reads with --rules."""
    return json.dumps({"rules": [r.normalized() for r in rules]}, indent=1) + "\n"


def generate_rules(n: int, *, action: str = "alert") -> str:
    """N rules in the same syntax, for sweeps: distinct contents that ordinary
    benchmark traffic never carries (so each packet is scanned against every rule
    and none fires), over TCP and UDP, some with nocase, offset/depth or a pcre."""
    if n < 1:
        raise ValueError("generate at least one rule")
    lines = [f"# {n} generated rules (secperf ips_rules.generate_rules), action {action}"]
    for i in range(n):
        sid = 3_000_000 + i
        proto = "udp" if i % 4 == 3 else "tcp"
        port = (80, 21, 25, 8080, 53)[i % 5] if proto == "tcp" else 53
        token = f"spgen{i:05d}{(i * 2654435761) % 2**32:08x}"
        opts = [f'msg:"secperf generated {i}"', f'content:"{token}"']
        if i % 3 == 1:
            opts.append("nocase")
        if i % 7 == 2:
            opts += ["offset:0", "depth:200"]
        if i % 11 == 5:
            opts.append(f'pcre:"/{token}[0-9]+/i"')
        opts += [f"sid:{sid}", "rev:1"]
        lines.append(f"{action} {proto} any any -> any {port} ({'; '.join(opts)};)")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """`python -m secperf.ips_rules N [alert|drop]`: print N generated rules."""
    if not argv or not argv[0].isdigit():
        print("usage: python -m secperf.ips_rules N [alert|drop] > FILE.rules")
        return 2
    action = argv[1] if len(argv) > 1 else "alert"
    if action not in ACTIONS:
        print(f"action {action!r}: expected alert or drop")
        return 2
    print(generate_rules(int(argv[0]), action=action), end="")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
