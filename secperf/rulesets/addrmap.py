"""The map from a rule set's addresses to the testbed's (owner: the address map).

Every prefix, address and range that the rule sets and the traffic name is mapped
into MAPPED_NET4 / MAPPED_NET6 so that each relation among them holds after the map
as before: containment (10.0.0.0/8 contains 10.1.0.0/16), disjointness (neither
contains 192.168.5.200) and address order (so ranges keep their members). A construct
the map cannot preserve is refused with its file:line.
"""

from __future__ import annotations

from ipaddress import IPv4Network, IPv6Network

# Inside the testbed ranges, apart from the links' subnets (198.18.1-239.0/24), the
# tunnels' inner addresses (198.18.240.0/20) and the ACL's never-matching entries
# (198.19.0.0/17).
MAPPED_NET4 = IPv4Network("198.19.128.0/17")
MAPPED_NET6 = IPv6Network("2001:2:0:8000::/49")
