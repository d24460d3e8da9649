"""What timestamping itself costs the latency kind (run as root).

On a client–dut–server testbed with a direct client–server link
(`Topology.standard(direct=True)`), interleaved, each case `--rounds` times:

- floor: one-way delay on the direct link (no dut): what the measurement sees
  with nothing to measure; then the same through the dut;
- kernel vs user stamps on the direct link at the same low rate: the delay
  user-space stamps add (scheduling, syscalls) over kernel software stamps;
- max rate: probes/s achieved with rate_pps = 10 M (as fast as the sender
  goes), kernel stamps (SO_TIMESTAMPING, errqueue reads) vs user stamps.

Prints a table of medians. Numbers on a shared machine are noisy: compare
rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

from secperf.engine import run_test, start_server
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology

CONTROL = 5201


def case(tb: Testbed, server: str, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "latency",
        "server": f"{server}:{CONTROL}",
        "rate_pps": 2000,
        "duration": 2.0,
        "warmup": 0.5,
        "interval": 0,
        **extra,
    }
    return run_test(tb.host("client"), spec).result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    topo = Topology.standard(direct=True)
    cases: dict[str, tuple[str, dict[str, Any]]] = {
        "direct kernel 2k pps": ("direct", {}),
        "direct user 2k pps": ("direct", {"timestamps": "user"}),
        "via dut kernel 2k pps": ("dut", {}),
        "direct kernel max pps": ("direct", {"rate_pps": 10_000_000, "duration": 1.0}),
        "direct user max pps": (
            "direct",
            {"rate_pps": 10_000_000, "duration": 1.0, "timestamps": "user"},
        ),
    }
    got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cases}
    with Testbed.build(topo) as tb:
        srv = start_server(tb.host("server"), f"0.0.0.0:{CONTROL}", data_ports=(5300, 5399))
        try:
            for _ in range(args.rounds):
                for name, (via, extra) in cases.items():
                    r = case(tb, topo.server_address(via=via), **extra)
                    c = r["combined"]
                    got[name].append(
                        (c["delay_us"]["mean"], c["delay_us"]["p99"], c["achieved_pps"])
                    )
        finally:
            srv.stop()
    print(f"{'case':28} {'delay mean µs':>14} {'p99 µs':>8} {'achieved pps (both dirs)':>26}")
    for name, rows in got.items():
        med = [statistics.median(col) for col in zip(*rows, strict=True)]
        print(f"{name:28} {med[0]:14.1f} {med[1]:8.1f} {med[2]:26.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
