"""How fast the `connections` kind opens many connections from one client address and
from several (root: a client–dut–server testbed, the DUT forwarding): the kernel looks
for a free source port for every connect, and that search slows as the address's
port range fills. Cases, in rounds that repeat them in the same order:

  19,000 from one address   one engine process, a third of the range in use
  60,000 from one address   four processes, the range nearly full
  60,000 from five          four processes, 12,000 an address

opens/s of each (the engine's `open_rate`). secperf's `sources = "auto"` spreads a
count over more addresses where the testbed has them (workloads/sources.py,
AUTO_SPREAD); docs/studies/rfc.md quotes
the result JSON written to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from secperf.engine import CONTROL_PORT, DATA_PORTS, start_server  # noqa: E402
from secperf.scenario.sweep import one_point  # noqa: E402
from secperf.testbed.testbed import Testbed  # noqa: E402
from secperf.testbed.topology import Topology  # noqa: E402
from secperf.workloads.base import MeasureContext  # noqa: E402
from secperf.workloads.connections import ConnectionsExecutor  # noqa: E402

CASES = ((19_000, 1), (60_000, 1), (60_000, 5))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    results: list[dict[str, Any]] = []
    load_at_start = os.getloadavg()[0]
    state = Path(tempfile.mkdtemp(prefix="secperf-bench-"))
    with Testbed.build(Topology.standard(emulated_hosts=4), state_dir=state) as tb:
        server = start_server(tb.host("server"), f"0.0.0.0:{CONTROL_PORT}", data_ports=DATA_PORTS)
        try:
            for rnd in range(args.rounds):
                for count, sources in CASES:
                    ctx = MeasureContext.on(tb, f"198.18.2.2:{CONTROL_PORT}", keep=lambda _r: None)
                    point = one_point(
                        {
                            "kind": "connections",
                            "connections": count,
                            "sources": sources,
                            "hold": 0.5,
                            "duration": 60,
                        }
                    )
                    rec = ConnectionsExecutor().measure(ctx, point)
                    row = {
                        "round": rnd,
                        "connections": count,
                        "sources": sources,
                        "open_rate": rec.get("open_rate"),
                        "capacity": rec.get("capacity"),
                        "processes": rec.get("processes"),
                        "stopped_by": rec.get("stopped_by"),
                    }
                    results.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            server.stop()
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "bench": "connections_open_rate",
                    "date": datetime.now(UTC).isoformat(timespec="seconds"),
                    "load_at_start": load_at_start,
                    "results": results,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
