"""The `rfc2544` workload's scenario keys (docs/scenario-format.md)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, PlainValidator, field_validator

from secperf.schema.fields import Rate, bounded, one_or_sweep
from secperf.schema.units import parse_duration, parse_size, toml_repr
from secperf.workloads.base import WorkloadSpec
from secperf.workloads.parts.search_method import SearchKeys

Rfc2544Test = Literal["throughput", "latency", "loss", "back_to_back"]
TESTS: tuple[Rfc2544Test, ...] = ("throughput", "latency", "loss", "back_to_back")
FRAME_SIZES = (64, 128, 256, 512, 1024, 1280, 1518)

FrameSize = Annotated[
    int | list[int], PlainValidator(one_or_sweep(bounded(parse_size, 64, 1518, "a frame size")))
]
SettleDuration = Annotated[float, PlainValidator(bounded(parse_duration, 0, 60, "a settle time"))]
BurstDuration = Annotated[float, PlainValidator(bounded(parse_duration, 0.001, 60, "a burst"))]
LatencyDuration = Annotated[
    float, PlainValidator(bounded(parse_duration, 0.05, 600, "a latency duration"))
]


class Rfc2544Workload(SearchKeys, WorkloadSpec):
    """RFC 2544's throughput, latency, frame loss rate and back-to-back tests on the
    packet sender, per frame size (Ethernet bytes with FCS; `frame` is swept).

    `duration` is each trial's length (the RFC's is 60 s; `warmup` does not apply);
    `settle` the wait after each trial before the receiver's count is read (RFC: 2 s);
    rates are fractions of `line_rate` (default: the client's link rate), counted as
    frames on an Ethernet wire (frame + 20 B preamble and gap)."""

    # "count": labels read frame=1024 (bytes as the RFC writes them), not 1KiB
    sweepable: ClassVar[dict[str, str]] = {"frame": "count"}

    kind: Literal["rfc2544"]
    frame: FrameSize = Field(default_factory=lambda: list(FRAME_SIZES))
    """64 … 1518 bytes, FCS included (the sender writes frame − 4 bytes)."""
    tests: list[Rfc2544Test] = Field(default_factory=lambda: list(TESTS), min_length=1)
    """Which of RFC 2544's tests to run."""
    line_rate: Rate = None
    """Bits/s; required when the link has no rate."""
    settle: SettleDuration = 0.5
    """Wait after each trial before the receiver's count is read (RFC: 2 s); the count must then be
    still.
    """
    resolution_pct: float = Field(default=2.0, gt=0, le=50)
    """The searches stop when hi/lo − 1 is this narrow (in %)."""
    max_trials: int = Field(default=12, ge=2, le=40)
    """Trials per search (2 … 40), the line rate and the lowest rate included."""
    low_pct: float = Field(default=1.0, gt=0, lt=100)
    """The lowest rate the throughput search tries, % of line rate (at least 100 frames/s)."""
    loss_tolerance_pct: float = Field(default=0.0, ge=0, lt=100)
    """A trial passes with at most this % lost; 0 is RFC 2544's throughput, anything else is not
    (the record says which).
    """
    pdr_loss_pct: list[float] = Field(
        default_factory=list,
        max_length=4,
        description="MLRsearch goals beside the throughput's (its NDR, `loss_tolerance_pct`): "
        "one partial drop rate a loss ratio, in %, each answered in the record's "
        "search.goals with its bounds and conditional throughput",
    )
    loss_every_step: bool = False
    """Run all ten loss steps."""
    burst_min: int = Field(default=100, ge=1, le=10_000_000)
    """The back-to-back search's range: frames, and seconds of line rate."""
    burst_max: BurstDuration = 1.0
    """The back-to-back search's range: frames, and seconds of line rate."""
    latency_duration: LatencyDuration = 2.0
    """The latency test's length and the latency kind's `duplex`."""
    latency_duplex: Literal["full", "half"] = "half"
    """The latency test's length and the latency kind's `duplex`."""
    port: int = Field(default=5201, ge=1, le=65535)
    """The test frames' UDP destination port (5201/udp: the engine's control port number, which
    only TCP uses; every secperf ACL permits it).
    """
    # CPUs the DUT's receive processing runs on (RPS on its interfaces), e.g. "1".
    dut_cpus: str | None = Field(default=None, pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
    """The DUT's receive processing on these CPUs (RPS on its interfaces, restored after): a DUT
    that cannot keep up then loses frames instead of slowing the sender, whose CPU would
    otherwise run its forwarding.
    """

    @field_validator("pdr_loss_pct")
    @classmethod
    def _pdr_in_range(cls, value: list[float]) -> list[float]:
        if any(not 0 < v < 100 for v in value):
            raise ValueError(f"pdr_loss_pct takes percents in (0, 100), not {toml_repr(value)}")
        return value

    @field_validator("tests")
    @classmethod
    def _tests_once(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"tests names a test twice: {toml_repr(value)}")
        return value

    def default_name(self) -> str:
        return "rfc2544"
