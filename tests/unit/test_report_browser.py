"""report.html as a person sees it: rendered by a real headless browser (Debian's
chromium, installed by scripts/setup.sh). Every chart must be laid out and visible,
and the page must load nothing from anywhere (issue 15)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from secperf.report.html import write_html
from secperf.results.rundir import RunDir

ROOT = Path(__file__).resolve().parents[2]
DATA_RUN = ROOT / "tests" / "data" / "runs" / "20261122T010203Z-quick"

# Appended to a copy of the report only: the report itself has no script. A strict
# content security policy makes any request the page tries a reported violation.
CSP = (
    '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
    "img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
)
PROBE = """
<pre id="probe-result"></pre>
<script>
const violations = [];
document.addEventListener("securitypolicyviolation", e => violations.push(e.blockedURI));
window.addEventListener("load", () => {
  const figures = [...document.querySelectorAll("figure")].map(f => {
    const art = f.querySelector("svg, img");
    const box = art ? art.getBoundingClientRect() : {width: 0, height: 0};
    const style = art ? getComputedStyle(art) : {};
    return {
      caption: (f.querySelector("figcaption") || {}).textContent,
      kind: art ? art.tagName.toLowerCase() : null,
      width: box.width, height: box.height,
      visible: !!art && style.visibility !== "hidden" && style.display !== "none",
      decoded: !!art && (art.tagName === "IMG" ? art.naturalWidth > 0
                                               : art.childElementCount > 0),
      text: art && art.tagName.toLowerCase() === "svg" ? art.textContent.length : null,
    };
  });
  const resources = performance.getEntriesByType("resource").map(r => r.name);
  document.getElementById("probe-result").textContent = JSON.stringify(
    {figures, resources, violations, tables: document.querySelectorAll("table").length});
});
</script>
"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("no chromium: scripts/setup.sh installs it (apt-get install chromium)")


def render(html_path: Path) -> dict[str, object]:
    probe = html_path.with_name("probe.html")
    text = html_path.read_text(encoding="utf-8")
    assert '<meta charset="utf-8">' in text
    text = text.replace('<meta charset="utf-8">', '<meta charset="utf-8">' + CSP, 1)
    probe.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    proc = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--window-size=1280,2000",
            "--virtual-time-budget=5000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    match = re.search(r'<pre id="probe-result">(.*?)</pre>', proc.stdout, re.S)
    assert match is not None and match.group(1), "the page did not finish loading"
    from html import unescape

    result: dict[str, object] = json.loads(unescape(match.group(1)))
    return result


def test_report_renders_in_a_real_browser(tmp_path: Path) -> None:
    run = RunDir.open(shutil.copytree(DATA_RUN, tmp_path / DATA_RUN.name))
    result = render(write_html(run))
    figures = result["figures"]
    assert isinstance(figures, list) and len(figures) >= 2
    assert result["tables"]
    for fig in figures:
        assert fig["visible"] and fig["decoded"], fig
        assert fig["width"] > 200 and fig["height"] > 100, fig  # laid out, not collapsed
        if fig["kind"] == "svg":
            assert fig["text"] > 0  # labels are text, not paths
    # crisp, searchable charts: SVG unless a PNG is smaller
    assert any(fig["kind"] == "svg" for fig in figures)
    assert result["resources"] == [], "the report loaded something"
    assert result["violations"] == [], "the report tried to load something"
