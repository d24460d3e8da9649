"""The DUT's counters over a test (custom kind, `counters = true`; RFC 3511 §5.9)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from secperf.mechanisms.custom import Custom, CustomSpec
from secperf.mechanisms.dut_counters import Observer, ip_counters, ip_delta, nft_counters
from secperf.results.metrics import extract
from secperf.scenario.loader import load_scenario

SNMP = (
    "Ip: Forwarding DefaultTTL InReceives ForwDatagrams ReasmReqds ReasmOKs ReasmFails"
    " FragOKs FragFails FragCreates InDiscards\n"
    "Ip: 1 64 {rx} {fwd} {reqds} {reasm} 0 {fragok} 0 {creates} 0\n"
    "Icmp: InMsgs\nIcmp: 3\n"
)

NFT = {
    "nftables": [
        {"metainfo": {"version": "1.0.6"}},
        {"counter": {"family": "inet", "name": "fragments_in", "table": "secperf_frag",
                     "handle": 1, "packets": 1800, "bytes": 2_500_000}},
        {"counter": {"family": "inet", "name": "dropped", "table": "secperf_frag",
                     "handle": 2, "packets": 0, "bytes": 0}},
    ]
}  # fmt: skip


class FakeHost:
    """A DUT whose /proc/net/snmp moves on between reads."""

    name = "dut"

    def __init__(self) -> None:
        self.reads = 0

    def run(self, argv: Sequence[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[0] == "cat":
            self.reads += 1
            k = 0 if self.reads == 1 else 1
            text = SNMP.format(
                rx=10 + 1800 * k, fwd=5 + 1800 * k, reqds=1800 * k, reasm=300 * k,
                fragok=300 * k, creates=1800 * k,
            )  # fmt: skip
            return subprocess.CompletedProcess(argv, 0, text, "")
        if list(argv[:3]) == ["nft", "-j", "list"]:
            return subprocess.CompletedProcess(argv, 0, json.dumps(NFT), "")
        raise AssertionError(argv)


def test_ip_counters_read_the_ip_lines_by_name() -> None:
    got = ip_counters(FakeHost())  # type: ignore[arg-type]
    assert got["ForwDatagrams"] == 5 and got["ReasmOKs"] == 0 and got["DefaultTTL"] == 64


def test_ip_delta_keeps_the_fields_both_reads_have() -> None:
    assert ip_delta({"ReasmOKs": 3, "FragCreates": 1}, {"ReasmOKs": 10}) == {"ReasmOKs": 7}


def test_nft_counters_by_table_and_name() -> None:
    got = nft_counters(FakeHost())  # type: ignore[arg-type]
    assert got == {
        "secperf_frag/fragments_in": {"packets": 1800, "bytes": 2_500_000},
        "secperf_frag/dropped": {"packets": 0, "bytes": 0},
    }


def test_observer_counts_from_apply_and_the_summary_reads_the_metrics() -> None:
    obs = Observer()
    assert obs.observe() is None  # never applied: nothing read, nothing claimed
    obs.start(FakeHost())  # type: ignore[arg-type]
    seen = obs.observe()
    assert seen is not None
    assert seen["ip"]["ReasmOKs"] == 300 and seen["ip"]["FragCreates"] == 1800
    assert seen["ip"]["ForwDatagrams"] == 1800
    values = extract({"type": "mechanism", "kind": "custom", **seen})
    assert values == {
        "dut_ip_forwarded": 1800.0,
        "dut_ip_reasm_ok": 300.0,
        "dut_ip_reasm_fails": 0.0,
        "dut_ip_frag_creates": 1800.0,
    }


def test_custom_reports_counters_only_when_asked(tmp_path: Path) -> None:
    rules = tmp_path / "r.nft"
    rules.write_text("table inet t { }\n")
    assert Custom(CustomSpec(file=rules, format="nft")).observe() is None
    spec = CustomSpec.model_validate({"file": str(rules), "format": "nft", "counters": True})
    assert spec.counters
    with pytest.raises(ValueError, match="counters"):
        CustomSpec.model_validate({"file": str(rules), "format": "nft", "counters": "sometimes"})


def test_rfc3511_fragment_variants_measure_only_the_fragment_workload() -> None:
    sc = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "rfc3511.toml")
    by_name = {w.name: w for w in sc.workloads}
    assert set(by_name["s5-9-fragments"].variants) == {"frag-stateful", "frag-stateless"}
    assert by_name["s5-1-ip-throughput"].variants == ["acl-linear"]
    for name, w in by_name.items():
        if name != "s5-9-fragments":
            assert not any(v.startswith("frag-") for v in w.variants), name
