"""The user's own traffic: a flow list (CSV), a conntrack dump, a pcap.

Each reader returns flows in the user's addresses (the address map places them) with
no expected verdict: the run measures what the rule set does with them. A bad line
is a ScenarioError naming FILE:LINE and the fix.
"""

from __future__ import annotations

from pathlib import Path

from secperf.rulesets.model import Flow


def read_csv(path: Path) -> list[Flow]:
    raise NotImplementedError


def read_conntrack(path: Path) -> list[Flow]:
    raise NotImplementedError


def read_pcap(path: Path) -> list[Flow]:
    raise NotImplementedError


def check_weights(flows: list[Flow]) -> None:
    raise NotImplementedError
