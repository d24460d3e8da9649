"""The lines above a run's tables: the scenario, the machine and its noise, the
placement, the run's status, variants that could not be measured, records lost."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secperf.report.limits import placement_lines

SHOWN_ERRORS = 5  # the header names this many errors; records.jsonl holds them all


def _host_facts(run_meta: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(kernel, cpus, cpu model) from run.json's host, flat or under `machine`."""
    host: Mapping[str, Any] = run_meta.get("host") or {}
    nested = host.get("machine")
    if isinstance(nested, Mapping):
        host = {**host, **nested}
    kernel = host.get("kernel") or host.get("kernel_release")
    cpus = host.get("cpus") or host.get("cpu_count")
    model = host.get("cpu_model")
    return _text(kernel), _text(cpus), _text(model)


def _text(x: Any) -> str | None:
    return str(x) if x else None


def header_lines(summary: Mapping[str, Any], run_meta: Mapping[str, Any]) -> list[str]:
    """What was run, where, and how to read the numbers."""
    scenario: Mapping[str, Any] = run_meta.get("scenario") or {}
    name = scenario.get("name") or summary.get("scenario") or "?"
    lines = [f"secperf report — scenario {name}"]
    if scenario.get("description"):
        lines.append(str(scenario["description"]))
    status = run_meta.get("status", "?")
    lines.append(
        f"run: started {run_meta.get('started', '?')}, finished "
        f"{run_meta.get('finished') or '–'}, status {status}"
    )
    baseline = summary.get("baseline", "forward")
    what = {
        "forward": "a plain forwarding DUT (mechanism off)",
        "direct": "the direct path, no DUT",
    }.get(str(baseline), str(baseline))
    conf = float(summary.get("confidence", 0.95))
    target = summary.get("halfwidth_target_pct")
    pp = summary.get("degradation_target_pp")
    tgt = f", CI target ±{target:g} %" if isinstance(target, int | float) else ""
    if isinstance(pp, int | float):
        tgt = f", CI targets Δ ±{pp:g} points" + (
            f", values ±{target:g} %" if isinstance(target, int | float) else ""
        )
    lines.append(f"baseline: {what}; confidence {conf * 100:g} %{tgt}")
    kernel, cpus, model = _host_facts(run_meta)
    cpu = f" ({model})" if model else ""
    lines.append(f"host: kernel {kernel or '?'}, {cpus or '?'} CPUs{cpu}")
    lines += placement_lines(summary, run_meta)
    remote = run_meta.get("remote_hosts") or {}
    if remote:
        lines.append(
            "hosts over SSH: "
            + ", ".join(f"{name} ({dest})" for name, dest in sorted(remote.items()))
            + "; each runs on its own CPUs and clock"
        )
    elif ((summary.get("placement") or run_meta.get("placement") or {}).get("mode")) != "one":
        lines.append(
            "note: the traffic generator and the DUT share this machine's CPUs; "
            "prefer degradation % and service demand to absolute rates"
        )
    for point_id, hosts in sorted((run_meta.get("generators") or {}).items()):
        lines.append(
            f"generators: {point_id} ran from {len(hosts)} client hosts at once "
            f"({', '.join(hosts)}); its rates are their sum"
        )
    testbed: Mapping[str, Any] = run_meta.get("testbed") or {}
    cgroups: Mapping[str, Any] = testbed.get("cgroups") or {}
    pin: Mapping[str, Any] = cgroups.get("pin") or {}
    placed = (summary.get("placement") or run_meta.get("placement") or {}).get("mode")
    if pin and placed in (None, "map"):  # "one" and "split" are said above
        where = ", ".join(
            f"{host} on CPU {','.join(str(c) for c in cpus)}" for host, cpus in pin.items()
        )
        steered = [
            f"{w.get('name')}: the DUT's receive processing on CPU {w['dut_cpus']} (RPS)"
            for w in scenario.get("workloads") or []
            if isinstance(w, Mapping) and w.get("dut_cpus")
        ]
        follows = "; ".join(steered) if steered else "the kernel's forwarding follows the sender"
        lines.append(f"pinned: {where} ({follows})")
    for role, vm in (run_meta.get("vm") or {}).items():
        lines.append(
            f'vm: host {role} is a VM in the variants with backend = "vm": accel '
            f"{vm.get('accel') or '?'} ({vm.get('accel_note') or ''}), {vm.get('cpus')} CPU(s), "
            f"{vm.get('memory_mb')} MB, image {(vm.get('image') or {}).get('digest', '?')}"
            + (
                "; TCG is qemu's emulator: the VM rows measure emulation, not hardware "
                "virtualization (docs/studies/000.md)"
                if vm.get("accel") == "tcg"
                else ""
            )
        )
    guest = summary.get("guest_cpu") or []
    if guest:
        cells = []
        for g in guest:
            busy = (g.get("busy_pct") or {}).get("mean")
            soft = (g.get("softirq_pct") or {}).get("mean")
            if busy is None:
                continue
            cells.append(
                f"{g.get('point_id')} {g.get('variant')} {busy:.0f}%"
                + (f" (softirq {soft:.0f}%)" if soft is not None else "")
            )
        lines.append(
            "guest CPU (the VM's own /proc/stat over each test, warm-up included, % of its "
            "CPUs busy): " + "; ".join(cells)
        )
    if status != "complete":
        lines.append(f"warning: the run is {status}; the figures cover what was measured")
    for f in summary.get("failed") or []:
        before = int(f.get("round") or 0)
        kept = f"; its {before} round(s) before are kept" if before else ""
        lines.append(
            f"FAILED: {f.get('variant')} at {f.get('point_id')} could not be measured "
            f"(round {before + 1}): {f.get('error')}{kept}"
        )
    for lost in summary.get("dropped_records") or []:
        lines.append(
            f"warning: records.jsonl line {lost.get('line')} was {lost.get('reason')} and is "
            "dropped: the round it held is missing from these figures, so the run is "
            "incomplete whatever its status says"
        )
    errors = summary.get("errors") or []
    if errors:
        # each one named: a test that measured nothing shows "–" in its table
        lines.append(f"errors: {len(errors)}, a test or part of one not measured:")
        for err in errors[:SHOWN_ERRORS]:
            record = err.get("error") or {}
            lines.append(
                f"  {err.get('workload')} {err.get('point_id')} {err.get('variant')} "
                f"rep {err.get('rep')}: {record.get('kind')}: {record.get('message')}"
            )
        if len(errors) > SHOWN_ERRORS:
            lines.append(f"  and {len(errors) - SHOWN_ERRORS} more (records.jsonl)")
    return lines


# -- rich rendering -------------------------------------------------------------
