"""The machine and the testbed of a run as tables a person reads, not a JSON dump."""

from __future__ import annotations

import re
from typing import Any

from secperf.report.host_tables import host_tables
from secperf.report.html import render_html

# run.json as hostinfo.machine_info, hostinfo.testbed_info and Topology.describe write it
RUN_META: dict[str, Any] = {
    "scenario": {"name": "hosts"},
    "host": {
        "hostname": "bench1",
        "kernel": "6.1.0-28-amd64",
        "kernel_version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1",
        "machine": "x86_64",
        "cpu_model": "Intel(R) Xeon(R) E-2236 CPU @ 3.40GHz",
        "cpus": 12,
        "memory_mib": 31995,
        "python": "3.11.2",
        "secperf": "0.4.0",
        "engine": '{"engine": "secperf-engine", "version": "0.4.0", "format": 2}',
        "tools": {"nft": "nftables v1.0.6 (Lester Gooch #5)", "wg": None},
        "sysctls": {"net.core.rmem_max": "212992"},
        "irq_time_accounting": True,
    },
    "testbed": {
        "prefix": "sp1",
        "hosts": {
            "dut": {
                "netns": "sp1-dut",
                "qdiscs": [
                    "qdisc noqueue 0: dev lo root refcnt 2",
                    "qdisc tbf 8001: dev sp1-cd root refcnt 2 rate 100Mbit burst 12500b lat 20ms",
                ],
                "offloads": {
                    "sp1-cd": {"tcp-segmentation-offload": "off", "generic-receive-offload": "on"},
                    "sp1-ds": {"tcp-segmentation-offload": "off", "generic-receive-offload": "on"},
                },
                "ip_forward": "1",
            },
            "client": {"netns": "sp1-client", "qdiscs": [], "offloads": {}, "ip_forward": "0"},
        },
        "cgroups": {"pin": {"dut": [1], "client": [0]}},
    },
    "topology": {
        "hosts": [
            {"name": "client", "role": "client", "zone": "inside", "forwarding": False},
            {"name": "dut", "role": "dut", "zone": None, "forwarding": True},
        ],
        "links": [
            {
                "name": "cd",
                "ends": ["client", "dut"],
                "net4": "198.18.0.0/24",
                "net6": "2001:2::/64",
                "addresses": {"client": "198.18.0.1", "dut": "198.18.0.2"},
                "rate_bps": 100_000_000,
                "queue_s": 0.02,
                "offloads": "off",
            }
        ],
    },
    "placements": {"baseline": [], "acl": [{"kind": "acl", "hosts": ["dut"]}]},
}


def _rows(title: str) -> dict[str, list[str]]:
    (table,) = [t for t in host_tables(RUN_META) if t.title.startswith(title)]
    return {row[0].text: [c.text for c in row[1:]] for row in table.rows}


def test_the_machine_its_tools_and_sysctls_are_tables() -> None:
    machine = _rows("Machine")
    assert machine["kernel"] == ["6.1.0-28-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1"]
    assert machine["CPUs"] == ["12"] and machine["memory"] == ["31,995 MiB"]
    assert machine["engine"] == ["secperf-engine 0.4.0 (record format 2)"]
    assert machine["IRQ time accounting"][0].startswith("yes")
    tools = _rows("Tool versions")
    assert tools["nft"] == ["nftables v1.0.6 (Lester Gooch #5)"] and tools["wg"] == [
        "not installed"
    ]
    assert _rows("Sysctls")["net.core.rmem_max"] == ["212992"]


def test_the_testbed_hosts_links_and_placement_are_tables() -> None:
    hosts = _rows("Testbed hosts")
    role, forwards, addresses, where, cpus, qdiscs, offloads = hosts["dut"]
    assert (
        role == "dut"
        and forwards == "yes"
        and addresses == "198.18.0.2"
        and where == "namespace sp1-dut"
    )
    assert cpus == "1"
    # the shaped link's qdisc by the link's name, the loopback's left out
    assert qdiscs == "cd: tbf rate 100Mbit burst 12500b lat 20ms"
    # the same features on every veth are said once, by the names people use
    assert offloads == "TSO off, GRO on"
    assert hosts["client"][1] == "no" and hosts["client"][4] == "0"
    link = _rows("Links")["cd"]
    assert link[0] == "client – dut" and link[3:5] == ["100 Mbit/s", "20 ms"]
    (placement,) = [t for t in host_tables(RUN_META) if t.title.startswith("Where each")]
    assert [[c.text for c in r] for r in placement.rows] == [
        ["baseline", "none (plain forwarding)", "–"],
        ["acl", "acl", "dut"],
    ]


def test_the_report_shows_the_tables_and_keeps_the_json_folded() -> None:
    html = render_html({"rows": []}, RUN_META)
    section = html[html.index('<h2 id="testbed">') :]
    shown, _, folded = section.partition("<details>")
    for title in ("Machine", "Testbed hosts", "Links", "Where each variant", "Tool versions"):
        assert f"<h3>{title}" in shown
    assert "<td>6.1.0-28-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1</td>" in shown
    assert "<td>TSO off, GRO on</td>" in shown
    # the raw record is there for whoever needs it, but only folded away
    assert not re.search(r'"cpu_model"\s*:', shown)
    assert "run.json&#x27;s host, as recorded" in folded or "host, as recorded" in folded
