"""VPN tunnels placed by the runner: host-to-host on the client and server, and
site-to-site on a gateway pair, run from a scenario end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.netns.rundirs import only_run

pytestmark = pytest.mark.netns

HOST_TO_HOST = """
name = "vpn-ends"
[repeat]
min = 2
max = 2
[timing]
duration = "0.5s"
warmup = "0.1s"
[variants.wg]
mechanisms = [{ kind = "vpn", implementation = "wireguard" }]
[[workloads]]
kind = "stream"
protocol = "tcp"
[[workloads]]
name = "ttcp"
kind = "stream"
sweep = "zip"
link_rate = ["unlimited", "10mbit"]
bytes = ["8MiB", "1MiB"]
payload = ["random", "text"]
"""

SITE_TO_SITE = """
name = "vpn-gateways"
[repeat]
min = 2
max = 2
[timing]
duration = "0.5s"
warmup = "0.1s"
[topology]
hosts = [
  { name = "client", role = "client", zone = "inside" },
  { name = "gw-a", role = "gateway" },
  { name = "gw-b", role = "gateway" },
  { name = "server", role = "server", zone = "outside" },
]
links = [
  { between = ["client", "gw-a"] },
  { between = ["gw-a", "gw-b"], rate = "200mbit" },
  { between = ["gw-b", "server"] },
]
[variants.ovpn]
mechanisms = [{ kind = "vpn", implementation = "openvpn", cipher = "aes-128-gcm", on = "gateways" }]
[[workloads]]
kind = "stream"
protocol = "tcp"
"""


def run(tmp_path: Path, text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    path = tmp_path / "s.toml"
    path.write_text(text)
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "secperf", "run", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run(out)
    lines = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines()]
    return json.loads((run_dir / "run.json").read_text()), lines


def by_test(
    lines: list[dict[str, Any]], variant: str, workload: str = "tcp-stream"
) -> list[tuple[int, int]]:
    """(bytes the engine received, bytes through the client's tunnel device) per
    measured test (a traced round's records carry a `phase` and are left out)."""
    measured = [ln for ln in lines if "phase" not in ln]
    results = {
        (ln["point_id"], ln["rep"]): ln["record"]["receiver"]["bytes"]
        for ln in measured
        if ln["variant"] == variant
        and ln["workload"] == workload
        and ln["record"]["type"] == "result"
    }
    tunnels = {
        (ln["point_id"], ln["rep"]): ln["record"]
        for ln in measured
        if ln["variant"] == variant
        and ln["workload"] == workload
        and ln["record"]["type"] == "mechanism"
    }
    assert set(results) == set(tunnels) and {r for _p, r in results} == {0, 1}
    return [(results[k], next(iter(tunnels[k]["device_bytes"].values()))) for k in sorted(results)]


@pytest.mark.serial
def test_host_to_host_tunnel_carries_the_measured_bytes(tmp_path: Path, state_dir: Path) -> None:
    meta, lines = run(tmp_path, HOST_TO_HOST)
    assert meta["placements"]["wg"] == [{"kind": "vpn", "hosts": ["client", "server"]}]
    for measured, through_tunnel in by_test(lines, "wg"):
        # The whole test (warm-up too) crossed the device: at least the measured bytes.
        assert measured > 1_000_000 and through_tunnel >= measured
    mech = next(ln["record"] for ln in lines if ln["record"]["type"] == "mechanism")
    assert mech["tunnel"]["implementation"] == "wireguard"
    assert all(v > 1_000_000 for v in mech["memory_bytes"].values())
    # The baseline did not use the tunnel: its target was the server's own address.
    base = [ln for ln in lines if ln["variant"] == "baseline" and ln["record"]["type"] == "result"]
    assert base and all(ln["record"]["receiver"]["bytes"] > 0 for ln in base)
    # The fixed transfers: exactly their bytes, through the tunnel, and the 10 Mbit/s
    # point ran on links reshaped to 10 Mbit/s (the unlimited one is far faster).
    for measured, through_tunnel in by_test(lines, "wg", "ttcp"):
        assert measured in (8 * 2**20, 2**20) and through_tunnel >= measured
    rate: dict[str, list[float]] = {}
    for ln in lines:
        rec = ln["record"]
        if ln["workload"] == "ttcp" and rec["type"] == "result":
            assert rec["transfer"]["bytes"] == rec["receiver"]["bytes"]
            rate.setdefault(ln["label"], []).append(rec["bits_per_second"])
    assert set(rate) == {"payload=random bytes=8MiB link_rate=unlimited",
                         "payload=text bytes=1MiB link_rate=10mbit"}  # fmt: skip
    assert all(4e6 < r <= 10.2e6 for r in rate["payload=text bytes=1MiB link_rate=10mbit"]), rate
    assert min(rate["payload=random bytes=8MiB link_rate=unlimited"]) > 20e6, rate


def test_gateway_pair_tunnel_routes_the_far_network(tmp_path: Path, state_dir: Path) -> None:
    meta, lines = run(tmp_path, SITE_TO_SITE)
    assert meta["placements"]["ovpn"] == [{"kind": "vpn", "hosts": ["gw-a", "gw-b"]}]
    for measured, through_tunnel in by_test(lines, "ovpn"):
        assert measured > 1_000_000 and through_tunnel >= measured
