"""Bulk transfer (netperf TCP_STREAM / UDP_STREAM, iperf3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secperf.workloads.common import copy_if_set

TIME_LIMIT_S = 300.0  # the schema's default time_limit of a fixed transfer


def engine_spec(params: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"kind": "stream"}
    spec = copy_if_set(
        spec,
        params,
        {
            "protocol": "protocol",
            "direction": "direction",
            "message": "message_size",
            "socket_buffer": "socket_buffer",
            "parallel": "parallel",
            "payload": "payload",
            "rate": "rate_bps",
            "rcvlowat": "rcvlowat",
            "bytes": "bytes",
        },
    )
    if params.get("bytes") is not None:
        # A fixed transfer: timed from its start to its last byte, within its limit.
        spec["duration"] = float(str(params.get("time_limit") or TIME_LIMIT_S))
        spec["warmup"] = 0.0
    return spec
