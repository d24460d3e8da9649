"""A user's own rule set, and the traffic that exercises it.

This package sits below the kinds: the `ruleset` mechanism kind (which loads a rule
file on the DUT) and the `flows` workload kind (whose traffic can be derived from the
rule files of the scenario) both use it, and neither imports the other.

The path a rule file takes:

    load (model.RuleSet: rules in file order, each with its file:line)
      -> flows.derive (one flow per accepting rule, a probe per denying rule)
         or flows.read_* (the user's own: CSV, conntrack dump, pcap)
      -> addrmap.AddressMap.build (every prefix the rule sets and the flows name,
         mapped into the testbed's ranges, containment and order kept)
      -> addrmap.map_nft / map_iptables (the rule set as loaded on the DUT)
         and AddressMap.flow (the flows as the engine sends them)

Below those: nftsource (the lines of an nft file's rules, includes spliced as nft
resolves them), iptsave (iptables-save parsed), matches (what a rule matches, in a
flow's terms), prefixes (every prefix a rule set names, for the map, and the choice
of flow addresses among them), traffic (the CSV, conntrack and pcap readers, which
flows re-exports).
"""
