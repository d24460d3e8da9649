"""Kind `http_capacity`: RFC 9411 §7.5 and §7.9, the most concurrent HTTP or HTTPS
connections the path holds while each carries transactions within the RFC's
criteria, by search.

A trial at n connections is one engine `http` test against the server host's nginx:
n kept-alive connections (TLS ones with `tls`), each fetching once every
`fetch_every` (so n / fetch_every fetches a second, on the engine's absolute
schedule), opened during the warm-up (the RFC's ramp-up: the first fetches are due
within the first `fetch_every`, so n / `fetch_every` connections open a second, which
must stay below the path's connection rate) and held through the measured window. It passes
when, in that window, at most `max_failure_pct` of the transactions failed (the
RFC's 0.001 %) and as few connections ended by an RST, at least 95 % of the
offered fetch rate was achieved (below it, the transaction rate, not the
connections held, is what the path ran out of), and every `interval` the
connections open averaged at least n less `max_shortfall_pct`. A connection the
path would not take (a full connection table, a proxy out of descriptors) fails
its fetch when it retries, so the failure criterion is the one that finds a limit;
the count of open sockets includes connects under way and is a guard, not the test.

The search looks for the connection count between `low` and `high`
(secperf/workloads/parts/search_method.py: MLRsearch, or the bisection with `search =
"bisect"`; found with its resolution, or "at least" / "below" a bound, never a
number standing in for one); a path that holds the top is "at least" it. A trial's
MLRsearch loss ratio is its failed transactions' share, or 1.0 when it missed
another criterion. Its duration is the measured window; the warm-up stays whole.
Beyond one client address's ports (~60,000) the connections come from `sources`
addresses (secperf/workloads/parts/sources.py); nginx takes ~130,000. With `open_rate` the
ramp-up opens that many connections a second, whatever the fetch period, so that a
large n is opened below the path's handshake rate and then held at a modest fetch
rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, model_validator

from secperf.engine import Record
from secperf.errors import EngineError
from secperf.metric import Metric, Search, num
from secperf.schema.fields import FileSizes, PerSecond, PositiveDuration, Timeout
from secperf.services.nginx import NGINX
from secperf.workloads.base import MeasureContext, WorkloadKind, WorkloadPoint, WorkloadSpec
from secperf.workloads.parts.http import (
    MAX_PARALLEL,
    HttpWorkload,
    TlsVersion,
    Validation,
    fetch_test,
    nginx_for,
    sustain_periods,
)
from secperf.workloads.parts.rate_search import ACHIEVED_SHARE, fresh_dut, kept_trial
from secperf.workloads.parts.search import Trial
from secperf.workloads.parts.search_method import SearchKeys, find
from secperf.workloads.parts.sources import ManySources, enough_sources

# The period the open connections are judged over (the engine's `interval`).
PERIOD = 1.0
# nginx closes a connection idle for 75 s (its keepalive_timeout)
MAX_FETCH_EVERY = 60.0
TLS_KEYS = ("tls", "tls_version", "cipher", "groups", "resumption")


class HttpCapacityWorkload(SearchKeys, ManySources, WorkloadSpec):
    """RFC 9411 §7.5 / §7.9: the most concurrent kept-alive HTTP(S) connections the
    path holds within the criteria, by search."""

    engine_kind: ClassVar[str] = "http"  # each trial: an http test at n connections
    held_key: ClassVar[str] = "high"

    kind: Literal["http_capacity"]
    files: FileSizes = Field(default_factory=lambda: [1024])
    """The sizes of the files fetched (as `http`'s)."""
    # the bracket searched, in connections
    low: int = Field(default=100, ge=1, le=MAX_PARALLEL)
    """Connections, 1 … 120,000, low < high."""
    high: int = Field(default=10_000, ge=2, le=MAX_PARALLEL)
    """Connections, 1 … 120,000, low < high."""
    resolution_pct: float = Field(default=10.0, gt=0, le=50)
    """The search stops when hi/lo − 1 is this narrow, in %."""
    max_steps: int = Field(default=8, ge=1, le=30)
    """The most trials the search runs."""
    # each connection's fetch period: n / fetch_every fetches a second in all, and as
    # many connections opened a second in the ramp-up (keep it below the path's
    # connection rate, or the handshakes, not the connections held, are tested)
    fetch_every: PositiveDuration = 10.0
    """At most 60 s (nginx closes a connection idle for 75 s); each connection's fetch period;
    without `open_rate` the ramp-up opens n / `fetch_every` connections a second, which must
    stay below the path's connection rate (with TLS, its handshake rate: `http` with `tls`, a
    new connection per fetch, measures it), or the trial tests the handshakes, not the
    connections held.
    """
    # connections opened a second in the ramp-up, each with its first fetch (the
    # RFC's ramp-up at a rate below the path's connection rate); the trial's warm-up
    # is then n / open_rate plus `warmup`. None: the first fetches are due within the
    # first `fetch_every`, n / fetch_every opens a second, and `warmup` is the ramp-up.
    open_rate: PerSecond | None = None
    """Connections opened a second in the ramp-up (below the path's connection rate; with TLS its
    handshake rate); none: n / `fetch_every`.
    """
    # RFC 9411: fewer than 0.001 % failed transactions (and as few RSTs)
    max_failure_pct: float = Field(default=0.001, ge=0, le=100)
    """RFC 9411's 0.001 % failed transactions (and RSTs)."""
    # the open connections each period may fall short of n by this much
    max_shortfall_pct: float = Field(default=1.0, ge=0, le=50)
    """0 … 50: how far below n a period's mean of open connections may fall."""
    timeout: Timeout = 5.0
    """Per fetch."""
    warmup: PositiveDuration = 15.0
    """Without `open_rate`, at least `fetch_every`: every connection opens with its first fetch,
    due within the first `fetch_every`; with it, the settling time after the ramp-up.
    """
    tls: bool = False
    """HTTPS: a TLS handshake per connection opened."""
    tls_version: TlsVersion | None = None
    """HTTPS: a TLS handshake per connection opened."""
    cipher: str | None = None
    """HTTPS: a TLS handshake per connection opened."""
    groups: list[str] | None = None
    """HTTPS: a TLS handshake per connection opened."""
    resumption: bool = True
    """HTTPS: a TLS handshake per connection opened."""

    def file_sets(self) -> dict[str, list[int]]:
        return {"files": self.files}

    @model_validator(mode="after")
    def _bracket(self) -> HttpCapacityWorkload:
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.duration < 2 * PERIOD:
            raise ValueError(
                f"the open connections are judged every {PERIOD:g} s and a "
                f"{self.duration:g} s window holds fewer than two: make duration at "
                f"least {2 * PERIOD:g} s"
            )
        try:
            self.trial_workload(self.high)
        except ValidationError as exc:
            raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
        if self.fetch_every > MAX_FETCH_EVERY:
            raise ValueError(
                f"fetch_every {self.fetch_every:g} s leaves a connection idle past nginx's "
                f"keepalive_timeout (75 s): give at most {MAX_FETCH_EVERY:g} s"
            )
        if self.open_rate is None and self.warmup < self.fetch_every:
            raise ValueError(
                f"every connection opens with its first fetch, within the first "
                f"fetch_every ({self.fetch_every:g} s): make warmup at least that "
                f"(the RFC's ramp-up), better a few times it"
            )
        return self

    def trial_workload(self, n: int, duration: float | None = None) -> HttpWorkload:
        """The http test of one trial: n connections held, each fetching every
        `fetch_every`, judged by the RFC's criteria (the open connections' deviation
        too, SHOULD there, for its interval records)."""
        # the TLS keys set (by value: a run directory's scenario comes back with every
        # default written out), so that the http kind's own checks judge them
        fields = type(self).model_fields
        tls = {k: getattr(self, k) for k in TLS_KEYS if getattr(self, k) != fields[k].default}
        ramp = None if self.open_rate is None else n / self.open_rate
        return HttpWorkload(
            kind="http",
            name=self.name,
            files=self.files,
            parallel=n,
            keepalive=True,
            rate=n / self.fetch_every,
            ramp_up=ramp,
            duration=self.duration if duration is None else duration,
            warmup=self.warmup + (ramp or 0.0),
            timeout=self.timeout,
            sources=self.sources,
            **tls,
            validation=Validation(
                max_failed_pct=self.max_failure_pct,
                max_reset_pct=self.max_failure_pct,
                min_rate_pct=ACHIEVED_SHARE * 100,
                max_open_deviation_pct=10.0,
                deviation_interval=PERIOD,
            ),
        )

    def default_name(self) -> str:
        return "https-capacity" if self.tls else "http-capacity"

    def held(self) -> int:
        return self.high


def trial_seconds(spec: HttpCapacityWorkload, _link_bps: int | None) -> float:
    """One trial at the top of the bracket (the first the search runs): its ramp-up,
    warm-up and window."""
    t = spec.trial_workload(spec.high)
    return t.warmup + t.duration


def fewest_open(intervals: list[Record]) -> float | None:
    """The fewest connections open (a period's mean) in a measured period (None:
    no whole period was measured)."""
    opens = [num(r.get("open")) for r in sustain_periods(intervals, PERIOD)]
    values = [o for o in opens if o is not None]
    return min(values) if values else None


def judge(n: int, rec: Record, intervals: list[Record], shortfall_pct: float) -> Trial:
    """A trial's verdict: the http test's required criteria, and the connections held.
    Its `achieved` is the fewest connections open in a period."""
    v: dict[str, Any] = rec.get("validation") or {}
    missed = [
        str(c.get("detail"))
        for c in v.get("criteria") or []
        if c.get("required") and not c.get("passed")
    ]
    fewest = fewest_open(intervals)
    enough = n * (1 - shortfall_pct / 100)
    if fewest is None or fewest < enough:
        shown = "not measured" if fewest is None else f"{fewest:,.0f}"
        missed.append(f"connections open (a period's mean) {shown} < {enough:,.0f}")
    started = int(num(rec.get("started")) or 0)
    if not started:
        missed.append("no fetch started in the measured window")
    detail: dict[str, Any] = {
        "started": started,
        "failed": int(num(rec.get("failed")) or 0),
        "fetches_per_second": num(rec.get("fetches_per_second")),
    }
    if missed:
        detail["missed"] = missed
    failed_share = detail["failed"] / started if started else 1.0
    return Trial(not missed, fewest, detail, loss=1.0 if missed else failed_share)


@dataclass(frozen=True)
class HttpCapacityExecutor:
    def measure(self, ctx: MeasureContext, point: WorkloadPoint[HttpCapacityWorkload]) -> Record:
        p = point.spec
        # the server's own limit, read once (its worker's limits do not change)
        server = nginx_for(ctx).connection_limit()

        def trial(count: float, duration: float) -> Trial:
            n = int(count)
            if n > server:
                # not the path's limit: the search stays below it, no traffic sent
                why = (
                    f"nginx in {ctx.server} can hold {server} connections (its worker's "
                    f"open-file limit), fewer than {n}: raise the hard RLIMIT_NOFILE "
                    "secperf starts with (ulimit -Hn; needs CAP_SYS_RESOURCE)"
                )
                return kept_trial("http", ctx, n, Trial(False, None, {"error": why}, False))
            fresh_dut(ctx)
            intervals: list[Record] = []
            results: list[Record] = []

            def keep(rec: Record) -> None:
                # a trial's records stay out of the run: its verdict is the `trial` record
                (intervals if rec.get("type") == "interval" else results).append(rec)

            try:
                rec = fetch_test(ctx, p.trial_workload(n, duration), keep)
            except EngineError as exc:
                # a spec the engine refused (more connections than its descriptors):
                # nothing ran, so the trial says nothing about the path
                refused = exc.record.get("kind") == "spec"
                failed = Trial(False, None, {"error": exc.message}, measured=not refused)
                return kept_trial("http", ctx, n, failed, duration)
            verdict = judge(n, rec, intervals, p.max_shortfall_pct)
            return kept_trial("http", ctx, n, verdict, duration)

        found = find(
            p,
            trial,
            low=p.low,
            high=p.high,
            duration=p.duration,
            resolution_pct=p.resolution_pct,
            max_steps=p.max_steps,
            loss_ratio=p.max_failure_pct / 100.0,
            measure="asked",
            reports="passed",
            integer=True,
        )
        rec: Record = {
            "type": "result",
            "kind": p.kind,
            "tls": p.tls,
            "fetch_every": p.fetch_every,
            "max_failure_pct": p.max_failure_pct,
            "search": found.as_dict(),
        }
        ctx.keep(rec)
        return rec


MAX_HELD = Metric(
    "max_concurrent",
    "Concurrent connections held (validated)",
    "conn",
    True,
    True,
    censored=("< {bound}", "at least {bound}"),
    scale="ratio",  # a count held: its loss can never pass 100 %
)
SEARCH = Search(MAX_HELD)

KIND = WorkloadKind(
    name="http_capacity",
    model=HttpCapacityWorkload,
    executor=HttpCapacityExecutor(),
    metrics=(SEARCH.row(),),
    searches=(SEARCH,),
    test_seconds=trial_seconds,
    validate=enough_sources,
    tools=lambda _spec: (NGINX,),
)
