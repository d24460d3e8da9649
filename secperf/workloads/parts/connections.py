"""Connection tests as several kinds run them: how a connection closes (crr's
`close`, connections' `close`), one connection test on the client with a budget from
its own times (`run_on_client`: connections, conn_rate, teardown_rate, dos), and a
paced crr result's summary (conn_rate, dos)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

from secperf.engine import Record, run_test
from secperf.workloads.base import MeasureContext, Spec


def _old_close_name(value: object) -> object:
    """`fin`, the client's orderly close before the order had names, is `client-first`."""
    return "client-first" if value == "fin" else value


# How crr-style workloads end each connection: "server-first" (netperf's TCP_CRR and an
# HTTP/1.0 server: the server closes right after its response, the client reads the
# end of stream and closes; the server keeps the TIME_WAIT), "client-first" (once
# "fin": the client shuts down first and waits for the server's FIN, half a round trip
# more, the client keeps the TIME_WAIT), "reset" (SO_LINGER 0: one RST, no FIN).
Close = Annotated[
    Literal["server-first", "client-first", "reset"], BeforeValidator(_old_close_name)
]


# How the server answers each client FIN: its own FIN (an orderly close, the client
# keeps the TIME_WAIT), or an RST (SO_LINGER 0, no TIME_WAIT).
FinClose = Literal["fin", "reset"]


def run_on_client(
    ctx: MeasureContext, spec: Spec, keep_all: bool, *, keep_result: bool = True
) -> Record:
    """Runs `spec` in the client with a budget from its own times; keeps its
    records in the run only if `keep_all` (its result too unless not `keep_result`:
    the caller keeps it once it has added to it)."""
    budget = (
        spec["duration"]
        + spec.get("hold", 0)
        + spec.get("warmup", 0)
        + 4 * spec["timeout"]
        + 30
        # validating and closing held connections: ~50 µs each at most
        + spec.get("connections", 0) / 20_000
    )

    def keep(rec: Record) -> None:
        if keep_all and (keep_result or rec.get("type") != "result"):
            ctx.keep(rec)

    return run_test(ctx.testbed.host(ctx.client), spec, on_record=keep, timeout=budget).result


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
