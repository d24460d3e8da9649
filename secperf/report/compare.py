"""Compare two runs: did a metric change between run A and run B?

Rows match on their identity: (workload, point, variant, metric), the point by its
label ("message=16KiB", the workload's name when nothing is swept), so that a sweep
that grew a value between the runs still matches the points both have. The difference
is (mean B − mean A) as % of mean A with a Welch interval, recomputed from the
per-repetition values in each run's records (the runs are not paired).

Two runs on different days compare only on a like testbed: a row whose machine
(kernel, CPUs), testbed (offloads, pinning, link rates), mechanism placement or point
parameters differ between the runs is marked `incomparable` with the reason; the
table flags it and a gate refuses it (docs/methodology.md, "The gate").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from secperf import stats
from secperf.results.metrics import METRICS
from secperf.results.rundir import RunDir
from secperf.results.summary import collect, scenario_settings
from secperf.tables import fmt_bound, fmt_pct, fmt_value

Key = tuple[str, str, str, str]  # (workload, point label, variant, metric)


@dataclass(frozen=True)
class Measured:
    point_id: str
    label: str
    point: Mapping[str, Any]
    values: list[float]


def _values(run: RunDir) -> dict[Key, Measured]:
    out: dict[Key, Measured] = {}
    for (workload, point_id, variant), group in collect(run).items():
        for metric, series in group.values.items():
            out[(workload, group.label, variant, metric)] = Measured(
                point_id, group.label, group.point, [series[r] for r in sorted(series)]
            )
    return out


# What must be alike for two runs' figures to compare: (path in run.json, words)
_MACHINE = (
    (("host", "kernel"), "kernel"),
    (("host", "cpus"), "CPUs"),
    (("host", "cpu_model"), "CPU model"),
    (("testbed", "offloads"), "offloads asked"),
    (("testbed", "offloads_read"), "offloads read back"),
    (("testbed", "cgroups", "pin"), "CPU pinning"),
)


def _at(meta: Mapping[str, Any], path: Sequence[str]) -> Any:
    node: Any = meta
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _links(meta: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    links = _at(meta, ("topology", "links")) or []
    return {
        str(link.get("name")): (link.get("rate_bps"), link.get("queue_s"))
        for link in links
        if isinstance(link, Mapping)
    }


def testbed_differences(meta_a: Mapping[str, Any], meta_b: Mapping[str, Any]) -> list[str]:
    """What differs between the machines and testbeds of two runs, in words; facts a
    run.json lacks (an older run) are not counted as differences."""
    out = []
    for path, words in _MACHINE:
        a, b = _at(meta_a, path), _at(meta_b, path)
        if a is not None and b is not None and a != b:
            out.append(f"{words}: A {_short(a)}, B {_short(b)}")
    la, lb = _links(meta_a), _links(meta_b)
    if la and lb and la != lb:
        changed = sorted(k for k in set(la) | set(lb) if la.get(k) != lb.get(k))
        out.append(f"links (rate, queue): {', '.join(changed)}")
    return out


def _short(x: Any) -> str:
    text = str(x)
    return text if len(text) <= 60 else text[:57] + "..."


def placement_differences(meta_a: Mapping[str, Any], meta_b: Mapping[str, Any]) -> dict[str, str]:
    """Variant -> how the hosts its mechanisms ran on differ between the runs."""
    pa: Mapping[str, Any] = meta_a.get("placements") or {}
    pb: Mapping[str, Any] = meta_b.get("placements") or {}
    return {
        str(v): f"{v}'s mechanisms ran on {_where(pa[v])} in A, {_where(pb[v])} in B"
        for v in pa
        if v in pb and pa[v] != pb[v]
    }


def _where(entries: Any) -> str:
    if not entries:
        return "no host (plain forwarding)"
    return "; ".join(
        f"{e.get('kind')} on {', '.join(e.get('hosts') or [])}"
        for e in entries
        if isinstance(e, Mapping)
    )


def _point_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Parameters both points set, with other values (a key only one run records, as
    a newer secperf's, does not count)."""
    return [f"{k} {a[k]} vs {b[k]}" for k in sorted(set(a) & set(b), key=str) if a[k] != b[k]]


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def compare_runs(a: RunDir, b: RunDir, confidence: float | None = None) -> list[dict[str, Any]]:
    """One row per metric measured in both runs, in run A's order; `incomparable` says
    why a row's runs differ in more than time (None when they do not).

    `confidence` defaults to run A's scenario setting.
    """
    meta_a, meta_b = a.read_run_json(), b.read_run_json()
    conf = scenario_settings(meta_a)[0] if confidence is None else confidence
    machine = testbed_differences(meta_a, meta_b)
    placed = placement_differences(meta_a, meta_b)
    va, vb = _values(a), _values(b)
    rows: list[dict[str, Any]] = []
    for key, measured in va.items():
        if key not in vb:
            continue
        xs, ys = measured.values, vb[key].values
        workload, label, variant, metric = key
        m = METRICS.get(metric)
        reasons = [*machine]
        if variant in placed:
            reasons.append(placed[variant])
        point = _point_differences(measured.point, vb[key].point)
        if point:
            reasons.append("the point differs: " + ", ".join(point))
        row: dict[str, Any] = {
            "workload": workload,
            "point_id": measured.point_id,
            "point_id_b": vb[key].point_id,
            "label": label,
            "variant": variant,
            "metric": metric,
            "unit": m.unit if m else "",
            "higher_is_better": m.higher_is_better if m else None,
            "n_a": len(xs),
            "n_b": len(ys),
            "mean_a": sum(xs) / len(xs),
            "mean_b": sum(ys) / len(ys),
            "difference_pct": None,
            "ci_low": None,
            "ci_high": None,
            "significant": False,
            "worse": None,
            "primary": m.primary if m else False,
            "metric_label": m.label if m else metric,
            "incomparable": "; ".join(reasons) or None,
        }
        if len(xs) >= 2 and len(ys) >= 2 and row["mean_a"] != 0:
            d = stats.difference(xs, ys, conf)
            row["difference_pct"] = _finite(d.mean)
            row["ci_low"] = _finite(d.ci_low)
            row["ci_high"] = _finite(d.ci_high)
            row["significant"] = bool(stats.significant(d))
        elif row["mean_a"]:
            row["difference_pct"] = (row["mean_b"] - row["mean_a"]) / row["mean_a"] * 100.0
        diff = row["difference_pct"]
        if m is not None and diff is not None and diff != 0:
            row["worse"] = (diff < 0) if m.higher_is_better else (diff > 0)
        rows.append(row)
    return rows


def differences(meta_a: Mapping[str, Any], meta_b: Mapping[str, Any]) -> list[str]:
    """What differs between the two runs' scenarios (name, then every setting), in words.

    Runs of different scenarios, or of one scenario with other settings, may still be
    compared on purpose; but never without a word."""
    sa: Mapping[str, Any] = meta_a.get("scenario") or {}
    sb: Mapping[str, Any] = meta_b.get("scenario") or {}
    out: list[str] = []
    if sa.get("name") != sb.get("name"):
        out.append(
            f"the runs are of different scenarios: A {sa.get('name')!r}, B {sb.get('name')!r}"
        )
    changed = sorted(_diff_keys(_without(sa), _without(sb)))
    if changed:
        shown = ", ".join(changed[:8]) + (
            f" and {len(changed) - 8} more" if len(changed) > 8 else ""
        )
        out.append(f"the scenarios' settings differ: {shown}")
    return out


def _without(sc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sc.items() if k not in ("name", "description")}


def _diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out: list[str] = []
        for key in sorted(set(a) | set(b), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in a or key not in b:
                out.append(path)
            else:
                out += _diff_keys(a[key], b[key], path)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            x
            for i, (p, q) in enumerate(zip(a, b, strict=True))
            for x in _diff_keys(p, q, f"{prefix}[{i}]")
        ]
    return [] if a == b else [prefix or "(scenario)"]


INCOMPARABLE = "⚠"


def comparison_table(
    rows: Sequence[Mapping[str, Any]], *, title: str = "", label_a: str = "", label_b: str = ""
) -> Table:
    named = "".join(f"\n{x} = {lbl}" for x, lbl in (("A", label_a), ("B", label_b)) if lbl)
    caption = "Δ% = (B − A) / A; [CI] Welch; † significant (CI excludes 0)"
    if any(r.get("incomparable") for r in rows):
        caption += f"; {INCOMPARABLE} not comparable: the runs' testbeds differ (see above)"
    table = Table(
        title=title or "run B against run A" + named,
        caption=caption,
        caption_justify="left",
    )
    for column in ("workload", "point", "variant", "metric", "A", "B", "Δ% [CI]", "n A/B"):
        table.add_column(column, justify="left" if column in ("workload", "point") else "right")
    for r in rows:
        diff = fmt_pct(r.get("difference_pct"))
        if r.get("ci_low") is not None and r.get("ci_high") is not None:
            diff += f" [{fmt_bound(r['ci_low'])}, {fmt_bound(r['ci_high'])}]"
        style = ""
        if r.get("significant"):
            diff += "†"
            style = "bold red" if r.get("worse") else "bold green"
        if r.get("incomparable"):
            diff += f" {INCOMPARABLE}"
            style = "yellow"
        # Text, not markup: names such as "acl[rules=10]" print as written.
        table.add_row(
            Text(str(r["workload"])),
            Text(str(r.get("label") or r["point_id"])),
            Text(str(r["variant"])),
            Text(f"{r['metric']} ({r.get('unit', '')})"),
            fmt_value(r.get("mean_a")),
            fmt_value(r.get("mean_b")),
            Text(diff, style=style),
            f"{r.get('n_a')}/{r.get('n_b')}",
        )
    return table


def print_comparison(
    console: Console, rows: Sequence[Mapping[str, Any]], *, label_a: str = "", label_b: str = ""
) -> None:
    if label_a or label_b:
        console.print(f"A = {label_a}\nB = {label_b}", markup=False, highlight=False)
    if not rows:
        console.print("the two runs share no (workload, point, variant, metric)", markup=False)
        return
    console.print(comparison_table(rows))
    changed = sum(1 for r in rows if r.get("significant"))
    console.print(f"{changed} of {len(rows)} figures changed significantly", markup=False)
