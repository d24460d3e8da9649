"""Several generators: one workload point driven from N client hosts at once.

Every generator runs the same engine spec against the same server: all are
started before any is waited for, so their traffic begins together (the spread of
their `start` records' clocks is recorded as `start_skew_s`), and each runs the
point's duration after the same warm-up. Their records are kept nested (`side`,
role `generator-HOST`), and one merged `result` stands for the point
(docs/data-format.md, "Several generators"):

- counts and rates are summed: bytes, bits_per_second, messages, transactions,
  transactions_per_second, window_bytes, retransmits, sender / receiver, totals;
- loss is the lost sum over the sent (stream) or tried (rr) sum: the kind's executor
  says which (`EngineExecutor.tried`);
- latency_us: count, min, max, the count-weighted mean and the pooled standard
  deviation are exact; the percentiles are null, since percentiles of several
  histograms cannot be rebuilt from their summaries (each generator's are in
  `generators.each`);
- CPU per host: `cpu.client` is the generators' engine CPU summed, `cpu.server`
  the server's over every generator's test; `host_cpu` and `machine_cpu` are the
  first generator's readings (every engine reads the same counters over windows
  that differ by the start skew); `generators.each` keeps every generator's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from secperf.engine import EngineTest, Record
from secperf.errors import EngineError
from secperf.testbed.hosts import Host

SUMMED = (
    "bytes",
    "bits_per_second",
    "messages",
    "transactions",
    "transactions_per_second",
    "window_bytes",
    "retransmits",
)


def _sum(values: Sequence[Any]) -> Any:
    """The sum when every value is a number; None when any is None (not measured)."""
    if any(v is None or isinstance(v, bool) or not isinstance(v, int | float) for v in values):
        return None
    return sum(values)


def _sum_dicts(dicts: Sequence[Any]) -> Any:
    if not dicts or not all(isinstance(d, dict) for d in dicts):
        return dicts[0] if dicts else None
    out: dict[str, Any] = {}
    for key in dicts[0]:
        values = [d.get(key) for d in dicts]
        out[key] = _sum_dicts(values) if isinstance(values[0], dict) else _sum(values)
    return out


def merge_latency(parts: Sequence[Any]) -> Any:
    """Exact pooled count, min, max, mean and stddev; percentiles null (see above)."""
    hists = [p for p in parts if isinstance(p, dict) and p.get("count")]
    if not hists:
        return parts[0] if parts else None
    n = sum(int(h["count"]) for h in hists)
    mean = sum(h["count"] * h["mean"] for h in hists) / n
    # pooled variance: within-generator plus between-generator spread
    ss = sum(h["count"] * (h.get("stddev", 0.0) ** 2 + (h["mean"] - mean) ** 2) for h in hists)
    out: dict[str, Any] = {
        "count": n,
        "min": min(h["min"] for h in hists),
        "mean": mean,
        "stddev": math.sqrt(ss / n),
        "max": max(h["max"] for h in hists),
    }
    for key in hists[0]:
        if key not in out:
            out[key] = None  # a percentile: not mergeable from summaries
    return out


def sent_messages(merged: Record) -> int:
    """What a stream's loss ratio divides by: the messages its senders sent."""
    return int(_path(merged, "sender", "messages") or 0)


def lost_or_done(merged: Record) -> int:
    """What a request/response loss ratio divides by: transactions tried, those that
    timed out (the merged `loss.lost`) and those that completed."""
    return int(_path(merged, "loss", "lost") or 0) + int(merged.get("transactions") or 0)


def merge_results(
    results: Sequence[tuple[str, Record]],
    starts: Sequence[Record],
    tried: Callable[[Record], int] = sent_messages,
) -> Record:
    """One result for N generators' results (host, record), in host order; `tried`
    counts, in the merged record, what its loss ratio divides by."""
    records = [r for _, r in results]
    merged: Record = dict(records[0])
    for key in SUMMED:
        if key in merged:
            merged[key] = _sum([r.get(key) for r in records])
    for key in ("sender", "receiver", "totals"):
        if isinstance(merged.get(key), dict):
            merged[key] = _sum_dicts([r.get(key) for r in records])
    if "duration_s" in merged:
        merged["duration_s"] = max(float(r.get("duration_s") or 0.0) for r in records)
    if "latency_us" in merged:
        merged["latency_us"] = merge_latency([r.get("latency_us") for r in records])
    loss = [x for r in records if isinstance(x := r.get("loss"), dict)]
    if len(loss) == len(records):
        lost = sum(int(x.get("lost") or 0) for x in loss)
        merged["loss"] = {"lost": lost}
        n = tried(merged)
        merged["loss"]["ratio"] = lost / n if n else None
    cpus = [r.get("cpu") for r in records]
    if all(isinstance(c, dict) for c in cpus):
        merged["cpu"] = _sum_dicts(cpus)
    clocks = [_path(s, "clock", "realtime_ns") for s in starts]
    skew = (
        (max(clocks) - min(clocks)) / 1e9
        if clocks and all(isinstance(c, int) for c in clocks)
        else None
    )
    merged["generators"] = {
        "count": len(results),
        "hosts": [h for h, _ in results],
        "start_skew_s": skew,
        "each": [
            {
                "host": host,
                **{
                    k: r.get(k)
                    for k in (
                        "bits_per_second",
                        "transactions_per_second",
                        "duration_s",
                        "latency_us",
                        "loss",
                        "cpu",
                        "machine_cpu",
                        "host_cpu",
                    )
                    if k in r
                },
            }
            for host, r in results
        ],
    }
    return merged


def _path(record: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(record, dict):
            return None
        record = record.get(key)
    return record


def run_generators(
    hosts: Sequence[tuple[str, Host]],
    spec: dict[str, Any],
    keep: Callable[[Record], None],
    tried: Callable[[Record], int] = sent_messages,
) -> Record:
    """Run `spec` from every (name, host) at once; keep each one's records nested
    and the merged result at top level; return the merged result."""
    tests: list[tuple[str, EngineTest]] = []
    try:
        for name, host in hosts:  # all started before any is waited for
            tests.append((name, EngineTest(host, spec)))
        starts = [t.wait_started() for _, t in tests]
        results: list[tuple[str, Record]] = []
        for name, test in tests:

            def side(rec: Record, role: str = f"generator-{name}") -> None:
                keep({"type": "side", "role": role, "record": rec})

            results.append((name, test.collect(side).result))
    except EngineError:
        for _, test in tests:
            test.stop()
        raise
    merged = merge_results(results, starts, tried)
    keep(merged)
    return merged
