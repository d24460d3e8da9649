"""`[testbed] offloads`: with "off" every veth really has TSO/GSO/GRO off and a TCP
stream crosses the DUT's nft counter as wire-size packets; with "on" (the kernel's
veth defaults) as super-packets, which is what hides per-packet cost."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from secperf.engine import CONTROL_PORT, DATA_PORTS, run_test, start_server
from secperf.run import hostinfo
from secperf.scenario.sweep import one_point
from secperf.testbed.links import OFFLOAD_FEATURES, offload_state
from secperf.testbed.testbed import Testbed
from secperf.testbed.topology import Topology
from secperf.workloads.base import engine_spec

pytestmark = pytest.mark.netns

SERVER = "198.18.2.2"


def forwarded_client_to_server(tb: Testbed, seconds: float) -> tuple[int, int]:
    """(packets, bytes) of a TCP stream client -> server as the DUT's forward hook
    counts them (an nft counter in the DUT, like any rule a mechanism would load)."""
    table = f"secperf_{tb.prefix}_offl"
    dut = tb.host("dut")
    dut.run(
        ["nft", "-f", "-"],
        input=(
            f"table inet {table} {{\n"
            "  chain forward {\n"
            "    type filter hook forward priority 0; policy accept;\n"
            f"    ip saddr 198.18.1.2 ip daddr {SERVER} tcp dport {DATA_PORTS[0]}-{DATA_PORTS[1]}"
            " counter\n"
            "  }\n"
            "}\n"
        ),
    )
    server = start_server(tb.host("server"), f"0.0.0.0:{CONTROL_PORT}", data_ports=DATA_PORTS)
    try:
        point = one_point({"kind": "stream", "duration": seconds, "warmup": 0.2})
        spec = engine_spec(point.spec, server=f"{SERVER}:{CONTROL_PORT}")
        res = run_test(tb.host("client"), spec).result
        assert float(res["bits_per_second"]) > 0
    finally:
        server.stop()
    out = json.loads(dut.run(["nft", "-j", "list", "table", "inet", table]).stdout)
    for item in out["nftables"]:
        for expr in item.get("rule", {}).get("expr", []):
            if "counter" in expr:
                return int(expr["counter"]["packets"]), int(expr["counter"]["bytes"])
    raise AssertionError(f"no counter in {out}")


@pytest.fixture(params=["off", "on"])
def bed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Testbed]:
    state = tmp_path_factory.mktemp("state")
    with Testbed.build(Topology.standard(offloads=request.param), state_dir=state) as tb:
        yield tb


def test_offloads_setting_is_applied_read_back_and_seen_by_the_dut(bed: Testbed) -> None:
    setting = bed.topology.offloads
    ends = [(bed.netns(r), bed.ifname(lk.name, r)) for lk in bed.topology.links for r in lk.ends()]
    assert len(ends) == 4
    for netns, dev in ends:
        state = offload_state(netns, dev)
        if setting == "off":
            assert all(state[f] == "off" for f in OFFLOAD_FEATURES.values()), (dev, state)
        else:  # the kernel's veth defaults: segmentation offloads on
            assert state["tcp-segmentation-offload"] == "on", (dev, state)
    info = hostinfo.testbed_info(bed)
    assert info["offloads"] == setting
    read = info["offloads_read"]
    if setting == "off":
        assert set(read.values()) == {"off"}, read
    else:
        assert read["tcp-segmentation-offload"] == "on", read
        assert read["generic-segmentation-offload"] == "on", read

    packets, nbytes = forwarded_client_to_server(bed, 1.0)
    assert packets > 1000, (packets, nbytes)
    per_packet = nbytes / packets
    if setting == "off":
        # every packet is one wire-size segment (MTU 1500 + nothing)
        assert per_packet <= 1600, per_packet
    else:
        # TSO/GSO: the DUT forwards (and nft counts) ~64 KB super-packets
        assert per_packet > 8000, per_packet
