"""Kind `flows`: a rule-set review's traffic, a mix of live flows through the DUT.

Each flow is a real TCP connection (handshake, request, response, the server's FIN
first), UDP exchange or ICMP echo (the destination's kernel answers it), from its own
testbed source to its own destination, so that stateful rules see every flow as they
see production traffic. Which flows: `traffic` says (`"coverage"`: one flow per
accepting rule and a probe per denying rule of the scenario's rule set; or a path to
the user's own CSV, conntrack dump or pcap); the placement (secperf.rulesets) puts
them on the testbed as `ctx.plan.flows`, which is all this executor reads.

One engine server (`kind = "flows"`, `role = "server"`) runs in every host that
answers flows (the server, the DUT for flows to its own addresses, the client for an
inbound DNAT), listening where each flow arrives (after a DNAT that is not where it
was sent) and answering only the flows' sources and the forwarding hosts' addresses
(a masquerade's); one engine client runs in every host that opens flows, all at once
for the same duration, and their results merge into one record.

The weighted flows (the ones expected through, and the user's own) share the
attempts by their weights (the engine's stride schedule: within 1 %); `parallel` and
`rate` are the totals, split over the client hosts by their flows' weights. A probe
(a flow that must stay denied, or one the variant's rule set was traced to deny
before any traffic: in a review, a flow the other rule set accepts) is attempted
`PROBE_RATE` times a second on its own schedule, so its timeouts do not take the loops'
time. With `probes = "check"` a
probe that got through, or an expected flow that never did, is a policy violation:
the record's checks say so (applicable to the variants, where the rule set is
loaded; the baseline forwards everything)."""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from secperf.engine import EngineTest, Record
from secperf.errors import EngineError
from secperf.metric import (
    LAT_MEAN,
    LAT_P99,
    SD_CONN,
    Metric,
    MetricRow,
    field,
    latency,
    service_demand,
)
from secperf.metric import Record as RecordView
from secperf.rulesets.model import PlacedFlow
from secperf.schema.fields import PerSecond, Timeout
from secperf.testbed.topology import FORWARDING_ROLES, Topology
from secperf.workloads.base import MeasureContext, WorkloadKind, WorkloadPoint, WorkloadSpec
from secperf.workloads.generators import merge_latency

# Attempts a second of each probe (a flow expected denied), outside the weights.
PROBE_RATE = 1.0
# How long a server may take to bind its sockets; after the clients, to report.
SERVER_START_S = 10.0
SERVER_MARGIN_S = 30.0


class FlowsWorkload(WorkloadSpec):
    """Live flows through the DUT: `traffic` ("coverage", or a CSV / conntrack dump /
    pcap path), `parallel` attempts under way at once (closed loop) or `rate`
    attempts/s (open loop), each with a `timeout`; `probes = "check"` reports a
    denied flow that got through (or an expected one that never did)."""

    kind: Literal["flows"]
    # "coverage" (derived from the rule set) or the path of the user's own traffic;
    # the placement reads it, the executor sends what was placed.
    traffic: str = "coverage"
    """`"coverage"`, or a path to a CSV, conntrack dump (`conntrack -L -o extended`) or pcap."""
    parallel: Annotated[int, Field(ge=1, le=1024)] = 4
    """1 … 1024: attempts under way at once (closed loop), all client hosts together, split by
    their flows' weights.
    """
    rate: PerSecond | None = None
    """Attempts/s on one absolute schedule (open loop), split as `parallel`."""
    timeout: Timeout = 1.0
    """Each attempt's deadline, connect to close: a drop is a timeout, a reject a refusal, counted,
    never fatal.
    """
    probes: Literal["check", "off"] = "check"
    """`"check"`: a probe that got through, or an expected flow that never did, is a policy
    violation; `"off"`.
    """

    def default_name(self) -> str:
        return "flows" if self.traffic == "coverage" else "flows-own"


def _weight_of(pf: PlacedFlow, denied: frozenset[str] = frozenset()) -> float | None:
    """A weighted flow's weight; None for a probe (on its own rate): a flow expected
    denied, or one this variant's rule set was traced to deny (`denied`: in a review, a
    flow the other rule set accepts). Weighted, a denied flow would hold a loop's
    connection for its whole timeout on every attempt, and starve its host's other
    flows of their share."""
    if pf.flow.expect == "deny" or pf.flow.name in denied:
        return None
    return float(pf.flow.weight)


def _live(flows: Sequence[PlacedFlow]) -> tuple[list[tuple[int, PlacedFlow]], list[dict[str, Any]]]:
    """The flows the engine sends, each with its id (its place in the plan), and the
    ones it cannot (another protocol, no port, no weight), each with why."""
    live: list[tuple[int, PlacedFlow]] = []
    skipped: list[dict[str, Any]] = []
    for i, pf in enumerate(flows):
        f = pf.flow
        why = None
        if f.protocol not in ("tcp", "udp", "icmp"):
            why = f"{f.protocol} flows are not sent (TCP, UDP and ICMP echo only)"
        elif f.protocol != "icmp" and (f.dport is None or pf.listen_port is None):
            why = "no destination port"
        elif (w := _weight_of(pf)) is not None and w <= 0:
            why = "weight 0"
        if why:
            skipped.append({"name": f.name, "why": why})
        else:
            live.append((i, pf))
    return live, skipped


def _forwarders(topology: Topology, family: int) -> list[str]:
    """Every address of the forwarding hosts: what a server sees after a masquerade,
    or after a source NAT to the router's own address (an extra address it owns)."""
    out: list[str] = []
    for h in topology.hosts:
        if h.role not in FORWARDING_ROLES:
            continue
        for link in topology.links_of(h.name):
            table = link.addr4 if family == 4 else link.addr6
            if h.name in table:
                out.append(str(table[h.name].ip))
        out += [a for a in topology.extra_addresses.get(h.name, ()) if _family(a) == family]
    return out


def _family(addr: str) -> int:
    return ipaddress.ip_address(addr).version


def _split(total: float, shares: dict[str, float]) -> dict[str, float]:
    s = sum(shares.values())
    return {k: total * v / s if s > 0 else total / len(shares) for k, v in shares.items()}


@dataclass(frozen=True)
class Specs:
    clients: dict[str, dict[str, Any]]  # client host -> engine spec
    servers: dict[str, dict[str, Any]]  # server host -> engine spec


def engine_specs(
    ctx: MeasureContext, p: FlowsWorkload, live: list[tuple[int, PlacedFlow]]
) -> Specs:
    """One client spec per client host, one server spec per server host."""
    common = {
        "kind": "flows",
        "duration": p.duration,
        "warmup": p.warmup,
        "timeout": p.timeout,
    }
    by_client: dict[str, list[tuple[int, PlacedFlow]]] = defaultdict(list)
    by_server: dict[str, list[tuple[int, PlacedFlow]]] = defaultdict(list)
    for i, pf in live:
        by_client[pf.client].append((i, pf))
        if pf.flow.protocol != "icmp":  # the destination's kernel answers an echo
            by_server[pf.server].append((i, pf))
    weights = {
        host: sum(w for _, pf in fl if (w := _weight_of(pf, ctx.denied)) is not None)
        for host, fl in by_client.items()
    }
    parallel = {h: max(1, round(v)) for h, v in _split(p.parallel, weights).items()}
    rates = _split(p.rate, weights) if p.rate is not None else {}
    clients: dict[str, dict[str, Any]] = {}
    for host, fl in by_client.items():
        entries = []
        for i, pf in fl:
            f = pf.flow
            e: dict[str, Any] = {
                "id": i,
                "name": f.name,
                "protocol": f.protocol,
                "src": pf.src,
                "dst": pf.dst,
                "request": f.request,
            }
            if f.protocol != "icmp":  # an echo has no port, and its reply is its size
                e.update(dport=f.dport, response=f.response)
            w = _weight_of(pf, ctx.denied)
            e.update({"weight": w} if w is not None else {"rate": PROBE_RATE})
            entries.append(e)
        spec = {**common, "parallel": parallel[host], "flows": entries}
        if host in rates and rates[host] > 0:
            spec["rate"] = rates[host]
        clients[host] = spec
    servers: dict[str, dict[str, Any]] = {}
    for host, fl in by_server.items():
        families = {_family(pf.listen) for _, pf in fl}
        allow = list(dict.fromkeys([pf.src for _, pf in fl]))
        for fam in sorted(families):
            allow += [a for a in _forwarders(ctx.topology, fam) if a not in allow]
        senders = {pf.client for _, pf in fl}
        probes = sum(1 for _, pf in fl if _weight_of(pf, ctx.denied) is None)
        servers[host] = {
            **common,
            "role": "server",
            "parallel": min(1024, sum(parallel[c] for c in senders) + probes),
            "allow": allow,
            "flows": [
                {
                    "id": i,
                    "name": pf.flow.name,
                    "protocol": pf.flow.protocol,
                    "listen": pf.listen,
                    "port": pf.listen_port,
                    "request": pf.flow.request,
                    "response": pf.flow.response,
                }
                for i, pf in fl
            ],
        }
    return Specs(clients, servers)


def require_attempted(flows: Sequence[dict[str, Any]], p: FlowsWorkload) -> None:
    """A test that attempted no flow is not run (an EngineError with the reason): no
    verdict on the policy, passed or failed."""
    if not any(int(f.get("attempts") or 0) > 0 for f in flows):
        raise EngineError(
            f"the flows test attempted none of its {len(flows)} flows in {p.duration:g} s",
            where=f"workload {p.name}",
            fix="lengthen duration, or raise rate or parallel, so that every client "
            "starts its flows",
        )


def policy_checks(
    flows: Sequence[dict[str, Any]],
    placed: dict[str, PlacedFlow],
    *,
    applicable: bool,
    own: Sequence[Path] = (),
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The checks of one test, and its violations: a probe (expect deny) that got
    through, an expected flow (expect accept) that never did. With `own` (the variant's
    rule files), only flows derived from them are expected: a review's other rule set
    may decide the rest otherwise, which is a behaviour change, not a violation."""
    violations: list[dict[str, Any]] = []
    probes = expected = 0
    # a flow the client never attempted was not run: it proves nothing either way, so it
    # is named beside the checks, never scored as a pass or a failure
    not_run: dict[str, list[str]] = {"deny": [], "accept": []}
    for f in flows:
        pf = placed.get(str(f.get("name")))
        if pf is None or pf.flow.expect is None:
            continue
        if own and pf.flow.rule is not None and pf.flow.rule_in(set(own)) is None:
            continue
        if int(f.get("attempts") or 0) <= 0:
            not_run["deny" if pf.flow.expect == "deny" else "accept"].append(pf.flow.name)
            continue
        rule = pf.flow.rule.where() if pf.flow.rule is not None else None
        ok = int(f.get("ok") or 0)
        if pf.flow.expect == "deny":
            probes += 1
            if ok > 0:
                violations.append(
                    {
                        "flow": pf.flow.name,
                        "expect": "deny",
                        "ok": ok,
                        "rule": rule,
                        "detail": f"{ok} of {f.get('attempts')} attempts got through",
                    }
                )
        else:
            expected += 1
            if ok == 0:
                violations.append(
                    {
                        "flow": pf.flow.name,
                        "expect": "accept",
                        "ok": 0,
                        "rule": rule,
                        "detail": f"none of {f.get('attempts')} attempts got through "
                        f"({f.get('failures')})",
                    }
                )
    let_through = [v for v in violations if v["expect"] == "deny"]
    blocked = [v for v in violations if v["expect"] == "accept"]

    def unrun(expect: str) -> str:
        names = not_run[expect]
        return f"; not run (0 attempts): {', '.join(names)}" if names else ""

    checks = [
        {
            "name": "every denied probe stayed denied",
            "passed": not let_through,
            "applicable": applicable and probes > 0,
            "detail": (
                "; ".join(f"{v['flow']}: {v['detail']}" for v in let_through)
                or f"{probes} probes, none through"
            )
            + unrun("deny"),
        },
        {
            "name": "every expected flow got through",
            "passed": not blocked,
            "applicable": applicable and expected > 0,
            "detail": (
                "; ".join(f"{v['flow']}: {v['detail']}" for v in blocked)
                or f"{expected} flows, each through"
            )
            + unrun("accept"),
        },
    ]
    return checks, violations


def _num(r: Record, key: str) -> float:
    v = r.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def merge(clients: Sequence[tuple[str, Record]], servers: Sequence[tuple[str, Record]]) -> Record:
    """One record for every client host's result: totals summed, flows listed, shares
    over all the weighted attempts."""
    records = [r for _, r in clients]
    first = records[0]
    window = max(_num(r, "duration_s") for r in records) or 1.0
    merged: Record = {
        "type": "result",
        "kind": "flows",
        "duration_s": window,
        "warmup_s": first.get("warmup_s"),
        "machine_cpu": first.get("machine_cpu"),
        "host_cpu": first.get("host_cpu"),
    }
    for key in ("attempts", "ok", "failed", "late", "bytes"):
        merged[key] = int(sum(_num(r, key) for r in records))
    merged["failures"] = {
        k: int(sum(_num(r.get("failures") or {}, k) for r in records))
        for k in (first.get("failures") or {})
    }
    flows = [dict(f) for r in records for f in r.get("flows") or []]
    weighted = sum(int(f.get("attempts") or 0) for f in flows if f.get("weight") is not None)
    wsum = sum(float(f["weight"]) for f in flows if f.get("weight") is not None)
    for f in flows:
        w = f.get("weight")
        f["share"] = (
            (int(f.get("attempts") or 0) / weighted) if w is not None and weighted else None
        )
        f["weight_share"] = float(w) / wsum if w is not None and wsum else None
    merged["flows"] = flows
    ok_weighted = sum(int(f.get("ok") or 0) for f in flows if f.get("weight") is not None)
    merged["transactions"] = merged["ok"]
    # the primary rate: successful flows a second (probes' attempts are few and fixed)
    merged["transactions_per_second"] = merged["ok"] / window
    merged["flow_rate"] = ok_weighted / window
    merged["attempts_per_second"] = merged["attempts"] / window
    merged["bits_per_second"] = merged["bytes"] * 8.0 / window
    merged["failure_ratio"] = (
        sum(int(f.get("failed") or 0) for f in flows if f.get("weight") is not None) / weighted
        if weighted
        else None
    )
    lats = [r.get("latency_us") for r in records]
    merged["latency_us"] = lats[0] if len(lats) == 1 else merge_latency(lats)
    cpus: list[dict[str, Any]] = []
    for r in records:
        c = (r.get("cpu") or {}).get("client")
        if isinstance(c, dict):
            cpus.append(c)
    if cpus and len(cpus) == len(records):
        keys = list(cpus[0])
        merged["cpu"] = {"client": {k: sum(_num(c, k) for c in cpus) for k in keys}}
    merged["clients"] = [h for h, _ in clients]
    merged["servers"] = {
        h: {k: r.get(k) for k in ("answered", "refused_sources", "bad_requests", "busy_max")}
        for h, r in servers
    }
    return merged


def _side(ctx: MeasureContext, role: str) -> Any:
    def keep(rec: Record) -> None:
        ctx.keep({"type": "side", "role": role, "record": rec})

    return keep


@dataclass(frozen=True)
class FlowsExecutor:
    """Servers first (each bound before any flow leaves), then every client host at
    once; the servers end (SIGINT) once the clients are done."""

    def measure(self, ctx: MeasureContext, point: WorkloadPoint[FlowsWorkload]) -> Record:
        p = point.spec
        live, skipped = _live(ctx.plan.flows)
        if not live:
            raise EngineError(
                "the flows workload has no TCP, UDP or ICMP flow to send"
                + (f" ({len(skipped)} skipped: {skipped[0]['why']})" if skipped else ""),
                where=f"workload {p.name}",
                fix='give it traffic with TCP or UDP flows (traffic = "coverage" needs a '
                "rule set that accepts or drops some), beside a ruleset mechanism",
            )
        specs = engine_specs(ctx, p, live)
        budget = p.duration + p.warmup + 2 * p.timeout + SERVER_MARGIN_S
        servers: list[tuple[str, EngineTest]] = []
        clients: list[tuple[str, EngineTest]] = []
        try:
            for host, spec in specs.servers.items():
                servers.append((host, EngineTest(ctx.testbed.host(host), spec, timeout=budget)))
            for _, test in servers:
                test.wait_started(SERVER_START_S)
            for host, spec in specs.clients.items():
                clients.append((host, EngineTest(ctx.testbed.host(host), spec, timeout=budget)))
            for _, test in clients:
                test.wait_started()
            results = [
                (host, test.collect(_side(ctx, f"flows-client-{host}")).result)
                for host, test in clients
            ]
            for _, test in servers:
                test.interrupt()
            served = [
                (host, test.collect(_side(ctx, f"flows-server-{host}")).result)
                for host, test in servers
            ]
        except BaseException:
            for _, test in [*clients, *servers]:
                test.stop()
            raise
        rec = merge(results, served)
        require_attempted(rec["flows"], p)
        placed = {pf.flow.name: pf for _, pf in live}
        for f in rec["flows"]:
            pf = placed.get(str(f.get("name")))
            if pf is not None:
                f["expect"] = pf.flow.expect
                f["rule"] = pf.flow.rule.where() if pf.flow.rule is not None else None
                f["client"], f["server"] = pf.client, pf.server
        rec["skipped"] = skipped
        if p.probes == "check":
            applicable = ctx.variant != "baseline" and not ctx.direct
            own = [f for mech, _ in ctx.mechanisms for f in mech.rule_files()]
            checks, violations = policy_checks(rec["flows"], placed, applicable=applicable, own=own)
            rec["checks"] = checks
            rec["violations"] = violations if applicable else []
            rec["passed"] = all(c["passed"] for c in checks if c["applicable"])
        else:
            rec["checks"], rec["violations"], rec["passed"] = [], [], True
        ctx.keep(rec)
        return rec


FLOW_RATE = Metric("flow_rate", "Flow rate", "flows/s", True, True)
ATTEMPT_RATE = Metric("flow_attempt_rate", "Flow attempts", "attempts/s", True, False)
FLOW_FAILURES = Metric("flow_failure_pct", "Failed flows", "%", False, False)
VIOLATIONS = Metric("policy_violations", "Policy violations", "flows", False, False)


def _failure_pct(r: RecordView) -> float | None:
    ratio = r.get("failure_ratio")
    return None if not isinstance(ratio, int | float) else 100.0 * float(ratio)


def _violations(r: RecordView) -> float | None:
    v = r.get("violations")
    return float(len(v)) if isinstance(v, list) else None


METRICS: tuple[MetricRow, ...] = (
    # successful weighted flows a second: each a connection or exchange through the DUT
    (FLOW_RATE, field("flow_rate")),
    (SD_CONN, service_demand(field("transactions"))),
    (ATTEMPT_RATE, field("attempts_per_second")),
    (FLOW_FAILURES, _failure_pct),
    (LAT_MEAN, latency("mean")),
    (LAT_P99, latency("p99")),
    (VIOLATIONS, _violations),
)

KIND = WorkloadKind(
    name="flows",
    model=FlowsWorkload,
    executor=FlowsExecutor(),
    metrics=METRICS,
    work_unit=("conn", field("transactions")),
    moved=("ok",),
    checks=True,
    test_seconds=lambda s, _bps: s.duration + s.warmup + 2 * s.timeout,
    # the plan places a rule-set review's traffic for it: "coverage" or a flow file
    rule_set_traffic=lambda s: s.traffic,
)
