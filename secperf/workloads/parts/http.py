"""HTTP(S) fetches against nginx in the server host, as the `http` kind and
http_capacity's trials run them: the http kind's model (`HttpWorkload`), its
validation criteria and verdict, the server (`nginx_for`) and one fetch test
(`fetch_test`). The kind (secperf.workloads.http) declares itself with them.

nginx starts once per testbed (on the first measurement) and stays up; it is
spawned through the server host, so the testbed's ledger owns it and teardown
stops it. Files are written into its web root as workloads ask for them.
It serves HTTPS too, with a CA and a server certificate made for the run
(secperf.services.pki, in the run directory, keys 0600); the engine trusts that
CA, and the CA of any mechanism in the path that signs certificates of its own
(a `TrustedCa`, secperf.mechanisms.capabilities: a TLS-inspecting proxy), from one
bundle file.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, PlainValidator, model_validator

from secperf.engine import Record, run_test
from secperf.mechanisms.capabilities import TrustedCa
from secperf.metric import (
    num,
    path,
)
from secperf.schema.fields import (
    BusyPoll,
    FileSizes,
    PositiveDuration,
    StrictModel,
    Timeout,
    bounded,
    check_file_sets_total,
    one_or_sweep,
    parse_count,
)
from secperf.services import pki
from secperf.services.nginx import (
    HTTP_PORT,
    HTTPS_PORT,
    MAX_PER_CONNECTION,
    Nginx,
    forget_testbed,
    testbed_nginx,
)
from secperf.workloads.base import (
    MeasureContext,
    WorkloadSpec,
    engine_spec,
)
from secperf.workloads.parts.open_loop import OpenLoop
from secperf.workloads.parts.sources import ManySources, sources_spec

TlsVersion = Literal["1.2", "1.3"]

# Connections in flight: machines of the engine's event loop, not threads; at most
# what the server's nginx takes (NGINX_CONNECTIONS, 131,072, less a margin for the
# proxies in the path), beyond one client address's ports over `sources`.
MAX_PARALLEL = 120_000
HttpParallel = Annotated[
    int | list[int],
    PlainValidator(one_or_sweep(bounded(parse_count, 1, MAX_PARALLEL, "parallel"))),
]


Pct = Annotated[float, Field(ge=0, le=100)]
Micros = Annotated[float, Field(gt=0)]


class Validation(StrictModel):
    """A test's validation criteria (RFC 9411 §7's, and limits of one's own): a test
    that misses one is FAILED with that criterion, not a number (docs/studies/rfc.md,
    "RFC 9411 §7"). Each key left out is not checked."""

    max_failed_pct: Pct | None = None
    """Failed transactions (any error, a status other than 2xx) in % of those attempted."""
    max_reset_pct: Pct | None = None
    """Connections ended by a TCP RST (refused or reset) in % of those initiated."""
    min_rate_pct: Pct | None = None
    """Open loop: the fetch rate achieved in % of the rate offered (the target objective)."""
    max_ttfb_us: Micros | None = None
    """Mean time to first byte (TTFB), at most this many µs."""
    max_ttlb_us: Micros | None = None
    """Mean time to last byte (TTLB), at most this many µs."""
    max_rate_deviation_pct: Pct | None = None
    """The largest deviation of one period's traffic rate (body bits/s) from the window's mean,
    in % of that mean (RFC 9411's constant rate through the sustain phase).
    """
    max_open_deviation_pct: Pct | None = None
    """The largest deviation of one period's mean open connections from the window's mean, in % of
    that mean (RFC 9411's constant concurrent connections).
    """
    deviation_interval: Annotated[float, Field(ge=0.05, le=60)] = 1.0
    """The period those deviations are taken over, in seconds (the engine's `interval`)."""
    deviations_fail: bool = False
    """RFC 9411 says SHOULD for both deviations: missed, they are noted beside the number (false),
    or they fail the test like the others (true).
    """

    def deviations(self) -> bool:
        """Whether a criterion needs the engine's interval records."""
        return self.max_rate_deviation_pct is not None or self.max_open_deviation_pct is not None

    @model_validator(mode="after")
    def _deviation_settings_need_a_deviation(self) -> Validation:
        # the two settings only shape the deviation criteria: set alone they would be
        # read as a check that is never made (judged by value, not by presence: a run
        # directory's scenario is read back with every default written out)
        given = [
            name
            for name in ("deviation_interval", "deviations_fail")
            if getattr(self, name) != type(self).model_fields[name].default
        ]
        if given and not self.deviations():
            raise ValueError(
                f"validation.{given[0]} applies to max_rate_deviation_pct and "
                "max_open_deviation_pct, and neither is given: add one of them or "
                f"leave {' and '.join(given)} out"
            )
        return self


def _criterion(name: str, value: float, limit: float, what: str, unit: str) -> dict[str, object]:
    at_least = name.startswith("min_")
    passed = value >= limit if at_least else value <= limit
    sign = ("<" if at_least else ">") if not passed else ("≥" if at_least else "≤")
    return {
        "name": name,
        "value": value,
        "limit": limit,
        "passed": passed,
        "detail": f"{what} {value:.4g}{unit} {sign} {limit:g}{unit}",
    }


def deviation_pct(values: list[float]) -> float | None:
    """The largest distance of a value from their mean, in % of the mean (None with
    fewer than two values, or a mean of 0: nothing to judge a deviation on)."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    if mean <= 0:
        return None
    return max(abs(x - mean) for x in values) / mean * 100


def sustain_periods(intervals: list[Record], period: float) -> list[Record]:
    """The measured window's interval records that span a whole period (the last
    one, cut by the window's end, does when the duration is a multiple of it)."""
    out = []
    for r in intervals:
        t0, t1 = num(r.get("t_start")), num(r.get("t_end"))
        if r.get("warmup") or t0 is None or t1 is None:
            continue
        if t1 - t0 >= period * 0.999:
            out.append(r)
    return out


def verdict(
    v: Validation, record: Record, offered: float | None, intervals: list[Record] | None = None
) -> dict[str, object]:
    """The record checked against `v` (and the test's interval records, for the
    deviations): {"passed", "criteria": [{name, value, limit, passed, detail}]}; a
    criterion whose figure the record lacks is not met."""
    errors = record.get("errors") or {}
    err = {k: num(errors.get(k)) or 0.0 for k in errors}
    started = num(record.get("started")) or 0.0
    conns = num(record.get("connections")) or 0.0
    initiated = conns + sum(err.get(k, 0.0) for k in ("connect_refused", "connect_timeout"))
    rst = err.get("reset", 0.0) + err.get("connect_refused", 0.0)
    rate = num(record.get("fetches_per_second"))
    # no connection opened in the window (all kept alive from the warm-up): any RST
    # ended one of them
    rst_pct = rst / initiated * 100 if initiated else (None if not started else 100.0 * (rst > 0))
    # a SHOULD criterion (the deviations, unless `deviations_fail`) missed is noted, not failed
    noted = set() if v.deviations_fail else {"max_rate_deviation_pct", "max_open_deviation_pct"}
    figures: dict[str, tuple[float | None, str, str]] = {
        "max_failed_pct": (
            (num(record.get("failed")) or 0.0) / started * 100 if started else None,
            "failed transactions",
            " %",
        ),
        "max_reset_pct": (rst_pct, "TCP RSTs", " %"),
        "min_rate_pct": (
            rate / offered * 100 if rate is not None and offered else None,
            "fetch rate achieved (of the rate offered)",
            " %",
        ),
        "max_ttfb_us": (path(record, "latency_us", "first_byte", "mean"), "TTFB mean", " µs"),
        "max_ttlb_us": (path(record, "latency_us", "total", "mean"), "TTLB mean", " µs"),
    }
    if v.deviations():
        periods = sustain_periods(intervals or [], v.deviation_interval)
        each = f"per {v.deviation_interval:g} s, {len(periods)} periods"
        figures["max_rate_deviation_pct"] = (
            deviation_pct([num(r.get("bits_per_second")) or 0.0 for r in periods]),
            f"traffic rate's largest deviation from its mean ({each})",
            " %",
        )
        figures["max_open_deviation_pct"] = (
            deviation_pct([num(r.get("open")) or 0.0 for r in periods]),
            f"concurrent connections' largest deviation from their mean ({each})",
            " %",
        )
    criteria: list[dict[str, object]] = []
    for name, limit in v.model_dump(exclude_none=True).items():
        if name in ("deviation_interval", "deviations_fail"):
            continue  # settings of the two deviations, not criteria
        value, what, unit = figures[name]
        if name == "min_rate_pct" and not offered:
            continue  # closed loop: the maximum a `load` is a share of, measured first
        if value is None:
            missing = {"name": name, "value": None, "limit": limit, "passed": False}
            crit = {**missing, "detail": f"{what}: not measured"}
        else:
            crit = _criterion(name, value, limit, what, unit)
        criteria.append({**crit, "required": name not in noted})
    passed = all(c["passed"] for c in criteria if c["required"])
    return {"passed": passed, "criteria": criteria}


class HttpWorkload(OpenLoop, ManySources, WorkloadSpec):
    """HTTP/1.1 GETs against nginx in the server host (http_load): fetches/s, bytes/s.

    The files (one per size) are fetched round-robin. `parallel` fetches in flight
    as fast as they go, or with `rate` that many new fetches a second (parallel is
    then the most in flight), or with `load` that share of the baseline's closed-loop
    fetch rate, measured first."""

    held_key: ClassVar[str] = "parallel"
    sweepable: ClassVar[dict[str, str]] = {"parallel": "count"}
    engine_fields: ClassVar[tuple[str, ...]] = (
        "parallel",
        "keepalive",
        "timeout",
        "duration",
        "warmup",
        "rate",
        "tls_version",
        "cipher",
        "busy_poll_us",
        "ramp_up",
    )

    kind: Literal["http"]
    files: FileSizes = Field(default_factory=lambda: [10240])
    """1 B … 1 GiB each, distinct, at most 1 GiB in all."""
    parallel: HttpParallel = 1
    """1 … 120,000 fetches in flight (nginx takes 131,072 connections); beyond 60,000 the
    connections come from more client addresses (`sources`).
    """
    keepalive: bool = False
    """False: one fetch per connection, as http_load does."""
    # Transactions a connection carries before the server closes it (nginx's
    # keepalive_requests; keepalive implied); None: as `keepalive` says.
    requests_per_connection: int | None = Field(default=None, ge=1, le=MAX_PER_CONNECTION)
    """Fetches a connection carries: nginx closes it after that many responses (RFC 9411 §7.3's
    10); implies `keepalive`.
    """
    timeout: Timeout = 5.0
    """How long one fetch may take; past it the fetch fails."""
    # With `rate`: the first `parallel` fetches (each opens its connection) spread
    # over these seconds of the warm-up, the rest at `rate` after them (RFC 9411's
    # ramp-up at an open rate of its own); None: every fetch at `rate`.
    ramp_up: PositiveDuration | None = None
    """Needs `rate`; at most `warmup`; the first `parallel` fetches (each opens its connection)
    spread evenly over these seconds, the rest at `rate` after them: RFC 9411's ramp-up at an
    open rate of its own.
    """
    # µs the engine's loop spins before it sleeps (None: the engine's default, 0).
    busy_poll_us: BusyPoll | None = None
    """0 … 10000: µs the engine's event loop spins (epoll without waiting) before it sleeps; fewer
    wake-ups, more CPU. Only where the client host has CPUs of its own (a lab host, a map
    placement): under `cpus = "one"` it takes the CPU from the server and the DUT
    (docs/performance.md, "The busy poll").
    """
    # HTTPS (the engine's rustls client); the other TLS keys need tls = true.
    tls: bool = False
    """HTTPS to nginx's port 5381 (the engine's rustls client)."""
    tls_version: TlsVersion | None = None
    """The only TLS version offered."""
    cipher: str | None = None
    """The only cipher suite offered; it must be of `tls_version` (the server's key is RSA)."""
    groups: list[str] | None = None
    """Key-exchange groups, in order of preference."""
    resumption: bool = True
    """Session resumption (TLS 1.3 tickets, TLS 1.2 session ids and tickets)."""
    # RFC 9411 §7's validation criteria: a test that misses one is FAILED, not a number.
    validation: Validation | None = None
    """The keys below; criteria each test must meet; a test that misses one is reported as FAILED
    with the criterion, not as a number (the deviations, SHOULD in RFC 9411, are noted beside
    the number unless `deviations_fail`).
    """

    @model_validator(mode="after")
    def _tls_keys(self) -> HttpWorkload:
        if not self.tls:
            given = [k for k in ("tls_version", "cipher", "groups") if getattr(self, k) is not None]
            if given or "resumption" in self.model_fields_set:
                key = (given or ["resumption"])[0]
                raise ValueError(f"{key} is a TLS setting: set tls = true, or leave {key} out")
        if self.cipher is not None and self.tls_version is not None:
            v13 = self.cipher.startswith("TLS13_")
            if v13 != (self.tls_version == "1.3"):
                raise ValueError(
                    f"cipher {self.cipher} is not a TLS {self.tls_version} suite: "
                    "TLS 1.3 suites start with TLS13_, TLS 1.2 ones with TLS_ECDHE_"
                )
        return self

    @model_validator(mode="after")
    def _ramp_up(self) -> HttpWorkload:
        if self.ramp_up is None:
            return self
        if self.rate is None:
            raise ValueError(
                "ramp_up paces the first fetches of a `rate` schedule: give rate, or "
                "leave ramp_up out"
            )
        if self.ramp_up > self.warmup:
            raise ValueError(
                f"ramp_up ({self.ramp_up:g} s) must fit in warmup ({self.warmup:g} s): "
                "the connections open before the measured window"
            )
        return self

    @model_validator(mode="after")
    def _rate_criterion(self) -> HttpWorkload:
        v = self.validation
        if v is not None and v.min_rate_pct is not None and not self.open_loop:
            raise ValueError(
                "validation.min_rate_pct compares the rate achieved with the rate "
                "offered: give rate or load, or leave min_rate_pct out"
            )
        return self

    @model_validator(mode="after")
    def _deviation_periods(self) -> HttpWorkload:
        v = self.validation
        if v is not None and v.deviations() and self.duration < 2 * v.deviation_interval:
            raise ValueError(
                f"validation's deviations compare periods of {v.deviation_interval:g} s, and "
                f"a {self.duration:g} s window holds fewer than two: make duration at least "
                f"{2 * v.deviation_interval:g} s or set validation.deviation_interval to at "
                f"most {self.duration / 2:g}"
            )
        return self

    @model_validator(mode="after")
    def _files_total(self) -> HttpWorkload:
        check_file_sets_total(self.file_sets())
        return self

    def file_sets(self) -> dict[str, list[int]]:
        return {"files": self.files}

    def record_interval(self) -> float:
        """Interval records only for the validation's deviations (engine_spec below)."""
        v = self.validation
        return v.deviation_interval if v is not None and v.deviations() else 0.0

    def unrecorded(self) -> frozenset[str]:
        return self.closed_loop_keys()

    def default_name(self) -> str:
        return "http"

    def held(self) -> int:
        return max(self.parallel) if isinstance(self.parallel, list) else self.parallel


def hostport(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def target_address(ctx: MeasureContext) -> str:
    """The server address this variant reaches (the engine target without its port)."""
    host = ctx.target.rsplit(":", 1)[0]
    return host.strip("[]")


def nginx_for(ctx: MeasureContext) -> Nginx:
    """The server host's nginx (secperf.services.nginx.testbed_nginx: one per host,
    shared with the mix workload), started the first time it is needed."""
    base = ctx.extra.get("files_dir")
    root = Path(base) if base else Path(tempfile.mkdtemp(prefix=f"secperf-{ctx.testbed.prefix}-"))
    return testbed_nginx(
        ctx.testbed.prefix,
        ctx.testbed.host(ctx.server),
        root / "web" / ctx.server,
        ctx.topology.server_address(ctx.family, "dut", ctx.server),
    )


def forget(prefix: str) -> None:
    """Drop (and stop) the nginx of a testbed, e.g. in tests that reuse nothing."""
    forget_testbed(prefix)


def trust_bundle(ctx: MeasureContext, server: Nginx) -> Path:
    """The CA file the engine trusts: the server's CA and every mechanism's own CA,
    in one PEM file beside the server's certificates."""
    assert server.ca is not None and server.tls is not None
    cas = [server.ca.cert]
    for mech, mctx in ctx.mechanisms:
        ca = mech.trusted_ca(mctx) if isinstance(mech, TrustedCa) else None
        if ca is not None:
            cas.append(ca)
    bundle = server.tls.cert.parent / f"trust-{ctx.variant}.pem"
    bundle.write_text("".join(c.read_text() for c in cas))
    bundle.chmod(0o600)
    return bundle


def fetch_test(ctx: MeasureContext, p: HttpWorkload, keep: Callable[[Record], None]) -> Record:
    """One engine `http` test of `p` against the server host's nginx: its records go
    to `keep` (a result with its `validation` verdict when `p` has criteria); the
    result is returned."""
    server = nginx_for(ctx)
    urls = server.serve(list(p.files), p.requests_per_connection)
    tls: dict[str, object] = {}
    if p.tls:
        tls = {
            "tls": True,
            "resumption": p.resumption,
            "ca_file": str(trust_bundle(ctx, server).resolve()),
            "server_name": pki.SERVER_NAME,
        }
        if p.groups is not None:
            tls["groups"] = list(p.groups)
    port = HTTPS_PORT if p.tls else HTTP_PORT
    if p.requests_per_connection is not None:
        tls["keepalive"] = True
    # interval records only for the deviations (they are what those are judged on)
    period = p.validation.deviation_interval if p.validation and p.validation.deviations() else 0
    spec = engine_spec(
        p,
        server=hostport(target_address(ctx), port),
        urls=urls,
        interval=period,
        **tls,
        **sources_spec(ctx, p),
    )
    budget = p.duration + p.warmup + 2 * p.timeout + 15
    checked = p.validation
    intervals: list[Record] = []

    def on_record(rec: Record) -> None:
        # the verdict travels with the result (records.jsonl, then the summary)
        if checked is not None and rec.get("type") == "interval":
            intervals.append(rec)
        elif checked is not None and rec.get("type") == "result":
            rec["validation"] = verdict(checked, rec, p.rate, intervals)
        keep(rec)

    return run_test(ctx.testbed.host(ctx.client), spec, on_record=on_record, timeout=budget).result
