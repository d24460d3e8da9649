"""RFC 2544 (benchmarking methodology for network interconnect devices): the logic.

Frame sizes are Ethernet frames as the RFC counts them: 14 B header + payload +
4 B FCS. On the wire each also takes 8 B of preamble and 12 B of inter-frame gap,
so a link of R bit/s carries at most R / ((F + 20) · 8) frames of F bytes a second
(`line_rate_fps`: 148,810 64-byte frames/s on 100 Mbit/s). An AF_PACKET socket
writes the frame without its FCS (the NIC, here the veth, has none): F − 4 bytes,
of which F − 46 are UDP payload over IPv4 (`udp_payload`).

The tests, each against a `trial` callable that offers frames and counts them at
the receiver (secperf.workloads.rfc2544.executor runs them on the packet sender;
the unit tests give a fake), so the search logic is tested without a network:

- `throughput`: §26.1, the highest rate at which no offered frame is lost, by
  MLRsearch (RFC 9971, secperf/workloads/parts/mlrsearch.py; `throughput_search`:
  trials that grow from short ones, its goal loss ratio the tolerance, more goals
  for `pdr_loss_pct`) or by binary search (`search = "bisect"`, `throughput`: the
  line rate, then the lowest rate, then geometric halving until hi/lo − 1 is
  within the resolution);
- `loss_rates`: §26.3, the frame loss rate at 100 %, 90 %, ... of the line rate,
  stopping (as the RFC says) after two successive steps without loss, unless every
  step is asked for;
- `back_to_back`: §26.4, the longest burst at line rate without loss, by binary
  search on the burst length.

A trial passes only with zero loss (RFC 2544's definition); `loss_tolerance_pct`
relaxes that on request (then it is not RFC 2544's throughput, and the record says
which tolerance was used).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from secperf.workloads.parts.rate_search import ACHIEVED_SHARE
from secperf.workloads.parts.search import Bracket, Trial, bisect_rate
from secperf.workloads.parts.search_method import Answer, SearchKeys, find, search_seconds
from secperf.workloads.rfc2544.spec import FRAME_SIZES, TESTS, Rfc2544Workload

__all__ = ["FRAME_SIZES", "TESTS"]

ETH_HEADER = 14
FCS = 4
PREAMBLE_IFG = 20  # 7 B preamble + 1 B start-of-frame delimiter + 12 B inter-frame gap
IPV4_UDP = 28
LOSS_STEPS_PCT = (100, 90, 80, 70, 60, 50, 40, 30, 20, 10)
# §26.3: stop after this many successive steps without loss.
CLEAN_STEPS_TO_STOP = 2


def line_rate_fps(link_bps: float, frame: int) -> float:
    """The most frames/s of `frame` bytes (FCS included) a link of `link_bps` carries."""
    return link_bps / ((frame + PREAMBLE_IFG) * 8)


def sent_bytes(frame: int) -> int:
    """What an AF_PACKET socket writes for an Ethernet frame of `frame` bytes: no FCS."""
    return frame - FCS


def udp_payload(frame: int) -> int:
    """UDP payload of an IPv4 test frame of `frame` bytes (header and FCS included)."""
    return frame - ETH_HEADER - FCS - IPV4_UDP


def frame_bits_per_second(fps: float, frame: int) -> float:
    """Bits/s of `fps` frames as the RFC counts a frame (FCS in, preamble and gap out)."""
    return fps * frame * 8


@dataclass(frozen=True)
class Offer:
    """What one trial offered and what arrived (counted at the receiver)."""

    asked_fps: float
    sent: int  # frames the sender's kernel took
    received: int  # frames the receiver counted
    seconds: float  # the sender's window
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return max(self.sent - self.received, 0)

    @property
    def loss_pct(self) -> float | None:
        return 100.0 * self.lost / self.sent if self.sent else None

    @property
    def achieved_fps(self) -> float | None:
        return self.sent / self.seconds if self.seconds > 0 else None

    def passed(self, tolerance_pct: float = 0.0) -> bool:
        """No loss (or at most `tolerance_pct` %), and something was sent."""
        if not self.sent:
            return False
        return (
            self.lost == 0 if tolerance_pct <= 0 else self.lost <= self.sent * tolerance_pct / 100
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "asked_fps": self.asked_fps,
            "sent": self.sent,
            "received": self.received,
            "lost": self.lost,
            "loss_pct": self.loss_pct,
            "seconds": self.seconds,
            "achieved_fps": self.achieved_fps,
            **self.detail,
        }


RateTrial = Callable[[float], Offer]  # offer frames at this rate for one trial
TimedTrial = Callable[[float, float], Offer]  # ... for this many seconds
BurstTrial = Callable[[int], Offer]  # offer a burst of this many frames at line rate


def throughput(
    trial: RateTrial,
    *,
    line_fps: float,
    low_fps: float,
    resolution_pct: float,
    max_trials: int,
    loss_tolerance_pct: float = 0.0,
) -> Bracket:
    """§26.1: the highest rate without loss, in [low_fps, line_fps].

    Placed by the rate each trial achieved (frames sent / its window), so a sender
    that fell short of its ask never lends a pass to the rate it did not reach."""

    return bisect_rate(
        lambda rate: offer_trial(trial(rate), loss_tolerance_pct),
        low=low_fps,
        high=line_fps,
        resolution_pct=resolution_pct,
        max_steps=max_trials,
        measure="achieved",
        reports="passed",
        integer=True,
    )


def offer_trial(offer: Offer, tolerance_pct: float) -> Trial:
    """A trial's verdict (no loss, or within the tolerance) and its loss ratio: the
    frames lost of those sent, or 1.0 when the sender reached less than 95 % of the
    asked rate (MLRsearch places a trial by the rate asked, so a rate the sender did
    not reach never passes)."""
    achieved = offer.achieved_fps or 0.0
    short = not offer.sent or achieved < ACHIEVED_SHARE * offer.asked_fps
    loss = 1.0 if short else offer.lost / offer.sent
    return Trial(offer.passed(tolerance_pct), offer.achieved_fps, offer.as_dict(), loss=loss)


def throughput_search(
    trial: TimedTrial,
    keys: SearchKeys,
    *,
    line_fps: float,
    low_fps: float,
    duration: float,
    resolution_pct: float,
    max_trials: int,
    loss_tolerance_pct: float = 0.0,
    pdr_loss_pct: Sequence[float] = (),
) -> Answer:
    """§26.1 by the keys' search: MLRsearch (goal loss ratio the tolerance, a goal
    more for each `pdr_loss_pct`, final trials of `duration`), or the bisection."""
    return find(
        keys,
        lambda rate, seconds: offer_trial(trial(rate, seconds), loss_tolerance_pct),
        low=low_fps,
        high=line_fps,
        duration=duration,
        resolution_pct=resolution_pct,
        max_steps=max_trials,
        loss_ratio=loss_tolerance_pct / 100.0,
        more_loss_ratios=[p / 100.0 for p in pdr_loss_pct],
        measure="achieved",
        reports="passed",
        integer=True,
    )


@dataclass(frozen=True)
class LossRates:
    """§26.3's answer: one offer per step run, and the steps left out."""

    steps: tuple[tuple[int, Offer], ...]  # (percent of line rate, offer), highest first
    not_run: tuple[int, ...]  # percents below two successive lossless steps
    stopped: str  # "two successive steps without loss" | "every step"

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": [{"load_pct": pct, **offer.as_dict()} for pct, offer in self.steps],
            "not_run": list(self.not_run),
            "stopped": self.stopped,
        }


def loss_rates(
    trial: RateTrial,
    *,
    line_fps: float,
    steps_pct: Sequence[int] = LOSS_STEPS_PCT,
    every_step: bool = False,
) -> LossRates:
    """§26.3: frame loss at each step (highest first), stopping after two successive
    steps without loss unless `every_step`."""
    order = sorted(set(steps_pct), reverse=True)
    done: list[tuple[int, Offer]] = []
    clean = 0
    for i, pct in enumerate(order):
        offer = trial(line_fps * pct / 100.0)
        done.append((pct, offer))
        clean = clean + 1 if offer.sent and offer.lost == 0 else 0
        if clean >= CLEAN_STEPS_TO_STOP and not every_step and i + 1 < len(order):
            return LossRates(
                tuple(done), tuple(order[i + 1 :]), "two successive steps without loss"
            )
    return LossRates(tuple(done), (), "every step")


def back_to_back(
    trial: BurstTrial,
    *,
    low_frames: int,
    high_frames: int,
    resolution_pct: float,
    max_trials: int,
) -> Bracket:
    """§26.4: the longest burst at line rate without loss, in [low, high] frames.

    Placed by the frames each burst really sent (a sender that forfeited frames sent
    a shorter burst than asked)."""

    def run(frames: float) -> Trial:
        offer = trial(int(frames))
        return Trial(offer.passed(), float(offer.sent), offer.as_dict())

    return bisect_rate(
        run,
        low=float(low_frames),
        high=float(high_frames),
        resolution_pct=resolution_pct,
        max_steps=max_trials,
        measure="achieved",
        reports="passed",
        integer=True,
    )


# What one trial costs beyond its own length: starting the sender, reading counters.
TRIAL_OVERHEAD_S = 0.5


def estimate_seconds(spec: Rfc2544Workload, _link_bps: int | None = None) -> float:
    """A planned measurement's length (for `secperf check` and the progress bar): the
    throughput search's (a bisection: a third of `max_trials`), three loss steps,
    the latency test, a third of `max_trials` bursts; a guess
    (a configuration at line rate ends each search in one trial), not a bound."""
    trial = spec.duration + spec.settle + TRIAL_OVERHEAD_S
    searches = spec.max_trials / 3
    tests = spec.tests
    total = 0.0
    if "throughput" in tests or "latency" in tests:
        overhead = spec.settle + TRIAL_OVERHEAD_S
        total += search_seconds(spec, spec.duration, overhead, searches)
    if "latency" in tests:
        total += spec.latency_duration + 0.5 + TRIAL_OVERHEAD_S
    if "loss" in tests:
        total += (len(LOSS_STEPS_PCT) if spec.loss_every_step else 3) * trial
    if "back_to_back" in tests:
        total += searches * (spec.burst_max / 2 + spec.settle + TRIAL_OVERHEAD_S)
    return total
