"""When a test's result stands, and when a failed test is worth a second attempt."""

from __future__ import annotations

from pydantic import ValidationError

from secperf.engine import Record
from secperf.results.records import ErrorRecord
from secperf.workloads.registry import WORKLOADS

# Engine error kinds that fail the same way every time: retrying only wastes a round.
DETERMINISTIC_ERRORS = frozenset({"spec", "target"})


def fails_again(record: Record | None) -> bool:
    """An engine error that a second attempt would repeat: a spec the engine refuses,
    a target it may not reach, a test that moved no traffic (the kernel refused every
    send). Connection resets, a lost server report or unstamped probes may pass."""
    if not record:
        return False
    try:
        error = ErrorRecord.model_validate(record)
    except ValidationError:  # not the engine's error record (secperf's own, or none)
        return False
    return error.kind in DETERMINISTIC_ERRORS or (
        error.kind == "measurement" and "moved no traffic" in error.message
    )


def moved_nothing(result: Record) -> str | None:
    """Why a result record that moved no traffic cannot stand as a result (else None):
    0 bit/s with 0 % loss is not a measurement of the path but of nothing. The record's
    kind says which of its fields count the traffic it moved (`WorkloadKind.moved`)."""
    if result.get("type") != "result":
        return None
    kind = str(result.get("kind", ""))
    fields = WORKLOADS.get(kind).moved if kind in WORKLOADS else ()
    if not fields:
        return None
    got = [result.get(f) for f in fields]
    if any(not isinstance(v, int | float) for v in got) or any(got):
        return None
    sender = result.get("sender")
    sent = sender.get("messages") if isinstance(sender, dict) else None
    what = "no datagram or byte arrived" if sent else "the sender sent nothing"
    return f"the {result.get('kind')} test moved no traffic in the measured window ({what})"
