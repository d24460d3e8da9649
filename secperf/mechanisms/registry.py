"""Every mechanism kind, by its `kind = "..."` name: one line per kind.

A kind is one module (or package) that declares itself once (`KIND`, a
`secperf.mechanisms.base.MechanismKind`); adding one is a new module and a line
here (docs/architecture.md). Nothing else names a kind: the scenario
schema validates entries through `MECHANISMS`, and the runner, the preflight and
the workloads read the declarations.
"""

from __future__ import annotations

from typing import Any

from secperf.mechanisms import (
    acl,
    appliance,
    custom,
    external,
    fastpath,
    ids,
    ips,
    nat,
    proxy,
    rps,
    ruleset,
    synproxy,
    tls_inspect,
    vpn,
)
from secperf.mechanisms.base import MechanismKind
from secperf.schema.registry import KindRegistry

MECHANISMS: KindRegistry[MechanismKind[Any]] = KindRegistry(
    "mechanism",
    [
        acl.KIND,
        custom.KIND,
        ruleset.KIND,
        nat.KIND,
        appliance.KIND,
        synproxy.KIND,
        vpn.KIND,
        proxy.KIND,
        tls_inspect.KIND,
        ips.KIND,
        ids.KIND,
        fastpath.KIND,
        rps.KIND,
        external.KIND,
    ],
)
