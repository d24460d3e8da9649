"""Compare two runs: did a metric change between run A and run B?

Rows match on (workload, point_id, variant, metric). The difference is
(mean B − mean A) as % of mean A with a Welch interval, recomputed from the
per-repetition values in each run's records (the runs are not paired).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from secperf import stats
from secperf.results.metrics import METRICS
from secperf.results.rundir import RunDir
from secperf.results.summary import collect, scenario_settings
from secperf.tables import fmt_pct, fmt_value

Key = tuple[str, str, str, str]  # (workload, point_id, variant, metric)


def _values(run: RunDir) -> dict[Key, tuple[str, list[float]]]:
    out: dict[Key, tuple[str, list[float]]] = {}
    for (workload, point_id, variant), group in collect(run).items():
        for metric, series in group.values.items():
            out[(workload, point_id, variant, metric)] = (
                group.label,
                [series[r] for r in sorted(series)],
            )
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def compare_runs(a: RunDir, b: RunDir, confidence: float | None = None) -> list[dict[str, Any]]:
    """One row per metric measured in both runs, in run A's order.

    `confidence` defaults to run A's scenario setting.
    """
    conf = scenario_settings(a.read_run_json())[0] if confidence is None else confidence
    va, vb = _values(a), _values(b)
    rows: list[dict[str, Any]] = []
    for key, (label, xs) in va.items():
        if key not in vb:
            continue
        ys = vb[key][1]
        workload, point_id, variant, metric = key
        m = METRICS.get(metric)
        row: dict[str, Any] = {
            "workload": workload,
            "point_id": point_id,
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


def comparison_table(
    rows: Sequence[Mapping[str, Any]], *, title: str = "", label_a: str = "", label_b: str = ""
) -> Table:
    named = "".join(f"\n{x} = {lbl}" for x, lbl in (("A", label_a), ("B", label_b)) if lbl)
    table = Table(
        title=title or "run B against run A" + named,
        caption="Δ% = (B − A) / A; [CI] Welch; † significant (CI excludes 0)",
        caption_justify="left",
    )
    for column in ("workload", "point", "variant", "metric", "A", "B", "Δ% [CI]", "n A/B"):
        table.add_column(column, justify="left" if column in ("workload", "point") else "right")
    for r in rows:
        diff = fmt_pct(r.get("difference_pct"))
        if r.get("ci_low") is not None and r.get("ci_high") is not None:
            diff += f" [{fmt_pct(r['ci_low'])}, {fmt_pct(r['ci_high'])}]"
        style = ""
        if r.get("significant"):
            diff += "†"
            style = "bold red" if r.get("worse") else "bold green"
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
