"""The traffic of a rule-set review (owner: the flow deriver).

`derive` makes the coverage traffic from a rule set: for every rule that accepts, a
flow it matches; for every rule that drops or rejects, a probe that must stay denied;
for every base chain whose policy drops, a probe that falls through to it.
`read_csv`, `read_conntrack` and `read_pcap` (secperf.rulesets.traffic) read the
user's own traffic.

The walk starts at the base chains of the input and forward hooks and the NAT chains
of prerouting and postrouting, enters user chains through their jumps (a rule there
inherits the matches of the jump that enters it) and reads verdict maps element by
element. Addresses are chosen with prefixes.pick_address, so that a flow for
`ip saddr 10.1.0.0/16` does not fall into a narrower 10.1.66.0/24 another rule drops;
a side the rule leaves open takes the prefixes the same interface's rules name for
that side, else an address outside every named prefix ("the internet").
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from secperf.errors import MechanismError
from secperf.rulesets import matches, prefixes
from secperf.rulesets.matches import Match
from secperf.rulesets.model import ACCEPTING, DENYING, Chain, Flow, Named, Protocol, Rule, RuleSet
from secperf.rulesets.traffic import check_weights, read_conntrack, read_csv, read_pcap

__all__ = ["check_weights", "derive", "read_conntrack", "read_csv", "read_pcap", "sides"]

MAX_DEPTH = 16  # jumps deep; nft itself refuses more than 16
_HOOKS = ("input", "forward", "prerouting", "postrouting")
_FREE_PORT = 9999  # where a port no rule names is looked for
_RETRIES = 4  # flows made again outside the prefixes of an earlier rule that took them


@dataclass
class _Entry:
    """A rule as the walk from a base chain reaches it."""

    rule: Rule
    match: Match
    verdict: str
    target: str | None
    base: Chain
    path: tuple[str, ...] = ()  # the chains the walk is in, the base chain first


def _met(earlier: Sequence[_Entry], flow: Flow) -> list[_Entry]:
    """The earlier entries `flow` meets: a RETURN that matches it takes it out of its
    chain, so the rest of that chain (and what it jumps to) is not met."""
    out: list[_Entry] = []
    skip: tuple[str, ...] | None = None
    for prior in earlier:
        if skip is not None and prior.path[: len(skip)] == skip:
            continue
        skip = None
        if prior.verdict == "return" and covers(prior.match, flow):
            skip = prior.path
            continue
        out.append(prior)
    return out


def derive(
    rs: RuleSet,
    interfaces: Sequence[str],
    notes: list[str] | None = None,
    taken: Mapping[str, str] | None = None,
) -> list[Flow]:
    """The coverage flows of `rs`, named f1, f2, ... in rule order (policy probes last).
    Why a rule got no flow goes to `notes` when it is given. `taken` (address -> side,
    as `sides` gives for another rule set's flows of the same run) keeps each address on
    the side it already has: one testbed host owns each."""
    d = _Deriver(rs, list(interfaces))
    d.side_of.update(taken or {})
    d.run()
    if notes is not None:
        # a rule reached on several paths has a flow when one path gives it one: what
        # took the flow on another path is no reason it has none
        covered = {f.rule.where() for f in d.flows if f.rule is not None}
        elsewhere = [n for n in d.taken if n.split(": no ", 1)[0] not in covered]
        notes.extend(dict.fromkeys([*d.notes, *elsewhere]))
    order = {r.ref.key(): i for i, r in enumerate(rs.rules())}
    d.flows.sort(key=lambda f: order.get(f.rule.key(), len(order)) if f.rule else len(order))
    return [replace(f, name=f"f{i}") for i, f in enumerate(d.flows, 1)]


def sides(flows: Sequence[Flow]) -> dict[str, str]:
    """The side each address of `flows` lies on: its interface, or "dut" for the DUT's."""
    out: dict[str, str] = {}
    for f in flows:
        out.setdefault(f.src, f.ingress or "?")
        out.setdefault(f.dst, "dut" if f.to_dut else (f.egress or "?"))
    return out


def dnat_served(rs: RuleSet, interfaces: Sequence[str], flow: Flow) -> Flow:
    """A flow of the user's own traffic as `rs` rewrites it: when the first nat
    prerouting rule that decides it is a DNAT, the flow is answered on the rewritten
    address and port (`served_by`, `served_port`), behind the interface the forward
    accept of the rewritten flow names, as a coverage flow of that DNAT rule is. The
    flow's fields must meet the rule (a rule on `iifname "wan0"` needs the flow's
    ingress); any other flow comes back as it was."""
    if flow.served_by is not None or flow.to_dut:
        return flow
    d = _Deriver(rs, list(interfaces))
    for c in rs.chains:
        if (c.hook, c.type) in (("prerouting", "nat"), ("forward", "filter")):
            entries: list[_Entry] = []
            d._walk(c, c, None, [], entries)
            d.walks[(c.family, c.table, c.name)] = entries
    for c in rs.chains:
        if (c.hook, c.type) != ("prerouting", "nat"):
            continue
        for e in d.walks[(c.family, c.table, c.name)]:
            if e.verdict in ("jump", "goto", "continue") or not covers(e.match, flow):
                continue
            if e.verdict != "dnat" or e.target is None:
                break  # another decision (accept, redirect, a DNAT from a map) takes it
            addr, port = _split_target(e.target)
            served = replace(flow, served_by=addr, served_port=port or flow.dport)
            return (
                served
                if flow.egress is not None
                else replace(served, egress=d._dnat_egress(served))
            )
    return flow


class _Deriver:
    def __init__(self, rs: RuleSet, interfaces: list[str]):
        self.rs, self.interfaces = rs, interfaces
        self.named: list[Named] = prefixes.named_prefixes(rs)
        self.flows: list[Flow] = []
        self.notes: list[str] = []
        self.taken: list[str] = []  # a flow taken by an earlier rule on one path
        self.walks: dict[tuple[str, str, str], list[_Entry]] = {}
        self.zones: dict[str, list[str]] = {}  # interface -> networks behind it
        self.used_ports: list[tuple[int, int]] = []
        # The DUT's own address on each (interface, family), chosen once, and every
        # source taken so far: one address is never both a client's and the DUT's.
        self.dut_addrs: dict[tuple[str | None, str], str] = {}
        self.sources: set[str] = set()
        # the side (interface, or "dut") each chosen address lies on: never two sides
        self.side_of: dict[str, str] = {}

    # -- the walk ---------------------------------------------------------------
    def run(self) -> None:
        for c in self.rs.chains:
            if c.hook in _HOOKS and c.type in ("filter", "nat"):
                entries: list[_Entry] = []
                self._walk(c, c, None, [], entries)
                self.walks[(c.family, c.table, c.name)] = entries
        for entries in self.walks.values():
            for e in entries:
                self._learn(e.match)
        # A rule reached on two paths (a user chain entered by two jumps) or once per
        # verdict-map element gets a flow for each.
        for entries in self.walks.values():
            for i, e in enumerate(entries):
                self._derive(e, entries[:i])
        for c in self.rs.chains:
            if c.hook in ("input", "forward") and c.type == "filter" and c.policy == "drop":
                self._policy_probe(c)

    def _walk(
        self, base: Chain, chain: Chain, inherited: Match | None, path: list[str], out: list[_Entry]
    ) -> None:
        here = f"{chain.family} {chain.table} {chain.name}"
        if here in path:
            raise MechanismError(
                f"chain {chain.name} jumps back into itself ({' -> '.join([*path, here])})",
                where=chain.rules[0].ref.where() if chain.rules else str(self.rs.source),
                fix="break the loop of jumps",
            )
        if len(path) > MAX_DEPTH:
            raise MechanismError(f"jumps deeper than {MAX_DEPTH} chains", where=here)
        for rule in chain.rules:
            own = matches.of(rule, self.rs)
            full = own if inherited is None else inherited.then(own)
            if rule.verdict == "vmap":
                for m, verdict, target in matches.vmap_elements(rule, self.rs):
                    m = m if inherited is None else inherited.then(m)
                    self._step(base, chain, rule, m, verdict, target, [*path, here], out)
            else:
                self._step(base, chain, rule, full, rule.verdict, rule.target, [*path, here], out)

    def _step(
        self,
        base: Chain,
        chain: Chain,
        rule: Rule,
        m: Match,
        verdict: str,
        target: str | None,
        path: list[str],
        out: list[_Entry],
    ) -> None:
        out.append(_Entry(rule, m, verdict, target, base, tuple(path)))
        if verdict in ("jump", "goto") and target is not None:
            entered = self.rs.chain(chain.family, chain.table, target)
            if entered is None:
                raise MechanismError(
                    f"jump to {target}, a chain the rule set lacks", where=rule.ref.where()
                )
            self._walk(base, entered, m, path, out)

    def _learn(self, m: Match) -> None:
        """The networks behind each interface, and the ports rules name."""
        if m.iif is not None:
            self.zones.setdefault(m.iif, []).extend(m.src)
        if m.oif is not None:
            self.zones.setdefault(m.oif, []).extend(m.dst)
        self.used_ports += m.dports

    # -- one flow ---------------------------------------------------------------
    def _derive(self, e: _Entry, earlier: list[_Entry]) -> None:
        hook, ctype = e.base.hook, e.base.type
        if ctype == "filter" and e.verdict in ("jump", "goto", "return", "continue", "queue"):
            return
        if ctype == "filter" and e.verdict in ACCEPTING:
            if e.match.ct_dnat:
                self._after_dnat(e)
                return
            flow = self._reaching(e, earlier, e.match, hook or "forward", "accept")
            if flow is not None:
                self._add(flow, e, "accept")
        elif ctype == "filter" and e.verdict in DENYING:
            flow = self._reaching(e, earlier, e.match, hook or "forward", "deny")
            if flow is not None:
                self._add(flow, e, "deny")
        elif ctype == "nat" and e.verdict in ("dnat", "redirect") and hook == "prerouting":
            flow = self._dnat_flow(e, earlier)
            if flow is not None:
                self._add(flow, e, "accept")
        elif ctype == "nat" and e.verdict in ("snat", "masquerade") and hook == "postrouting":
            flow = self._snat_flow(e, earlier)
            if flow is not None:
                self._add(flow, e, "accept")

    def _reaching(
        self, e: _Entry, earlier: list[_Entry], m: Match, hook: str, expect: str
    ) -> Flow | None:
        """A flow for `e` made from `m` that reaches `e`. While an earlier rule takes the
        flow first (a deciding rule, a goto to another chain), the flow is made again
        outside the prefixes that rule names: a zone dispatch `ip saddr @blocklist goto
        drop_zone` sends a blocklisted source elsewhere, so the flow for a rule after it
        comes from outside the blocklist. When the earlier rule names no prefix to leave,
        the rule gets no flow and a note says which rule took it."""
        where = e.rule.ref.where()
        why = ""
        for _ in range(_RETRIES):
            state = (set(self.sources), dict(self.side_of), dict(self.dut_addrs))
            flow = self._flow(m, hook, where)
            if flow is None:
                return None
            blocker, why = self._blocker(e, earlier, flow, expect)
            if blocker is None:
                return flow
            self.sources, self.side_of, self.dut_addrs = state
            outside = self._outside(m, blocker.match) if blocker is not e else None
            if outside is None:
                break
            m = outside
        self.taken.append(why)
        return None

    def _blocker(
        self, e: _Entry, earlier: list[_Entry], flow: Flow, expect: str
    ) -> tuple[_Entry | None, str]:
        """The earlier entry that keeps `flow` from `e` (e itself when a RETURN takes it
        out of its chain), and the note that says so."""
        where = e.rule.ref.where()
        noun = "probe" if expect == "deny" else "flow"
        if not any(x is e for x in _met([*earlier, e], flow)):
            tail = " (on an input chain, every flow is to the DUT's own address)"
            return e, (
                f"{where}: no {noun}: a RETURN before it takes every flow it matches out of "
                f"its chain{tail if expect == 'deny' else ''}"
            )
        for prior in _met(earlier, flow):
            if not covers(prior.match, flow):
                continue
            if expect == "accept" and prior.verdict in DENYING:
                return prior, (
                    f"{where}: no flow: the flow made for it is denied first by "
                    f"{prior.rule.ref.where()} (the rule may be unreachable)"
                )
            if expect == "deny" and prior.verdict in ACCEPTING:
                return prior, (
                    f"{where}: no probe: every flow it matches is accepted first by "
                    f"{prior.rule.ref.where()}"
                )
            if expect == "deny" and prior.verdict in DENYING:
                return prior, (
                    f"{where}: no probe: every flow it matches is denied first by "
                    f"{prior.rule.ref.where()}"
                )
            if prior.verdict == "goto" and _diverts(prior, e):
                return prior, (
                    f"{where}: no {noun}: every flow it matches is sent to chain "
                    f"{prior.target} first by {prior.rule.ref.where()}, and does not come back"
                )
        if e.base.type == "filter" and not e.match.ct_dnat:
            dnat = self._dnat_of(flow)
            if dnat is not None:
                return dnat, (
                    f"{where}: no {noun}: every flow it matches is rewritten first by "
                    f"{dnat.rule.ref.where()} ({dnat.verdict} in prerouting)"
                )
        return None, ""

    def _dnat_of(self, flow: Flow) -> _Entry | None:
        """The nat prerouting rule that rewrites `flow`'s destination before any filter
        rule sees it, if one does."""
        for c in self.rs.chains:
            if (c.hook, c.type) != ("prerouting", "nat"):
                continue
            walk = self.walks.get((c.family, c.table, c.name), [])
            for i, d in enumerate(walk):
                if d.verdict not in ("dnat", "redirect") or not covers(d.match, flow):
                    continue
                if d.verdict == "dnat" and d.target is None:
                    # its target comes from a map keyed by what the packet carries (`dnat
                    # to tcp dport map @ports`): which flows it rewrites is the map's keys,
                    # which the match does not say, so it is not known to take this one
                    continue
                if self._blocker(d, walk[:i], flow, "nat")[0] is None:
                    return d
        return None

    def _add(self, flow: Flow, e: _Entry, expect: str) -> None:
        for soft in e.match.soft:
            self.notes.append(f"{e.rule.ref.where()}: {soft}")
        self.flows.append(replace(flow, expect=expect, rule=e.rule.ref))  # type: ignore[arg-type]

    def _flow(self, m: Match, hook: str, where: str) -> Flow | None:
        if m.cannot:
            self.notes.append(f"{where}: no flow: {'; '.join(m.cannot)}")
            return None
        if not m.new_connections():
            states = ",".join(sorted(m.ct_states or ()))
            self.notes.append(
                f"{where}: no flow: it matches only connections in state {states}, "
                "which no new flow is (the flows' replies exercise established ones)"
            )
            return None
        if m.iif == "lo" or m.oif == "lo":
            self.notes.append(f"{where}: no flow: loopback traffic stays inside the DUT")
            return None
        if hook == "forward" and m.iif is not None and m.iif == m.oif:
            self.notes.append(
                f"{where}: no flow: it forwards between hosts behind one interface "
                f"({m.iif}), and the testbed has one host behind each"
            )
            return None
        proto = self._protocol(m)
        if proto is None:
            self.notes.append(f"{where}: no flow: protocol {', '.join(m.protos)} is not sent")
            return None
        ingress, egress, to_dut = self._interfaces(m, hook)
        family = m.family or _family_of(m.src + m.dst) or "ip"
        src_side = ingress or "?"
        dst_side = "dut" if to_dut else (egress or "?")
        src = self._address(
            m.src,
            m.src_not,
            ingress,
            family,
            [*self.dut_addrs.values(), *self._elsewhere(src_side)],
        )
        self.sources.add(src)
        self.side_of.setdefault(src, src_side)
        if m.dst:
            dst = self._address(m.dst, m.dst_not, None, family, [src])
        elif (
            to_dut
            and (ingress, family) in self.dut_addrs
            and not _inside(self.dut_addrs[(ingress, family)], m.dst_not)
        ):
            dst = self.dut_addrs[(ingress, family)]
        else:
            zone = ingress if to_dut else egress
            taken = self.sources if to_dut else self.sources | set(self.dut_addrs.values())
            dst = self._address(
                [], m.dst_not, zone, family, sorted({*taken, *self._elsewhere(dst_side)})
            )
            if to_dut:
                self.dut_addrs[(ingress, family)] = dst
        self.side_of.setdefault(dst, dst_side)
        dport = None
        if proto != "icmp":
            dport = m.dports[0][0] if m.dports else self._free_port()
        return Flow(
            name="",
            protocol=proto,
            src=src,
            dst=dst,
            dport=dport,
            ingress=ingress,
            egress=egress,
            to_dut=to_dut,
            sport=m.sport,
        )

    def _elsewhere(self, side: str) -> list[str]:
        """Addresses already placed on another side than `side` (one host owns each)."""
        return sorted(a for a, where in self.side_of.items() if where != side)

    def _protocol(self, m: Match) -> Protocol | None:
        if not m.protos:
            return "tcp"
        for p in m.protos:
            if p in ("tcp", "udp", "icmp"):
                return p  # type: ignore[return-value]
            if p in ("ipv6-icmp", "icmpv6", "1", "58"):
                return "icmp"
            if p == "6":
                return "tcp"
            if p == "17":
                return "udp"
        return None

    def _interfaces(self, m: Match, hook: str) -> tuple[str | None, str | None, bool]:
        if hook == "input":
            return m.iif or self._other(m.iif_not), None, True
        ingress = m.iif or self._other([*m.iif_not, *([m.oif] if m.oif else [])])
        egress = m.oif or self._other([*m.oif_not, *([ingress] if ingress else [])])
        return ingress, egress, False

    def _other(self, avoid: Sequence[str]) -> str | None:
        for i in self.interfaces:
            if i != "lo" and i not in avoid:
                return i
        return None

    def _address(
        self,
        choices: list[str],
        exclude: list[str],
        zone: str | None,
        family: str,
        avoid: list[str],
    ) -> str:
        version = 6 if family == "ip6" else 4
        avoid_nets = [*exclude, *[matches.network(a) for a in avoid]]
        for c in choices:
            addr = prefixes.pick_address(c, self.named, avoid_nets)
            if not _inside(addr, exclude) and addr not in avoid:
                return addr
        behind = [
            n
            for n in self.zones.get(zone or "", [])
            if ipaddress.ip_network(n).version == version
            and ipaddress.ip_network(n).prefixlen
            and not any(_subnet(n, x) for x in exclude)
        ]
        if behind:
            widest = min(behind, key=lambda n: ipaddress.ip_network(n).prefixlen)
            addr = prefixes.pick_address(widest, self.named, avoid_nets)
            if not _inside(addr, exclude) and addr not in avoid:
                return addr
        extra = [Named(network=matches.network(a), where="flow", what="flow") for a in avoid]
        return prefixes.outside_all([*self.named, *extra], family)

    def _free_port(self) -> int:
        port = _FREE_PORT
        while any(lo <= port <= hi for lo, hi in self.used_ports):
            port += 1
        return port

    # -- NAT ----------------------------------------------------------------------
    def _dnat_flow(self, e: _Entry, earlier: list[_Entry] | None = None) -> Flow | None:
        where = e.rule.ref.where()
        m = e.match
        if e.verdict == "dnat" and e.target is None:
            self.notes.append(f"{where}: no flow: the DNAT target comes from a map")
            return None
        hook = "input" if not m.dst or e.verdict == "redirect" else "forward"
        flow = self._reaching(e, self._before(e) if earlier is None else earlier, m, hook, "nat")
        if flow is None:
            return None
        addr, port = _split_target(e.target)
        if e.verdict == "redirect":
            return replace(flow, egress=None, to_dut=True, served_port=port or flow.dport)
        served = replace(flow, served_by=addr, served_port=port or flow.dport)
        return replace(served, egress=self._dnat_egress(served))

    def _outside(self, m: Match, taker: Match) -> Match | None:
        """`m` with what `taker` names and `m` leaves open excluded (its prefixes, and
        the interface it names while another is left), or None when nothing new is left
        to exclude (`m` lies inside them, or already excludes them)."""

        def new(own: list[str], own_not: list[str], theirs: list[str]) -> list[str]:
            if own and all(any(_subnet(o, t) for t in theirs) for o in own):
                return []  # all `m` allows lies in them: no way round
            return [
                n
                for n in theirs
                if n not in own_not
                and not (own and all(_subnet(o, n) for o in own))
                and ipaddress.ip_network(n).prefixlen
            ]

        def leave(own: str | None, own_not: list[str], theirs: str | None) -> list[str]:
            if own is not None or theirs is None or theirs in own_not:
                return []
            left = [i for i in self.interfaces if i != "lo" and i not in (*own_not, theirs)]
            return [theirs] if left else []

        src, dst = new(m.src, m.src_not, taker.src), new(m.dst, m.dst_not, taker.dst)
        iif, oif = leave(m.iif, m.iif_not, taker.iif), leave(m.oif, m.oif_not, taker.oif)
        if not (src or dst or iif or oif):
            return None
        return replace(
            m,
            src_not=[*m.src_not, *src],
            dst_not=[*m.dst_not, *dst],
            iif_not=[*m.iif_not, *iif],
            oif_not=[*m.oif_not, *oif],
        )

    def _before(self, e: _Entry) -> list[_Entry]:
        """The entries of e's walk before it."""
        for entries in self.walks.values():
            for i, x in enumerate(entries):
                if x is e:
                    return entries[:i]
        return []

    def _dnat_egress(self, flow: Flow) -> str | None:
        """The interface a DNAT'd flow leaves by: the one a forward accept that names an
        outgoing interface lets the rewritten flow out of (a router's DMZ leg), else the
        first interface other than its ingress."""
        others = [i for i in self.interfaces if i not in ("lo", flow.ingress)]
        rewritten = replace(flow, dst=flow.served_by or flow.dst, dport=flow.served_port)
        for entries in self.walks.values():
            for f in entries:
                if f.base.type != "filter" or f.base.hook != "forward" or f.match.oif is None:
                    continue
                if f.verdict not in ACCEPTING or f.match.oif not in others:
                    continue
                if covers(f.match, replace(rewritten, egress=f.match.oif)):
                    return f.match.oif
        return others[0] if others else None

    def _after_dnat(self, e: _Entry) -> None:
        """A forward accept of DNAT'd traffic: the flow of a DNAT rule it lets through.
        On an input chain it meets only traffic rewritten to the DUT itself (a redirect):
        a flow a DNAT sends to another host never reaches it."""
        if e.base.hook == "input":
            for entries in self.walks.values():
                for d in entries:
                    if d.base.type == "nat" and d.verdict == "redirect":
                        flow = self._dnat_flow(d)
                        if flow is not None and covers(replace(e.match, ct_dnat=False), flow):
                            self._add(flow, e, "accept")
                            return
            self.notes.append(
                f"{e.rule.ref.where()}: no flow: it accepts traffic DNAT'd to the DUT itself, "
                "and no rule of the rule set redirects to the DUT"
            )
            return
        for entries in self.walks.values():
            for d in entries:
                if d.base.type != "nat" or d.verdict != "dnat" or d.target is None:
                    continue
                flow = self._dnat_flow(d)
                if flow is None or flow.served_by is None:
                    continue
                served = replace(flow, dst=flow.served_by, dport=flow.served_port)
                if covers(replace(e.match, ct_dnat=False), served):
                    self._add(flow, e, "accept")
                    return
        self.notes.append(
            f"{e.rule.ref.where()}: no flow: it accepts DNAT'd traffic and no DNAT rule "
            "of the rule set rewrites to what it matches"
        )

    def _snat_flow(self, e: _Entry, earlier: list[_Entry]) -> Flow | None:
        """A flow the source NAT rule rewrites that the filter rules let through: the
        first forward accept that can meet it lends its protocol, port and far side."""
        for entries in self.walks.values():
            for f in entries:
                if f.base.type != "filter" or f.base.hook != "forward":
                    continue
                if f.verdict not in ACCEPTING or f.match.cannot or f.match.ct_dnat:
                    continue
                if not f.match.new_connections() or f.match.oif not in (None, e.match.oif):
                    continue
                combined = f.match.then(e.match)
                flow = self._reaching(e, earlier, combined, "forward", "nat")
                if flow is not None and covers(f.match, flow):
                    return flow
        return self._reaching(e, earlier, e.match, "forward", "nat")

    # -- the policy -----------------------------------------------------------------
    def _policy_probe(self, c: Chain) -> None:
        entries = self.walks.get((c.family, c.table, c.name), [])
        m = Match(protos=["tcp"], dports=[(self._free_port(), self._free_port())])
        where = f"{c.family} {c.table} {c.name} policy"
        candidates: list[str | None] = [i for i in self.interfaces if i != "lo"]
        for ingress in candidates or [None]:
            probe = replace(m, iif=ingress)
            flow = self._flow(probe, c.hook or "forward", where)
            if flow is None:
                continue
            if not any(
                e.verdict not in ("jump", "goto", "return") and covers(e.match, flow)
                for e in _met(entries, flow)
            ):
                self.flows.append(replace(flow, expect="deny", rule=None, origin="coverage:policy"))
                return
        self.notes.append(f"{where}: no probe: every flow tried is matched by a rule first")


def covers(m: Match, flow: Flow) -> bool:
    """Whether every packet of `flow` that opens it meets `m`, as far as a simple check
    of interfaces, protocol, port and prefixes can tell (unknown matches: no)."""
    if m.cannot or not m.new_connections() or (m.ct_dnat and flow.served_by is None):
        return False
    if (m.iif is not None and m.iif != flow.ingress) or flow.ingress in m.iif_not:
        return False
    if m.dst_local is not None and m.dst_local != flow.to_dut:
        return False
    if (m.oif is not None and m.oif != flow.egress) or flow.egress in m.oif_not:
        return False
    if m.protos and flow.protocol not in m.protos:
        return False
    if m.dports and not any(lo <= (flow.dport or -1) <= hi for lo, hi in m.dports):
        return False
    if (m.src and not _inside(flow.src, m.src)) or _inside(flow.src, m.src_not):
        return False
    if (m.dst and not _inside(flow.dst, m.dst)) or _inside(flow.dst, m.dst_not):
        return False
    return not (m.icmp_types is not None and "echo-request" not in m.icmp_types)


def _diverts(goto: _Entry, e: _Entry) -> bool:
    """Whether a flow `goto` takes never reaches `e`: `e` lies in goto's chain or below a
    later rule of it (a goto does not come back), and not in the chain it goes to."""
    depth = len(goto.path)
    if e.path[:depth] != goto.path:
        return False
    here = goto.path[-1].rsplit(" ", 1)[0]
    return not (len(e.path) > depth and e.path[depth] == f"{here} {goto.target}")


def _subnet(a: str, b: str) -> bool:
    na, nb = ipaddress.ip_network(a), ipaddress.ip_network(b)
    return na.version == nb.version and na.subnet_of(nb)  # type: ignore[arg-type]


def _inside(addr: str, nets: Sequence[str]) -> bool:
    a = ipaddress.ip_address(addr)
    return any(
        a in ipaddress.ip_network(n) for n in nets if ipaddress.ip_network(n).version == a.version
    )


def _family_of(nets: Sequence[str]) -> str | None:
    for n in nets:
        return "ip6" if ":" in n else "ip"
    return None


def _split_target(target: str | None) -> tuple[str | None, int | None]:
    """ "10.1.5.200" / "10.3.0.1:80" / "[2001:db8::1]:80" / "10.3.0.1-10.3.0.5:80-90" /
    ":5353" -> the first address and the first port."""
    if not target:
        return None, None
    if target.startswith("["):
        addr, _, rest = target[1:].partition("]")
        port = rest.lstrip(":")
    elif target.count(":") == 1:
        addr, _, port = target.partition(":")
    else:
        addr, port = target, ""
    first = port.split("-")[0]
    return addr.split("-")[0] or None, int(first) if first else None
