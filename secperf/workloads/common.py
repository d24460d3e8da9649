"""Helpers shared by the workload-to-spec mappings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Spec = dict[str, Any]


def copy_if_set(spec: Spec, params: Mapping[str, Any], mapping: Mapping[str, str]) -> Spec:
    """Copy params that are set (not None) into spec under the engine's names."""
    for ours, theirs in mapping.items():
        value = params.get(ours)
        if value is not None:
            spec[theirs] = value
    return spec
