"""Bulk transfer (netperf TCP_STREAM / UDP_STREAM, iperf3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secperf.workloads.common import copy_if_set


def engine_spec(params: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"kind": "stream"}
    return copy_if_set(
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
        },
    )
