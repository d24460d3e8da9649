"""Tags that a variant's every row carries in every table, from what the run recorded.

A variant whose DUT ran as a VM is labelled with the accelerator the run actually used
(run.json `vm`, written when the VM booted, after `accel = "auto"` chose): under TCG,
qemu's emulator, its rows measure emulation, not hardware virtualization, and the
label says so wherever the variant's name is printed, not only in the header.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from secperf.tables import ReportTable
from secperf.testbed.hosts.registry import BACKENDS

_ACCEL_TAGS = {"tcg": "[TCG emulation]", "kvm": "[KVM]"}
_ACCEL_NOTES = {
    "tcg": (
        "[TCG emulation] = the variant's DUT is a VM that ran under qemu's TCG, an "
        "emulator (run.json: vm accel tcg): its figures are instruction translation, "
        "not hardware virtualization; the same variant on a host with KVM measures "
        "virtualization"
    ),
    "kvm": (
        "[KVM] = the variant's DUT is a VM under hardware virtualization (run.json: vm accel kvm)"
    ),
}


def _backends(run_meta: Mapping[str, Any]) -> dict[str, str]:
    """Variant name -> its backend (the default unless the scenario names another); a
    swept variant takes its family's."""
    scenario: Mapping[str, Any] = run_meta.get("scenario") or {}
    out: dict[str, str] = {}
    for name, variant in (scenario.get("variants") or {}).items():
        if isinstance(variant, Mapping):
            out[str(name)] = str(variant.get("backend") or BACKENDS.default.name)
    for name, info in (run_meta.get("variant_sweeps") or {}).items():
        family = str((info or {}).get("family", ""))
        if family in out:
            out.setdefault(str(name), out[family])
    return out


def variant_accel(run_meta: Mapping[str, Any]) -> dict[str, str]:
    """Variant name -> the accelerator its VM ran under ("tcg", "kvm"), for the variants
    whose DUT was a VM and a VM booted in this run."""
    accels = {str(vm.get("accel")) for vm in (run_meta.get("vm") or {}).values() if vm}
    accels.discard("None")
    if not accels:
        return {}
    # one VM accelerator per run (chosen at the first boot); if ever several, the slowest
    accel = "tcg" if "tcg" in accels else sorted(accels)[0]
    return {
        name: accel
        for name, backend in _backends(run_meta).items()
        if backend in BACKENDS and BACKENDS.get(backend).virtual
    }


def variant_tags(run_meta: Mapping[str, Any]) -> dict[str, str]:
    """Variant name -> the tag printed after its name ("[TCG emulation]", "[KVM]")."""
    return {
        name: _ACCEL_TAGS.get(accel, f"[{accel}]")
        for name, accel in variant_accel(run_meta).items()
    }


def tag_notes(run_meta: Mapping[str, Any]) -> list[str]:
    """The footnote explaining each tag in use."""
    used = dict.fromkeys(variant_accel(run_meta).values())
    return [_ACCEL_NOTES[a] for a in used if a in _ACCEL_NOTES]


def tag_name(text: str, tags: Mapping[str, str]) -> str:
    """ "vm-forward" or "vm-forward Δ% [CI]" with its tag after the variant's name."""
    for name, tag in tags.items():
        if text == name:
            return f"{name} {tag}"
        if text.startswith(name + " ") and not text.startswith(f"{name} {tag}"):
            rest = text[len(name) + 1 :]
            if rest.startswith("Δ%") or rest.startswith("vs "):
                return f"{name} {tag} {rest}"
    return text


def tag_tables(
    tables: Sequence[ReportTable], tags: Mapping[str, str], notes: Sequence[str] = ()
) -> list[ReportTable]:
    """The tables with each tagged variant's name tagged wherever it is printed: as a
    column head, as a row's first cell (a paper layout, a flipped table), in a
    `variant` column; a table that names one gets the tags' footnote."""
    if not tags:
        return list(tables)
    out: list[ReportTable] = []
    for table in tables:
        columns = [tag_name(c, tags) for c in table.columns]
        named = [i for i, c in enumerate(table.columns) if c == "variant"]
        rows = []
        for row in table.rows:
            cells = list(row)
            for i in [0, *named]:
                if i < len(cells) and not cells[i].numeric:
                    cells[i] = replace(cells[i], text=tag_name(cells[i].text, tags))
            rows.append(cells)
        touched = columns != table.columns or rows != [list(r) for r in table.rows]
        footnotes = list(table.footnotes)
        if touched:
            footnotes += [n for n in notes if n not in footnotes]
        out.append(replace(table, columns=columns, rows=rows, footnotes=footnotes))
    return out


__all__ = ["tag_name", "tag_notes", "tag_tables", "variant_accel", "variant_tags"]
