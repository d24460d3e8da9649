"""Load a rule file as its own tool understands it (owner: the rule-set loader).

nftables: the file is loaded by nft in a throwaway network namespace (`unshare -n`),
which resolves `include` (relative to the including file, globs as nft does),
`define` and every other construct exactly as the DUT will, then read back with
`nft -j -a list ruleset`; each rule gets its file:line from a scan of the source.
iptables-save: parsed line by line (tables, chains and their policies, `-A` rules).
"""

from __future__ import annotations

from pathlib import Path

from secperf.rulesets.model import Format, RuleSet


def load(path: Path, fmt: Format) -> RuleSet:
    """The rule set in `path`; a file its tool rejects raises MechanismError with the
    tool's own file:line; a missing include is an error, a glob include that matches
    nothing a warning in RuleSet.warnings."""
    raise NotImplementedError
