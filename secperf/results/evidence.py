"""What a run's rounds say beyond their metrics: the machine's noise over each test,
the bottleneck of each row, the kernel's softirq time of the traced round.

The summary (secperf.results.summary) groups the records by point and configuration;
this module reads a group's `machine`, `links` and traced records and run.json's
placement, roles and offered rates, and turns them into the summary's `noise`,
`bottleneck`, `comparison` and `softirq` fields (docs/data-format.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from secperf.metric import num, path
from secperf.results.bottleneck import Bottleneck, Evidence, LinkUse, bottleneck, mean
from secperf.results.metrics import CpuBreakdown, SearchReading, offered_metric, work_unit

BASELINE = "baseline"


class GroupView(Protocol):
    """What this module reads of a summary group."""

    workload: str
    point_id: str
    label: str
    variant: str
    kind: str
    point: dict[str, Any]
    cpu: dict[int, CpuBreakdown]
    machine: dict[int, dict[str, Any]]
    links: dict[int, dict[str, Any]]
    traced: dict[str, dict[str, Any]]
    values: dict[str, dict[int, float]]
    searches: dict[str, dict[int, SearchReading]]


# -- the machine's noise ----------------------------------------------------------------


def noise(group: GroupView) -> dict[str, Any] | None:
    """Other processes' CPU on the testbed's CPUs and the load average over the rounds
    kept (a round measured again counts its last attempt); None without `machine`
    records (a run of an older secperf, or real hosts)."""
    recs = [group.machine[r] for r in sorted(group.machine)]
    others = [x for r in recs if (x := num(r.get("others_pct"))) is not None]
    if not recs:
        return None
    loads = [
        x for r in recs for x in (r.get("load") or []) if isinstance(x, int | float) and x >= 0
    ]
    accounted = [x for r in recs if (x := num(r.get("accounted_pct"))) is not None]
    return {
        "n": len(recs),
        "source": recs[-1].get("source"),
        "others_pct_mean": mean(others),
        "others_pct_max": max(others) if others else None,
        "disturbed_n": sum(1 for r in recs if r.get("disturbed")),
        "disturbed_pct": num(recs[-1].get("disturbed_pct")),
        "load_mean": mean(loads),
        "load_max": max(loads) if loads else None,
        "accounted_pct": mean(accounted),
    }


# -- the bottleneck --------------------------------------------------------------------


def roles_of(meta: Mapping[str, Any], point_id: str) -> dict[str, str]:
    """Host -> its part at this point: generator, server, dut (every forwarding host)."""
    roles = {str(h): "dut" for h in meta.get("forwarding") or []}
    ends: Mapping[str, Any] = (meta.get("endpoints") or {}).get(point_id) or {}
    for host in ends.get("generators") or []:
        roles[str(host)] = "generator"
    if ends.get("server"):
        roles[str(ends["server"])] = "server"
    return roles


def _links(group: GroupView) -> list[LinkUse]:
    by_dir: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in group.links.values():
        for d in rec.get("directions") or []:
            by_dir.setdefault((str(d.get("link")), str(d.get("from"))), []).append(d)
    out: list[LinkUse] = []
    for (link, sender), ds in by_dir.items():
        uses = [x for d in ds if (x := num(d.get("utilization"))) is not None]
        if not uses:
            continue
        out.append(
            LinkUse(
                link=link,
                sender=sender,
                rate_bps=num(ds[-1].get("rate_bps")),
                utilization=sum(uses) / len(uses),
                # saturated in most of the rounds
                saturated=2 * sum(1 for d in ds if d.get("saturated")) > len(ds),
            )
        )
    return out


def _censored(group: GroupView, primary: Sequence[str]) -> tuple[str | None, str | None]:
    """ "below" / "at_least" when every search of a primary metric ended censored, and
    what stopped an "at least" short of its range when the tool could not go on."""
    for metric in primary:
        readings = group.searches.get(metric) or {}
        outcomes = {s.outcome for s in readings.values()}
        if readings and outcomes <= {"below", "at_least"}:
            if "at_least" not in outcomes:
                return "below", None
            ceilings = [s.ceiling for s in readings.values() if s.ceiling]
            return "at_least", (ceilings[0] if ceilings else None)
    return None, None


def evidence(group: GroupView, meta: Mapping[str, Any], primary: Sequence[str]) -> Evidence:
    """A row's evidence from its rounds and run.json."""
    placement: Mapping[str, Any] = meta.get("placement") or {}
    mode = str(placement.get("mode") or "shared")
    cpus = list(placement.get("testbed_cpus") or [])
    censored, ceiling = _censored(group, primary)
    reps = sorted(group.cpu)
    host_pct: dict[str, float] = {}
    for host in {h for r in reps for h in group.cpu[r].hosts}:
        shares = [
            group.cpu[r].hosts.get(host, 0.0) / group.cpu[r].window_s * 100.0
            for r in reps
            if group.cpu[r].window_s > 0
        ]
        if shares:
            host_pct[host] = sum(shares) / len(shares)
    ksoft = [
        x / s * 100.0
        for r in group.machine.values()
        if (x := num(r.get("ksoftirqd_s"))) is not None and (s := num(r.get("span_s")))
    ]
    busy = [
        x / s * 100.0 / max(1, len(cpus))
        for r in group.machine.values()
        if (x := num(r.get("busy_s"))) is not None and (s := num(r.get("span_s")))
    ]
    others = [x for r in group.machine.values() if (x := num(r.get("others_pct"))) is not None]
    dut_cpus = sorted({int(c) for cs in (placement.get("rps") or {}).values() for c in cs})
    dut_busy: list[float] = []
    if mode == "split" and dut_cpus:
        for r in group.machine.values():
            span, per = num(r.get("span_s")), r.get("per_cpu_busy_s") or {}
            if span:
                dut_busy.append(max((num(per.get(str(c))) or 0.0) / span * 100.0 for c in dut_cpus))
    metric = offered_metric(group.kind)
    asked = num((meta.get("offered") or {}).get(group.point_id, {}).get("rate"))
    if asked is None:
        asked = num(group.point.get("rate"))
    achieved = None
    if asked is not None and metric is not None:
        series = group.values.get(metric) or {}
        achieved = mean(list(series.values()))
    quota: Mapping[str, Any] = ((meta.get("testbed") or {}).get("cgroups") or {}).get("quota") or {}
    return Evidence(
        caps={str(h): float(q) * 100.0 for h, q in quota.items() if isinstance(q, int | float)},
        placement=mode,
        cpus=max(1, len(cpus)),
        host_pct=host_pct,
        roles=roles_of(meta, group.point_id),
        ksoftirqd_pct=mean(ksoft) or 0.0,
        busy_pct=mean(busy),
        others_pct=mean(others),
        dut_cpu_busy_pct=mean(dut_busy),
        links=_links(group),
        censored=censored,
        ceiling=ceiling,
        asked=asked if metric is not None else None,
        achieved=achieved,
    )


def limit(group: GroupView, meta: Mapping[str, Any], primary: Sequence[str]) -> Bottleneck:
    return bottleneck(evidence(group, meta, primary))


# -- the kernel's softirq time, traced ---------------------------------------------------


def softirq_row(group: GroupView) -> dict[str, Any] | None:
    """The traced round's softirq time per unit of work: µs by vector (NET_RX, NET_TX)
    and in all, over the test's span, divided by the units the test did in that span
    (its measured rate times warm-up and window: the rate of the warm-up is taken as
    the window's). None without a traced round."""
    rec, result = group.traced.get("softirq"), group.traced.get("result")
    unit_of = work_unit(group.kind)
    if rec is None or result is None or unit_of is None:
        return None
    unit, count = unit_of
    units, window = count(result), path(result, "duration_s")
    warmup = path(result, "warmup_s") or 0.0
    if not units or not window:
        return None
    active_units = units / window * (window + warmup)
    per_unit = {
        "net_rx": (num(rec.get("net_rx_s")) or 0.0) * 1e6 / active_units,
        "net_tx": (num(rec.get("net_tx_s")) or 0.0) * 1e6 / active_units,
        "total": (num(rec.get("total_s")) or 0.0) * 1e6 / active_units,
    }
    return {
        "point_id": group.point_id,
        "variant": group.variant,
        "unit": unit,
        "source": rec.get("source"),
        "n": 1,
        "per_unit_us": per_unit,
        "by_vector_s": rec.get("by_vector_s") or {},
        "span_s": num(rec.get("span_s")),
    }


def mechanism_cost(
    rows: Sequence[dict[str, Any]], cpu_rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Each variant's own cost per unit of work beside the baseline's: its DUT
    processes' CPU (user-space daemons, from their cgroup, the untraced rounds) and the
    kernel's softirq time beyond the baseline's (the traced round)."""
    dut: dict[tuple[str, str], float] = {}
    for c in cpu_rows:
        per = (c.get("per_unit_us") or {}).get("host:dut") or {}
        if per.get("mean") is not None:
            dut[(str(c.get("point_id")), str(c.get("variant")))] = float(per["mean"])
    base = {r["point_id"]: r for r in rows if r["variant"] == BASELINE}
    out = []
    for r in rows:
        b = base.get(r["point_id"])
        kernel = (
            r["per_unit_us"]["total"] - b["per_unit_us"]["total"]
            if b is not None and r["variant"] != BASELINE
            else None
        )
        daemons = dut.get((r["point_id"], r["variant"]))
        own = None
        if r["variant"] != BASELINE and kernel is not None:
            own = kernel + (daemons or 0.0) - (dut.get((r["point_id"], BASELINE)) or 0.0)
        out.append(
            {**r, "kernel_beyond_baseline_us": kernel, "dut_processes_us": daemons, "own_us": own}
        )
    return out
