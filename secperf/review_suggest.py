"""`secperf review --suggest`: the proposed rule set rewritten where a common pattern
allows (secperf.rulesets.suggest), written as an nft file for the review to measure as
its third variant, `suggested`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from secperf.review import TRAFFIC_KINDS, rule_format
from secperf.rulesets.load import load, nft_text
from secperf.rulesets.placement import read_traffic
from secperf.rulesets.suggest import Change, hot_shares, suggest

NOT_NFT = (
    "suggest: {name} is iptables-save output, which is not rewritten (iptables has no "
    "anonymous sets or verdict maps to fold rules into; ipset would change the file's "
    "tools): the review runs without a suggestion"
)
NONE_FOUND = "suggest: no rewrite found in {name}: the review runs without a suggestion"


@dataclass(frozen=True)
class Suggested:
    file: Path | None  # the rewritten rule set (None: nothing to measure)
    changes: tuple[Change, ...]
    lines: tuple[str, ...]  # what to tell the user


def write_suggestion(proposed: Path, into: Path, traffic: str = "coverage") -> Suggested:
    """The rewrite of `proposed`, as `into`/suggested.nft and its changes beside it
    (suggested.changes.json), or why there is none. A flow file as `traffic` says which
    rules are hot (the share of its weight each decides): the hot-first pattern."""
    fmt = rule_format(proposed)
    if fmt == "iptables":
        return Suggested(None, (), (NOT_NFT.format(name=proposed.name),))
    rs = load(proposed, "nft-json" if fmt == "nft-json" else "nft")
    hot = hot_shares(rs, read_traffic(Path(traffic))) if traffic not in TRAFFIC_KINDS else None
    found = suggest(rs, hot)
    if not found.changes:
        return Suggested(None, (), (NONE_FOUND.format(name=proposed.name),))
    into.mkdir(parents=True, exist_ok=True)
    out = into / "suggested.nft"
    head = f"# secperf review --suggest: an equivalent rewrite of {proposed}\n"
    out.write_text(head + nft_text(found.document, where=str(proposed)))
    (into / "suggested.changes.json").write_text(
        json.dumps([c.as_dict() for c in found.changes], indent=1) + "\n"
    )
    lines = [f"suggest: {len(found.changes)} rewrite(s) of {proposed.name}, in {out}:"]
    lines += [f"  {c.replaces}: {c.text}" for c in found.changes]
    return Suggested(out, found.changes, tuple(lines))
