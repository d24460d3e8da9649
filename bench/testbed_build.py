"""How long building and tearing down the 3-host testbed takes (run as root).

    .venv/bin/python bench/testbed_build.py [--iterations 20]

Prints the median and the worst of build + teardown for the plain topology
(client, dut, server) and for the largest one (direct link, attacker, 100 Mbit/s
shaping, 200 emulated hosts). The target is under 1 s for the plain one.
"""

from __future__ import annotations

import argparse
import statistics
import time

from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology


def measure(topology: Topology, iterations: int) -> list[float]:
    times = []
    for _ in range(iterations):
        t0 = time.monotonic()
        Testbed.build(topology).teardown()
        times.append(time.monotonic() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    cases = {
        "client-dut-server": Topology.standard(),
        "+direct +attacker +100mbit +200 hosts": Topology.standard(
            direct=True, attacker=True, link_rate_bps=100_000_000, emulated_hosts=200
        ),
    }
    for name, topology in cases.items():
        times = measure(topology, args.iterations)
        print(
            f"{name:<40} build+teardown median {statistics.median(times) * 1000:7.1f} ms"
            f"  max {max(times) * 1000:7.1f} ms  (n={len(times)})"
        )


if __name__ == "__main__":
    main()
