"""Request/response on one connection (netperf TCP_RR / UDP_RR)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secperf.workloads.common import copy_if_set


def engine_spec(params: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"kind": "rr"}
    return copy_if_set(
        spec,
        params,
        {
            "protocol": "protocol",
            "request": "request_size",
            "response": "response_size",
            "inflight": "inflight",
            "payload": "payload",
        },
    )
