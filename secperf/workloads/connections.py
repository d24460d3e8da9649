"""RFC 3511 connection tests: §5.2 capacity (`connections`), §5.3 setup rate
(`conn_rate`, a search over crr at a paced rate) and §5.4 teardown rate
(`teardown_rate`, a search over the close rate of held connections)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from secperf.engine import Record, run_test
from secperf.errors import EngineError
from secperf.mechanisms.base import flush_flow_state
from secperf.scenario.sweep import WorkloadPoint
from secperf.search import Trial, bisect_rate, passes
from secperf.testbed.topology import DUT
from secperf.workloads.base import MeasureContext

# Below this share of the offered rate, the rate was not achieved: a failure too.
ACHIEVED_SHARE = 0.95


def _f(params: dict[str, Any], key: str, default: float) -> float:
    value = params.get(key)
    return default if value is None else float(str(value))


def crr_spec(
    target: str, p: dict[str, Any], rate: float, data_port: int | None = None
) -> dict[str, Any]:
    """A paced crr from the workload's parameters (§5.3's trials, §5.5's dos)."""
    spec: dict[str, Any] = {
        "kind": "crr",
        "server": target,
        "rate": rate,
        "parallel": int(str(p.get("parallel") or 16)),
        "timeout": _f(p, "timeout", 1.0),
        "request_size": int(str(p.get("request") or 1)),
        "response_size": int(str(p.get("response") or 1)),
        "duration": _f(p, "duration", 2.0),
        "warmup": _f(p, "warmup", 0.5),
        "interval": 0,
        "close": str(p.get("close") or "fin"),
    }
    if data_port is not None:
        spec["data_port"] = data_port
    return spec


def crr_summary(r: Record) -> dict[str, Any]:
    """Rate, completed, failed, failure ratio and latency of a paced crr result."""
    done = int(r.get("transactions") or 0)
    lost = int((r.get("loss") or {}).get("lost") or 0)
    return {
        "rate": float(r.get("transactions_per_second") or 0.0),
        "completed": done,
        "failed": lost,
        "failure_ratio": (lost / (done + lost)) if done + lost else None,
        "latency_us": r.get("latency_us"),
    }


def connections_spec(params: dict[str, Any], server: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "connections",
        "server": server,
        "connections": int(str(params.get("connections", 10000))),
        "hold": _f(params, "hold", 1.0),
        "timeout": _f(params, "timeout", 5.0),
        "duration": _f(params, "duration", 5.0),
        "close": str(params.get("close") or "fin"),
    }
    for key in ("rate", "close_rate"):
        if params.get(key) is not None:
            spec[key] = float(str(params[key]))
    return spec


def run_on_client(ctx: MeasureContext, spec: dict[str, Any], keep_all: bool) -> Record:
    """Runs `spec` in the client with a budget from its own times; keeps its
    records in the run only if `keep_all`."""
    budget = (
        spec["duration"] + spec.get("hold", 0) + spec.get("warmup", 0) + 4 * spec["timeout"] + 30
    )
    keep = ctx.keep if keep_all else (lambda _r: None)
    return run_test(ctx.testbed.host(ctx.client), spec, on_record=keep, timeout=budget).result


@dataclass(frozen=True)
class ConnectionsExecutor:
    hosts: frozenset[str] = frozenset()

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        return run_on_client(ctx, connections_spec(dict(point.params), ctx.target), keep_all=True)


def fresh_dut(ctx: MeasureContext) -> None:
    """Before each trial of a search: the DUT (and every host carrying a mechanism)
    forgets the connections of the trial before (TIME_WAIT entries of an orderly
    close, NAT bindings), so a trial's result does not depend on which rates the
    search tried first."""
    names = {h for _mech, mctx in ctx.mechanisms for h in mctx.hosts}
    if DUT in ctx.topology.names:
        names.add(DUT)
    for name in sorted(names):
        flush_flow_state(ctx.testbed.host(name))


def _trial(kind: str, ctx: MeasureContext, rate: float, t: Trial) -> Trial:
    """Keep the trial as a `trial` record (not a "result": the summary reads one
    result per round, the search's) and hand it back to the search."""
    ctx.keep(
        {
            "type": "trial",
            "kind": kind,
            "asked": rate,
            "achieved": t.achieved,
            "passed": t.passed,
            **t.detail,
        }
    )
    return t


@dataclass(frozen=True)
class ConnRateExecutor:
    """§5.3: the highest crr rate with at most max_failure_pct failed connections."""

    hosts: frozenset[str] = frozenset()

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        p = dict(point.params)
        max_ratio = _f(p, "max_failure_pct", 0.1) / 100.0

        def trial(rate: float) -> Trial:
            fresh_dut(ctx)
            try:
                r = run_on_client(ctx, crr_spec(ctx.target, p, rate), keep_all=False)
            except EngineError as exc:
                return _trial("crr", ctx, rate, Trial(False, None, {"error": exc.message}))
            s = crr_summary(r)
            done, lost, achieved = s["completed"], s["failed"], s["rate"]
            ok = passes(lost, done + lost, max_ratio) and achieved >= ACHIEVED_SHARE * rate
            return _trial(
                "crr", ctx, rate, Trial(ok, achieved, {"completed": done, "failed": lost})
            )

        return _search(ctx, p, trial, "conn_rate", max_ratio)


@dataclass(frozen=True)
class TeardownRateExecutor:
    """§5.4: the highest close rate whose FINs the server all sees, at that rate."""

    hosts: frozenset[str] = frozenset()

    def measure(self, ctx: MeasureContext, point: WorkloadPoint) -> Record:
        p = dict(point.params)
        max_ratio = _f(p, "max_failure_pct", 0.1) / 100.0
        n = int(str(p.get("connections", 2000)))

        def trial(rate: float) -> Trial:
            fresh_dut(ctx)
            spec = connections_spec(
                {
                    "connections": n,
                    "hold": 0,
                    "close_rate": rate,
                    "timeout": p.get("timeout"),
                    "duration": p.get("duration"),
                    "close": p.get("close"),
                },
                ctx.target,
            )
            try:
                r = run_on_client(ctx, spec, keep_all=False)
            except EngineError as exc:
                return _trial("connections", ctx, rate, Trial(False, None, {"error": exc.message}))
            tear = r.get("teardown") or {}
            closed, missing = int(tear.get("closed") or 0), int(tear.get("missing") or 0)
            seen = float(r.get("teardown_rate") or 0.0)
            ok = (
                int(r.get("established") or 0) == n
                and passes(missing, closed, max_ratio)
                and seen >= ACHIEVED_SHARE * rate
            )
            detail = {"closed": closed, "missing": missing}
            return _trial("connections", ctx, rate, Trial(ok, seen, detail))

        return _search(ctx, p, trial, "teardown_rate", max_ratio)


def _search(
    ctx: MeasureContext,
    p: dict[str, object],
    trial: Callable[[float], Trial],
    kind: str,
    max_ratio: float,
) -> Record:
    """Bisect with the workload's bounds; the result record carries the bracket
    (`search`: found with its resolution, or below / at least a bound, never a
    number standing in for one). A trial passes only with ≥ 95 % of its asked rate
    achieved, so the asked rates place the bracket; the achieved ones are beside."""
    found = bisect_rate(
        trial,
        low=_f(p, "low", 500),
        high=_f(p, "high", 20000),
        resolution_pct=_f(p, "resolution_pct", 10),
        max_steps=int(str(p.get("max_steps", 8))),
        measure="asked",
        reports="passed",
    )
    rec: Record = {
        "type": "result",
        "kind": kind,
        "max_failure_pct": max_ratio * 100,
        "search": found.as_dict(),
        "close": str(p.get("close") or "fin"),
    }
    ctx.keep(rec)
    return rec
