"""Kind `rfc2544`: RFC 2544's throughput, latency, frame loss rate and back-to-back
tests per frame size, on the packet sender.

The package is the kind: `spec` (its scenario keys), `logic` (the RFC's searches
and arithmetic, tested without a network), `executor` (the trials on the testbed),
`metrics` (what its record yields) and `layout` (its report, in the RFC's layout).
"""

from __future__ import annotations

from secperf.schema.sections import Testbed, TopologySection
from secperf.workloads.base import Refused, WorkloadKind
from secperf.workloads.rfc2544.executor import Rfc2544Executor
from secperf.workloads.rfc2544.layout import LAYOUT
from secperf.workloads.rfc2544.logic import estimate_seconds
from secperf.workloads.rfc2544.metrics import METRICS, SEARCHES
from secperf.workloads.rfc2544.spec import Rfc2544Workload

__all__ = ["KIND", "Rfc2544Workload"]


def ipv4_and_a_line_rate(
    spec: Rfc2544Workload, testbed: Testbed, topology: TopologySection | None
) -> Refused | None:
    """The packet sender sends IPv4 frames only, and rates are fractions of a line rate."""
    if testbed.family == "ipv6":
        return Refused(
            "runs on the packet sender, which sends IPv4 frames only: "
            'set family = "ipv4" in [testbed]'
        )
    if spec.line_rate is None and not testbed.link_rate and topology is None:
        return Refused(
            "offers fractions of the line rate, and no link has a rate: set "
            'testbed.link_rate (e.g. "100mbit") or the workload\'s line_rate'
        )
    return None


KIND = WorkloadKind(
    name="rfc2544",
    model=Rfc2544Workload,
    executor=Rfc2544Executor(),
    metrics=METRICS,
    searches=SEARCHES,
    # many trials per measurement
    test_seconds=estimate_seconds,
    validate=ipv4_and_a_line_rate,
    layout=LAYOUT,
)
