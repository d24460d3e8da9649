"""A VM variant's rows carry the accelerator the run recorded, in every table."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from secperf.report.tags import tag_name, variant_tags
from secperf.report.terminal import print_report, run_check_tables, run_tables

KEPT = Path(__file__).resolve().parents[2] / "docs/runs/seed000-virtual-appliance/summary.json"


def _meta(accel: str | None) -> dict[str, Any]:
    variants = {
        "appliance": {"mechanisms": [{"kind": "appliance"}]},
        "vm-forward": {"backend": "vm"},
        "vm-appliance": {"backend": "vm", "mechanisms": [{"kind": "appliance"}]},
    }
    meta: dict[str, Any] = {"scenario": {"variants": variants, "workloads": []}}
    if accel is not None:
        meta["vm"] = {"dut": {"backend": "vm", "accel": accel, "cpus": 1, "memory_mb": 256}}
    return meta


def test_tags_come_from_the_accel_the_run_recorded() -> None:
    assert variant_tags(_meta("tcg")) == {
        "vm-forward": "[TCG emulation]",
        "vm-appliance": "[TCG emulation]",
    }
    assert variant_tags(_meta("kvm"))["vm-forward"] == "[KVM]"
    assert variant_tags(_meta(None)) == {}  # no VM booted: nothing claimed
    tags = variant_tags(_meta("tcg"))
    assert tag_name("vm-forward Δ% [CI]", tags) == "vm-forward [TCG emulation] Δ% [CI]"
    assert tag_name("vm-forward-2", tags) == "vm-forward-2"  # another variant's name
    assert tag_name("appliance", tags) == "appliance"


def test_every_table_names_the_tcg_variants_as_emulation() -> None:
    summary = json.loads(KEPT.read_text())
    meta = _meta("tcg")
    tables = run_tables(summary, meta) + run_check_tables(summary, meta)
    assert tables
    for table in tables:
        text = " ".join([*table.columns, *(c.text for row in table.rows for c in row)])
        if "vm-" not in text:
            continue
        assert "vm-appliance" not in text.replace("vm-appliance [TCG emulation]", ""), table.title
        assert any("TCG" in n for n in table.footnotes), table.title
    out = io.StringIO()
    print_report(Console(file=out, width=400), summary, meta)
    assert "vm-appliance [TCG emulation]" in out.getvalue()


def test_no_vm_no_tag() -> None:
    summary = json.loads(KEPT.read_text())
    tables = run_tables(summary, _meta(None))
    assert not any("TCG" in c for t in tables for c in t.columns)
