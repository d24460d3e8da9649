"""Kind `latency`: one-way delay with timestamped UDP probes (document 004's router
delay study).

The engine sends probes at a fixed rate per direction, full duplex (both ways at
once) or half (the server answers each probe), from the client's emulated hosts to
the server's, paired i↔i, and reports the delay per direction from kernel software
timestamps. `load` (a fraction of the link rate) becomes probes/s as the paper's
generator counts it: each frame plus 20 B of preamble and inter-frame gap.

With `rejected_stream`, a second stream at the same rate runs at the same time from
the address an `exclude_one` ACL denies; the measured stream's record carries the
rejected stream's counts under `rejected_stream` (its `received` must be 0).

With `sender = "packet"` the engine sends the whole stream (the asked frames/s each
way, 64-byte frames by default) on a packet socket over the emulated hosts, one frame
in `probe_every` a timestamped probe (the way MoonGen interleaves its timestamped
packets into the load); each direction's record gains `load` (frames sent and
received, achieved frames/s).

The probes themselves (the model, the engine spec, the executor) are
secperf.workloads.parts.latency, which rfc2544's latency test uses too.
"""

from __future__ import annotations

from secperf.metric import LOSS, Metric, MetricRow, field, latency, loss_pct
from secperf.schema.sections import Testbed, TopologySection
from secperf.workloads.base import (
    Refused,
    WorkloadKind,
)
from secperf.workloads.parts.latency import LatencyExecutor, LatencyWorkload


def needs_a_link_rate(
    spec: LatencyWorkload, testbed: Testbed, _topology: TopologySection | None
) -> Refused | None:
    if spec.load is not None and not testbed.link_rate:
        return Refused(
            "is a fraction of testbed.link_rate, which is not set: "
            'set testbed.link_rate (e.g. "1gbit") or give rate_pps instead',
            key="load",
        )
    return None


DELAY_MEAN = Metric("delay_mean_us", "One-way delay mean", "µs", False, True)
DELAY_STD = Metric("delay_stddev_us", "One-way delay stddev", "µs", False, False)
DELAY_P99 = Metric("delay_p99_us", "One-way delay p99", "µs", False, False)
ACHIEVED_PPS = Metric("achieved_pps", "Probe rate achieved", "pkt/s", True, False)
# Latency under load (sender = "packet"): the whole stream, both ways together.
# The ask beside what was sent: a machine that cannot offer the ask shows it.
LOAD_ASKED = Metric("load_asked_pps", "Load asked (both ways)", "frames/s", True, False)
LOAD_SENT = Metric("load_sent_pps", "Load sent (both ways)", "frames/s", True, False)
LOAD_RECEIVED = Metric("load_received_pps", "Load received (both ways)", "frames/s", True, False)
# The senders' own ceiling, unpaced to a blackhole before the load (both summed): a
# load short of its ask with a ceiling above it was held back by the path.
LOAD_CEILING = Metric("load_ceiling_pps", "Sender ceiling (both ways)", "frames/s", True, False)

METRICS: tuple[MetricRow, ...] = (
    # one-way delay of both directions together (the record's `combined`)
    (DELAY_MEAN, latency("mean")),
    (DELAY_STD, latency("stddev")),
    (DELAY_P99, latency("p99")),
    (LOSS, loss_pct),
    (ACHIEVED_PPS, field("combined", "achieved_pps")),
    (LOAD_ASKED, field("combined", "load", "asked_pps")),
    (LOAD_SENT, field("combined", "load", "achieved_pps")),
    (LOAD_RECEIVED, field("combined", "load", "received_pps")),
    (LOAD_CEILING, field("combined", "load", "ceiling_pps")),
)

KIND = WorkloadKind(
    name="latency",
    model=LatencyWorkload,
    executor=LatencyExecutor(),
    metrics=METRICS,
    validate=needs_a_link_rate,
)
