"""What a rule set counted on its host over one test: the named nft counters it
declares, and the host's IP fragmentation and reassembly counters (/proc/net/snmp,
per network namespace). A mechanism that asks for them (the custom kind's
`counters = true`) reads them when it is applied and again when the runner asks
what it did, so a record holds the test's own counts, never a machine's totals.

RFC 3511 §5.9 (fragment handling) counts the fragments at the DUT with these:
ReasmOKs (datagrams the DUT reassembled: conntrack's nf_defrag), FragCreates (the
fragments it made again for the next link), ForwDatagrams (what it forwarded:
whole datagrams or fragments).
"""

from __future__ import annotations

import json
from typing import Any

from secperf.metric import Extractor, Metric, MetricRow, Record, path
from secperf.testbed.hosts import Host

# /proc/net/snmp's Ip fields a record keeps (RFC 4293's names, as the kernel writes them)
IP_FIELDS = (
    "ForwDatagrams",
    "ReasmReqds",
    "ReasmOKs",
    "ReasmFails",
    "FragOKs",
    "FragFails",
    "FragCreates",
    "InDiscards",
)


def ip_counters(host: Host) -> dict[str, int]:
    """The host's /proc/net/snmp `Ip:` counters now (its namespace's), by name."""
    out = host.run(["cat", "/proc/net/snmp"], check=True, timeout=10).stdout
    rows = [line.split() for line in out.splitlines() if line.startswith("Ip:")]
    if len(rows) < 2:
        return {}
    names, values = rows[0][1:], rows[1][1:]
    return {n: int(v) for n, v in zip(names, values, strict=False) if v.lstrip("-").isdigit()}


def ip_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """IP_FIELDS over a test: after − before (a field either side lacks is left out)."""
    return {k: after[k] - before[k] for k in IP_FIELDS if k in after and k in before}


def nft_counters(host: Host) -> dict[str, dict[str, int]]:
    """Every named nft counter on the host: "table/name" -> packets, bytes. Named
    counters start at 0 when their rule file loads (the runner loads it afresh for
    every test), so these are the test's own counts."""
    proc = host.run(["nft", "-j", "list", "counters"], check=False, timeout=30)
    if proc.returncode != 0:
        return {}
    try:
        items = json.loads(proc.stdout or "{}").get("nftables", [])
    except json.JSONDecodeError:
        return {}
    out: dict[str, dict[str, int]] = {}
    for item in items:
        c = item.get("counter") if isinstance(item, dict) else None
        if isinstance(c, dict) and "name" in c:
            out[f"{c.get('table', '')}/{c['name']}"] = {
                "packets": int(c.get("packets", 0)),
                "bytes": int(c.get("bytes", 0)),
            }
    return out


class Observer:
    """Counts on one host from apply to observe (None before apply: nothing read)."""

    def __init__(self) -> None:
        self._host: Host | None = None
        self._before: dict[str, int] = {}

    def start(self, host: Host) -> None:
        self._host = host
        self._before = ip_counters(host)

    def observe(self) -> dict[str, Any] | None:
        if self._host is None:
            return None
        after = ip_counters(self._host)
        return {"nft_counters": nft_counters(self._host), "ip": ip_delta(self._before, after)}


def _ip(name: str) -> Extractor:
    def get(r: Record) -> float | None:
        return path(r, "ip", name)

    return get


# Counts over one test (not rates): what the DUT did with the traffic, beside it.
DUT_REASSEMBLED = Metric(
    "dut_ip_reasm_ok", "Datagrams reassembled at the DUT", "datagrams", False, False
)
DUT_REASM_FAILS = Metric(
    "dut_ip_reasm_fails", "Reassembly failures at the DUT", "datagrams", False, False
)
DUT_FRAG_CREATES = Metric(
    "dut_ip_frag_creates", "Fragments made at the DUT", "fragments", False, False
)
# ForwDatagrams: packets routed to be forwarded; this kernel (6.x) counts them before
# the forward hook, so packets the forward rules drop are in it too.
DUT_FORWARDED = Metric(
    "dut_ip_forwarded", "IP packets routed for forwarding at the DUT", "packets", False, False
)

METRICS: tuple[MetricRow, ...] = (
    (DUT_FORWARDED, _ip("ForwDatagrams")),
    (DUT_REASSEMBLED, _ip("ReasmOKs")),
    (DUT_REASM_FAILS, _ip("ReasmFails")),
    (DUT_FRAG_CREATES, _ip("FragCreates")),
)
