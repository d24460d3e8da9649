"""Connect, request, response, close: connections per second (netperf TCP_CRR)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secperf.workloads.common import copy_if_set


def engine_spec(params: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"kind": "crr", "protocol": "tcp"}
    return copy_if_set(
        spec,
        params,
        {
            "request": "request_size",
            "response": "response_size",
            "parallel": "parallel",
            "payload": "payload",
            "close": "close",
        },
    )
