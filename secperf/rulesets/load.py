"""Load a rule file as its own tool understands it (owner: the rule-set loader).

nftables: the file is loaded by nft in a throwaway network namespace (`unshare -n`),
which resolves `include`, `define` and every other construct exactly as the DUT will,
then read back with `nft -j -a list ruleset`; each rule gets its file:line from a scan
of the source (nftsource). nft runs in the file's directory with `-I` that directory,
so the file's relative includes resolve as they do when its admin runs `nft -f` there.
A libnftables JSON file (format "nft-json": what `nft -j list ruleset` prints, as read
from a lab host's live rule set) is loaded the same way with `nft -j -f`; its rules have
no source lines (each is named by its chain and place). iptables-save: parsed line by
line (iptsave).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from secperf.errors import MechanismError, ToolMissingError
from secperf.rulesets import iptsave, nftsource
from secperf.rulesets.model import Chain, FileFormat, Rule, RuleRef, RuleSet, Verdict

# nft's own error lines: "FILE:LINE:COL-COL: Error: ..."
_NFT_ERROR = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+)(?:-\d+)?: Error: ")
_NFT_TIMEOUT = 60.0
_TABLE = re.compile(r"^table (?P<family>\S+) (?P<name>\S+) \{")
_HANDLE = re.compile(r"^\s+(?P<text>.*\S) # handle (?P<handle>\d+)$")
_NAT = ("dnat", "snat", "masquerade", "redirect")


def load(path: Path, fmt: FileFormat, interfaces: Sequence[str] = ()) -> RuleSet:
    """The rule set in `path`; a file its tool rejects raises MechanismError with the
    tool's own file:line; a missing include is an error, a glob include that matches
    nothing a warning in RuleSet.warnings. `interfaces` are created (veth) in the
    throwaway namespace first, for rules that name one by index (`iif "lan0"`)."""
    path = Path(path).absolute()
    if not path.is_file():
        raise MechanismError(
            f"rule file {path} does not exist", where=str(path), fix="give the path of a file"
        )
    if fmt == "iptables":
        return iptsave.parse(path)
    return _load_nft(path, [i for i in interfaces if i != "lo"], json_file=fmt == "nft-json")


# The interfaces first (each a veth whose peer nobody names), then the file.
_SCRIPT = """dir=$1 file=$2 json=$3; shift 3; i=0
for name in "$@"; do
  ip link add "$name" type veth peer name "secperf-ld$i" || exit 99; i=$((i+1))
done
nft $json -I "$dir" -f "$file" && nft -j -a list ruleset && echo && nft -a list ruleset"""
_IFACE_FAILED = 99


def _run_nft(path: Path, interfaces: list[str], json_file: bool = False) -> tuple[list[Any], str]:
    """libnftables' JSON of the loaded file, and nft's own listing (with handles)."""
    if shutil.which("nft") is None or shutil.which("unshare") is None:
        raise ToolMissingError(
            "nft and unshare are needed to read an nftables file",
            fix="apt-get install nftables util-linux",
        )
    cwd = path.parent
    try:
        proc = subprocess.run(
            [
                "unshare",
                "-n",
                "--",
                "sh",
                "-c",
                _SCRIPT,
                "sh",
                str(cwd),
                str(path),
                "-j" if json_file else "",
                *interfaces,
            ],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=_NFT_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        raise MechanismError(f"nft took over {_NFT_TIMEOUT:.0f}s to load", where=str(path)) from exc
    if proc.returncode != 0 and proc.stderr.startswith("unshare:"):
        raise MechanismError(
            f"cannot make a throwaway network namespace: {proc.stderr.strip()}",
            where=str(path),
            fix="run as root: the file is loaded by nft in a namespace of its own",
        )
    if proc.returncode == _IFACE_FAILED:
        raise MechanismError(
            f"cannot create the interfaces {', '.join(interfaces)}: {proc.stderr.strip()}",
            where=str(path),
            fix="name interfaces as Linux allows (up to 15 characters, no '/' or spaces)",
        )
    if proc.returncode != 0:
        raise _nft_error(path, proc.stderr or proc.stdout)
    doc_text, _, listing = proc.stdout.partition("\n\n")
    try:
        doc = json.loads(doc_text)
    except json.JSONDecodeError as exc:
        raise MechanismError(
            f"nft -j list ruleset printed no JSON: {exc}", where=str(path)
        ) from exc
    items: list[Any] = doc.get("nftables", [])
    return items, listing


def _nft_error(path: Path, stderr: str) -> MechanismError:
    """nft's own messages, located at the first file:line it names."""
    where = str(path)
    for line in stderr.splitlines():
        m = _NFT_ERROR.match(line)
        if m:
            file = Path(m["file"])
            if not file.is_absolute():
                file = path.parent / file
            where = f"{file}:{m['line']}"
            break
    text = stderr.strip() or "nft refused the file and said nothing"
    fix = "correct the file (`nft -c -f FILE` checks it)"
    if "Interface does not exist" in text:
        fix = "name the interface in the mechanism's `interfaces` (it is made for the load)"
    return MechanismError(f"nft rejects the rule file:\n{text}", where=where, fix=fix)


def _load_nft(path: Path, interfaces: list[str], json_file: bool = False) -> RuleSet:
    items, listing = _run_nft(path, interfaces, json_file)
    listed_text = _listed_rules(listing)
    if json_file:  # no source to scan: each rule is named by its chain and place
        found = nftsource.Scan(files=[path])
    else:
        found = nftsource.scan(path, path.parent, [path.parent])
    warnings = list(found.warnings)
    chains: list[Chain] = []
    by_chain: dict[nftsource.ChainKey, list[dict[str, Any]]] = {}
    for item in items:
        if "rule" in item:
            r = item["rule"]
            by_chain.setdefault((r["family"], r["table"], r["chain"]), []).append(r)
    for item in items:
        if "chain" not in item:
            continue
        c = item["chain"]
        key = (c["family"], c["table"], c["name"])
        listed = by_chain.get(key, [])
        written = found.rules.get(key)
        if written is not None and len(written) != len(listed):
            warnings.append(
                f"{path}: chain {' '.join(key)}: {len(listed)} rules loaded, "
                f"{len(written)} found in the source: its rules' lines are unknown"
            )
            written = None
        elif written is None and listed and not json_file:
            warnings.append(
                f"{path}: chain {' '.join(key)}: the order of its rules in the source "
                "is not knowable (insert/replace/delete by position): lines unknown"
            )
        rules = tuple(
            _rule(r, i, path, None if written is None else written[i], listed_text)
            for i, r in enumerate(listed)
        )
        declared = found.chain_lines.get(key)
        chains.append(
            Chain(
                family=c["family"],
                table=c["table"],
                name=c["name"],
                hook=c.get("hook"),
                type=c.get("type"),
                priority=c.get("prio"),
                policy=c.get("policy"),
                rules=rules,
                line=None if declared is None else declared[1],
            )
        )
    set_lines = {k: f"{f}:{n}" for k, (f, n) in found.set_lines.items()}
    return RuleSet(
        source=path,
        format="nft",
        chains=tuple(chains),
        raw=items,
        files=tuple(found.files),
        warnings=warnings,
        set_lines=set_lines,
    )


def _listed_rules(listing: str) -> dict[tuple[str, str, int], str]:
    """Each rule's text as `nft -a list ruleset` prints it, by (family, table, handle):
    the text of a rule whose line in the source is unknown."""
    out: dict[tuple[str, str, int], str] = {}
    table: tuple[str, str] | None = None
    for line in listing.splitlines():
        m = _TABLE.match(line)
        if m:
            table = (m["family"], m["name"])
            continue
        m = _HANDLE.match(line)
        if m and table is not None and not line.strip().startswith(("chain ", "set ", "map ")):
            out[(*table, int(m["handle"]))] = m["text"].strip()
    return out


def _rule(
    r: dict[str, Any],
    index: int,
    top: Path,
    src: nftsource.SourceRule | None,
    listed: dict[tuple[str, str, int], str],
) -> Rule:
    expr = tuple(r.get("expr", ()))
    verdict, target = classify(expr)
    ref = RuleRef(
        file=top if src is None else src.file,
        line=None if src is None else src.line,
        family=r["family"],
        table=r["table"],
        chain=r["chain"],
        index=index,
        handle=r.get("handle"),
    )
    text = src.text if src is not None else listed.get((r["family"], r["table"], r["handle"]), "")
    return Rule(ref=ref, verdict=verdict, target=target, expr=expr, text=text)


def classify(expr: tuple[Any, ...]) -> tuple[Verdict, str | None]:
    """A rule's verdict and target from its libnftables statements."""
    for stmt in expr:
        if not isinstance(stmt, dict) or len(stmt) != 1:
            continue
        ((key, val),) = stmt.items()
        if key in ("accept", "drop", "return", "continue"):
            return key, None
        if key in ("jump", "goto"):
            return key, str(val["target"])
        if key == "reject":
            return "reject", None
        if key == "queue":
            return "queue", None
        if key == "vmap":
            return "vmap", None
        if key in _NAT:
            return key, nat_target(val)
    return "continue", None


def _value_text(v: Any) -> str:
    if isinstance(v, dict) and "range" in v:
        return "-".join(_value_text(x) for x in v["range"])
    if isinstance(v, dict) and "prefix" in v:
        return f"{v['prefix']['addr']}/{v['prefix']['len']}"
    return str(v)


def nat_target(val: Any) -> str | None:
    """A NAT statement's target as nft writes it: "10.1.5.200", "10.3.0.1:80",
    "[2001:db8::1]:80", "198.51.100.1-198.51.100.9", ":5353" (redirect)."""
    if not isinstance(val, dict):
        return None
    addr, port = val.get("addr"), val.get("port")
    if isinstance(addr, dict) and "map" in addr:
        return None  # the addresses are the map's values
    text = "" if addr is None else _value_text(addr)
    if port is not None:
        text = f"[{text}]" if ":" in text else text
        text += f":{_value_text(port)}"
    return text or None


def nft_text(document: dict[str, Any], where: str) -> str:
    """A libnftables JSON document as nft text: loaded by `nft -j -f` in a throwaway
    namespace and listed back (`nft -s list ruleset`: without counters' values)."""
    if shutil.which("nft") is None or shutil.which("unshare") is None:
        raise ToolMissingError(
            "nft and unshare are needed to write an nftables file",
            fix="apt-get install nftables util-linux",
        )
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="secperf-nft-") as f:
        json.dump(document, f)
        f.flush()
        script = 'nft -j -f "$1" && nft -s list ruleset'
        proc = subprocess.run(
            ["unshare", "-n", "--", "sh", "-c", script, "sh", f.name],
            capture_output=True,
            text=True,
            timeout=_NFT_TIMEOUT,
        )
    if proc.returncode != 0:
        raise MechanismError(
            f"nft refuses the rewritten rule set: {proc.stderr.strip()}",
            where=where,
            fix="report it: a rewrite must load as the original does",
        )
    return proc.stdout
