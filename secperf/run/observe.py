"""What the runner reads around a test besides the engine's records: the shaped
links' counters (is a link the limit?), for the bottleneck of each row.

A shaped link is a tbf qdisc on the egress of each end (secperf.testbed.links); its
counters (bytes sent, drops, overlimits) are read when the engine's `start` record
arrives (its traffic has begun) and when its `result` record arrives, so the span
is the test's warm-up and measured window (and the few ms its end takes). The
`links` record keeps, per direction, the bytes the shaper sent over that span
against its rate, and whether it held packets back (overlimits) or dropped them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from secperf.errors import SecperfError
from secperf.testbed.testbed import Testbed

# A direction whose shaper sent at least this share of its rate is saturated.
SATURATED = 0.95
# ... or at least this share while holding packets back or dropping (the span of a
# test includes its end, when a saturated link already idles: this catches that).
SATURATED_THROTTLED = 0.85


@dataclass(frozen=True)
class End:
    """One shaped direction: the link, the host whose egress shapes it, its device."""

    link: str
    host: str
    ifname: str


@dataclass(frozen=True)
class Shaper:
    """A tbf's counters at one instant."""

    at: float
    bytes: int
    drops: int
    overlimits: int
    rate_bps: float | None


def parse_tbf(out: str) -> Shaper | None:
    """`tc -s -j qdisc show dev X` -> the root tbf's counters (None: no tbf there)."""
    try:
        qdiscs = json.loads(out or "[]")
    except json.JSONDecodeError:
        return None
    for q in qdiscs:
        if q.get("kind") == "tbf" and q.get("root"):
            rate = (q.get("options") or {}).get("rate")
            return Shaper(
                at=time.monotonic(),
                bytes=int(q.get("bytes", 0)),
                drops=int(q.get("drops", 0)),
                overlimits=int(q.get("overlimits", 0)),
                rate_bps=float(rate) * 8 if isinstance(rate, int | float) else None,
            )
    return None


class LinkSampler:
    """Reads the shaped directions of one point's path around each test."""

    def __init__(self, testbed: Testbed, ends: list[End]) -> None:
        self.testbed = testbed
        self.ends = ends
        self.first: dict[End, Shaper] | None = None
        self.last: dict[End, Shaper] | None = None

    def read(self) -> dict[End, Shaper]:
        out: dict[End, Shaper] = {}
        for end in self.ends:
            try:
                text = (
                    self.testbed.host(end.host)
                    .run(["tc", "-s", "-j", "qdisc", "show", "dev", end.ifname], check=False)
                    .stdout
                )
            except SecperfError:
                continue
            shaper = parse_tbf(text)
            if shaper is not None:
                out[end] = shaper
        return out

    def on_record(self, record: Mapping[str, Any]) -> None:
        """The first `start` and the last `result` of a test mark its span."""
        kind = record.get("type")
        if kind == "start" and self.first is None:
            self.first = self.read()
        elif kind == "result":
            self.last = self.read()

    def record(self) -> dict[str, Any] | None:
        """The `links` record of the test (None: nothing shaped, or no span read)."""
        if not self.ends or not self.first or not self.last:
            return None
        return links_record(self.first, self.last)


def links_record(a: Mapping[End, Shaper], b: Mapping[End, Shaper]) -> dict[str, Any]:
    """Each shaped direction between two readings: its rate, what it sent, its use."""
    directions: list[dict[str, Any]] = []
    for end, first in a.items():
        last = b.get(end)
        if last is None:
            continue
        span = max(1e-9, last.at - first.at)
        sent = max(0, last.bytes - first.bytes)
        rate = last.rate_bps or first.rate_bps
        use = sent * 8 / span / rate if rate else None
        throttled = last.overlimits > first.overlimits or last.drops > first.drops
        directions.append(
            {
                "link": end.link,
                "from": end.host,
                "ifname": end.ifname,
                "rate_bps": rate,
                "span_s": span,
                "bytes": sent,
                "utilization": use,
                "drops": max(0, last.drops - first.drops),
                "overlimits": max(0, last.overlimits - first.overlimits),
                "saturated": use is not None
                and (use >= SATURATED or (throttled and use >= SATURATED_THROTTLED)),
            }
        )
    return {"type": "links", "directions": directions}
