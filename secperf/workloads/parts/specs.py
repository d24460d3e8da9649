"""The measured flow another kind runs beside its own, as the kind that owns it would
send it: a TCP stream (min_flood's measured stream, illegal's allowed flow) and a TCP
rr (illegal's). Each is the owning kind's engine fields with its defaults, built with
`model_construct` (nothing to validate: the caller sets every key it changes), so the
engine spec (`secperf.workloads.base.engine_spec`) is the one that kind would build.
A unit test holds each to its kind's model (tests/unit/test_kind_contracts.py).
"""

from __future__ import annotations

from typing import ClassVar

from secperf.workloads.base import WorkloadSpec


class TcpStream(WorkloadSpec):
    """The `stream` kind's engine fields and defaults (secperf.workloads.stream)."""

    engine_fields: ClassVar[tuple[str, ...]] = (
        "protocol",
        "direction",
        "message",
        "socket_buffer",
        "parallel",
        "payload",
        "rate",
        "rcvlowat",
        "bytes",
        "duration",
        "warmup",
    )
    engine_names: ClassVar[dict[str, str]] = {"rate": "rate_bps"}

    kind: str = "stream"
    protocol: str = "tcp"
    direction: str = "send"
    message: int | None = 131072
    socket_buffer: int | None = None
    parallel: int = 1
    payload: str = "random"
    rate: int | None = None
    rcvlowat: int | None = None
    bytes: int | None = None


class TcpRr(WorkloadSpec):
    """The `rr` kind's engine fields and defaults (secperf.workloads.rr)."""

    engine_fields: ClassVar[tuple[str, ...]] = (
        "protocol",
        "request",
        "response",
        "inflight",
        "payload",
        "rate",
        "duration",
        "warmup",
    )

    kind: str = "rr"
    protocol: str = "tcp"
    request: int = 1
    response: int = 1
    inflight: int = 1
    payload: str = "random"
    rate: int | None = None


def stream(**keys: object) -> TcpStream:
    """A TCP stream point with `keys` set (kind `stream`), the rest the stream kind's
    defaults."""
    return TcpStream.model_construct(kind="stream", protocol="tcp", **keys)  # type: ignore[arg-type]


def rr(**keys: object) -> TcpRr:
    """A TCP rr point with `keys` set (kind `rr`), the rest the rr kind's defaults."""
    return TcpRr.model_construct(kind="rr", protocol="tcp", **keys)  # type: ignore[arg-type]
