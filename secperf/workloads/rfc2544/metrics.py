"""What an `rfc2544` result record yields: one record per frame size holds every
test; its two searches (throughput, back-to-back) are nested in it."""

from __future__ import annotations

from collections.abc import Mapping

from secperf.metric import (
    Extractor,
    Metric,
    MetricRow,
    Record,
    Search,
    field,
    num,
    path,
)
from secperf.workloads.rfc2544.logic import LOSS_STEPS_PCT

THROUGHPUT = Metric(
    "rfc2544_throughput_fps",
    "Throughput (no frame lost)",
    "frames/s",
    True,
    True,
    censored=("not found down to {bound}", "at least {bound}"),
)
LINE_RATE = Metric("rfc2544_line_rate_fps", "Line rate", "frames/s", True, False)
LAT_MEAN = Metric("rfc2544_latency_mean_us", "Latency at throughput, mean", "µs", False, False)
LAT_P99 = Metric("rfc2544_latency_p99_us", "Latency at throughput, p99", "µs", False, False)
LAT_RATE = Metric("rfc2544_latency_fps", "Latency test's achieved rate", "frames/s", True, False)
LAT_LOSS = Metric("rfc2544_latency_loss_pct", "Latency test's probe loss", "%", False, False)
LOSS = {
    pct: Metric(f"rfc2544_loss_{pct}_pct", f"Frame loss at {pct} % of line rate", "%", False, False)
    for pct in LOSS_STEPS_PCT
}
LOSS_OFFERED = {
    pct: Metric(
        f"rfc2544_offered_{pct}_pct", f"Offered at the {pct} % step", "% of line rate", True, False
    )
    for pct in LOSS_STEPS_PCT
}
BACK_TO_BACK = Metric(
    "rfc2544_back_to_back_frames",
    "Back-to-back burst",
    "frames",
    True,
    False,
    censored=("loss already at {bound}", "at least {bound}"),
)

SEARCHES = (Search(THROUGHPUT, "throughput"), Search(BACK_TO_BACK, "back_to_back"))


def _latency(name: str) -> Extractor:
    def get(r: Record) -> float | None:
        if not path(r, "latency", "delay_us", "count"):
            return None
        return path(r, "latency", "delay_us", name)

    return get


def _latency_loss(r: Record) -> float | None:
    sent, received = path(r, "latency", "sent"), path(r, "latency", "received")
    return None if not sent or received is None else (sent - received) / sent * 100.0


def _loss(pct: int, offered: bool = False) -> Extractor:
    def get(r: Record) -> float | None:
        loss = r.get("loss")
        steps = loss.get("steps") if isinstance(loss, Mapping) else None
        for step in steps if isinstance(steps, list) else []:
            if isinstance(step, Mapping) and step.get("load_pct") == pct:
                if not offered:
                    return num(step.get("loss_pct"))
                fps, line = num(step.get("achieved_fps")), path(r, "line_rate_fps")
                return None if fps is None or not line else fps / line * 100.0
        return None

    return get


METRICS: tuple[MetricRow, ...] = (
    SEARCHES[0].row(),
    (LINE_RATE, field("line_rate_fps")),
    (LAT_MEAN, _latency("mean")),
    (LAT_P99, _latency("p99")),
    (LAT_RATE, field("latency", "achieved_fps")),
    (LAT_LOSS, _latency_loss),
    *((LOSS[p], _loss(p)) for p in LOSS),
    *((LOSS_OFFERED[p], _loss(p, offered=True)) for p in LOSS),
    SEARCHES[1].row(),
)
