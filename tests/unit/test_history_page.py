"""The history page as a person sees it (issue 45): in headless chromium, one visible
chart per row, its change point named in the caption, nothing loaded from anywhere."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest

from secperf.history.changes import Point, Series, change_points
from secperf.history.page import write_page

PROBE = """
<pre id="probe-result"></pre>
<script>
window.addEventListener("load", () => {
  const figures = [...document.querySelectorAll("figure.trend")].map(f => {
    const art = f.querySelector("svg, img");
    const box = art ? art.getBoundingClientRect() : {width: 0, height: 0};
    return {caption: f.querySelector("figcaption").textContent,
            width: box.width, height: box.height};
  });
  const resources = performance.getEntriesByType("resource").map(r => r.name);
  document.getElementById("probe-result").textContent = JSON.stringify({figures, resources});
});
</script>
"""


def _series(metric: str, step_at: int) -> Series:
    rng = random.Random(metric)
    s = Series("acl", "tcp-rr", "tcp-rr", metric, "trans/s")
    for i in range(12):
        m = (20.0 if i < step_at else 30.0) + rng.gauss(0, 0.3)
        labels = {"git": f"c{i}"}
        s.points.append(Point(i, f"2026-12-{i + 1:02d}T12:00:00", f"runs/r{i}", labels, "a",
                              m, m - 1, m + 1, 8, None))  # fmt: skip
    s.steps = change_points(s.points)
    return s


def test_the_page_shows_a_chart_per_row_with_its_change_point(tmp_path: Path) -> None:
    browser = next(
        (shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None
    )
    if browser is None:
        pytest.fail("no chromium: scripts/setup.sh installs it (apt-get install chromium)")
    series = [_series("tps", 6), _series("sd_cpu_us_per_tx", 8)]
    page = write_page(tmp_path / "trend.html", "syn", series)
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--window-size=1280,2000", "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    match = re.search(r'<pre id="probe-result">(.*?)</pre>', proc.stdout, re.S)
    assert match is not None and match.group(1)
    result = json.loads(unescape(match.group(1)))
    figures = result["figures"]
    assert len(figures) == 2
    for fig, at in zip(figures, (6, 8), strict=True):
        assert fig["width"] > 300 and fig["height"] > 100, fig
        assert (
            f"change point at 2026-12-{at + 1:02d}T12:00:00 runs/r{at} (git=c{at})"
            in fig["caption"]
        )
    assert result["resources"] == []
