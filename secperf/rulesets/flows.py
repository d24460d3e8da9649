"""The traffic of a rule-set review (owner: the flow deriver).

`derive` makes the coverage traffic from a rule set: for every rule that accepts, a
flow it matches; for every rule that drops or rejects, a probe that must stay denied.
`read_csv`, `read_conntrack` and `read_pcap` read the user's own traffic.
"""

from __future__ import annotations
