"""Delay distributions in the HTML report (document 004's Fig. 4 and 8)."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secperf.report.distributions import Histogram, collect, display_edges, fractions, merge
from secperf.report.html import write_html
from secperf.results.rundir import RunDir


def part(first: float, bucket: float, counts: list[int], overflow: int = 0) -> dict[str, Any]:
    n = sum(counts) + overflow
    centers = [first + bucket * (i + 0.5) for i in range(len(counts))]
    mean = sum(c * x for c, x in zip(counts, centers, strict=True)) / max(sum(counts), 1)
    return {
        "sent": n,
        "received": n,
        "delay_us": {"count": n, "mean": mean, "stddev": 1.0},
        "histogram": {
            "unit": "us",
            "bucket_us": bucket,
            "first_us": first,
            "counts": counts,
            "overflow": overflow,
        },
    }


def latency_run(root: Path) -> RunDir:
    """Two variants, two repetitions each; the baseline's reps share one geometry."""
    run = RunDir.create(root, "delay")
    run.write_run_json({"scenario": {"name": "delay", "repeat": {"confidence": 0.95}}})
    reps = {
        "baseline": [
            part(20.0, 0.5, [1, 5, 10, 3], overflow=1),
            part(20.0, 0.5, [2, 6, 9, 4, 1]),
        ],
        "acl-1000": [
            part(150.0, 10.0, [3, 8, 4]),
            part(140.0, 20.0, [2, 7, 3]),
        ],
    }
    for variant, parts in reps.items():
        for rep, p in enumerate(parts):
            tags = {
                "variant": variant,
                "workload": "delay",
                "point_id": "delay#0",
                "label": "",
                "rep": rep,
            }
            record = {
                "type": "result",
                "kind": "latency",
                "latency_us": p["delay_us"],
                "c2s": p,
                "s2c": p,
                "combined": p,
            }
            run.append_record(tags, record)
    return run


def test_same_geometry_repetitions_sum_bucket_by_bucket() -> None:
    a = Histogram(0.5, 20.0, (1, 5, 10, 3), overflow=1)
    b = Histogram(0.5, 20.0, (2, 6, 9, 4, 1))
    m = merge([a, b])
    assert (m.bucket_us, m.first_us) == (0.5, 20.0)
    assert m.counts == (3, 11, 19, 7, 1)
    assert m.overflow == 1 and m.total == a.total + b.total


def test_different_geometries_rebin_onto_the_widest_bucket_keeping_every_probe() -> None:
    a = Histogram(10.0, 150.0, (3, 8, 4))  # 150..180
    b = Histogram(20.0, 140.0, (2, 7, 3))  # 140..200
    m = merge([a, b])
    assert m.bucket_us == 20.0 and m.first_us == 140.0
    assert m.total == 27
    # b's buckets as they were, plus a's: 150-160 into 140-160, 160-180 into 160-180
    assert list(m.counts) == [2 + 3, 7 + 8 + 4, 3]
    # a bucket split by the new grid splits its probes evenly
    split = merge([Histogram(10.0, 145.0, (4, 6)), Histogram(20.0, 140.0, (1,))])
    assert list(split.counts) == [1 + 4 + 3, 3]
    # quantiles come from the merged buckets: half the probes below ~170
    assert 160 < m.quantile(0.5) < 180


def test_collect_groups_by_point_and_variant_and_counts_a_rep_once(tmp_path: Path) -> None:
    run = latency_run(tmp_path)
    # the same repetition kept twice must not double its probes
    line = next(iter(run.iter_records()))
    run.append_record({k: line[k] for k in line if k not in ("record", "seq")}, line["record"])
    points = collect(run.iter_records())
    assert [(p.workload, p.point_id) for p in points] == [("delay", "delay#0")]
    c2s = points[0].directions["c2s"]
    assert list(c2s) == ["baseline", "acl-1000"]
    assert c2s["baseline"].hist.counts == (3, 11, 19, 7, 1)
    assert c2s["baseline"].reps == 2
    assert c2s["acl-1000"].hist.total == 27


def test_fractions_on_a_common_grid_sum_to_the_shown_share(tmp_path: Path) -> None:
    dists = list(collect(latency_run(tmp_path).iter_records())[0].directions["s2c"].values())
    edges = display_edges(dists)
    # 20 µs against 150 µs: wider than 8x, so log-spaced bins
    assert np.allclose(edges[1:] / edges[:-1], edges[1] / edges[0])
    base = fractions(dists[0], edges)
    # one overflow probe of 42 lies beyond the histogram: the bins hold the rest
    assert base.sum() == pytest.approx(41 / 42, abs=1e-9)
    assert fractions(dists[1], edges).sum() == pytest.approx(1.0, abs=0.02)


def test_html_report_has_a_distribution_chart_per_latency_point(tmp_path: Path) -> None:
    html = write_html(latency_run(tmp_path)).read_text()
    assert "<h2>Delay distributions</h2>" in html
    assert "delay: one-way delay distribution" in html
    # an inline SVG (or, where smaller, a PNG) figure with the chart's title
    svg = re.search(
        r'<figure class="chart" role="img" aria-label="delay: one-way delay distribution">'
        r"<svg[^>]*>(.*?)</svg>",
        html,
        re.S,
    )
    png = re.search(
        r'<img alt="delay: one-way delay distribution" src="data:image/png;base64,([^"]+)"', html
    )
    assert svg is not None or png is not None
    if png is not None:
        assert base64.b64decode(png.group(1))[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert svg is not None and "one-way delay" in svg.group(1)  # text stays text


def test_no_latency_records_no_distribution_section(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "rr")
    run.write_run_json({"scenario": {"name": "rr"}})
    tags = {"variant": "baseline", "workload": "rr", "point_id": "rr#0", "rep": 0}
    run.append_record(tags, {"type": "result", "kind": "rr", "transactions_per_second": 5.0})
    assert "Delay distributions" not in write_html(run).read_text()


def test_many_variants_split_into_charts_that_each_keep_the_baseline(tmp_path: Path) -> None:
    from secperf.report.distributions import PER_CHART, split

    point = collect(latency_run(tmp_path).iter_records())[0]
    dist = point.directions["c2s"]["acl-1000"]
    names = [f"v{i}" for i in range(PER_CHART + 2)]
    point.directions["c2s"].update({n: dist for n in names})
    parts = split(point)
    assert len(parts) == 2
    shown = [list(p.directions["c2s"]) for p in parts]
    assert all(s[0] == "baseline" for s in shown)
    assert [v for s in shown for v in s[1:]] == ["acl-1000", *names]
    assert parts[1].label == "delay (2 of 2)"


def test_the_summary_keeps_the_merged_histograms_and_a_kept_run_draws_them(
    tmp_path: Path,
) -> None:
    from secperf.report.distributions import delay_charts
    from secperf.results.delays import from_json, to_json
    from secperf.results.summary import build_summary

    run = latency_run(tmp_path)
    rows = build_summary(run)["distributions"]
    # a row per direction and variant, the repetitions merged
    assert {(r["direction"], r["variant"]) for r in rows} == {
        (d, v) for d in ("c2s", "s2c") for v in ("baseline", "acl-1000")
    }
    base = next(r for r in rows if (r["direction"], r["variant"]) == ("c2s", "baseline"))
    assert base["histogram"]["counts"] == [3, 11, 19, 7, 1] and base["reps"] == 2
    assert base["histogram"]["overflow"] == 1
    # back from the summary alone (no records): the same points and counts
    back = from_json(rows)
    assert to_json(back) == rows
    assert [c.title for c in delay_charts([], rows)] == [
        c.title for c in delay_charts(run.iter_records())
    ]
    # rows that do not parse are left out, not guessed
    assert from_json([{"direction": "c2s", "histogram": {"counts": "x"}}, 3]) == []
    assert delay_charts([], None) == []
