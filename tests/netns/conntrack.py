"""What the connection-capacity tests share: a DUT rule that tracks every forwarded
connection, and nf_conntrack_max held to a limit for one test.

nf_conntrack_max is machine-wide on this kernel (read-only in a namespace, each
namespace's table held to it): `limited_conntrack` sets it and puts the old value
back, also when the test fails."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CT_MAX = Path("/proc/sys/net/netfilter/nf_conntrack_max")
# A rule that makes the DUT track every forwarded connection (its table then fills).
TRACKING = """
table inet capacity {
    chain through {
        type filter hook forward priority 0; policy accept;
        ct state new counter
    }
}
"""


@contextmanager
def limited_conntrack(limit: int) -> Iterator[None]:
    """nf_conntrack_max at `limit` inside, the old value back after (skips the test
    where the kernel has none or it cannot be set)."""
    if not CT_MAX.exists():
        pytest.skip("this kernel has no nf_conntrack_max")
    old = CT_MAX.read_text().strip()
    try:
        CT_MAX.write_text(f"{limit}\n")
    except OSError as exc:
        pytest.skip(f"cannot set nf_conntrack_max here: {exc}")
    try:
        yield
    finally:
        CT_MAX.write_text(f"{old}\n")
