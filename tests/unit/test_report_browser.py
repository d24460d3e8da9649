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
  const verdicts = document.getElementById("verdicts");
  const box = verdicts ? verdicts.getBoundingClientRect() : null;
  const answer = verdicts ? {
    top: box.top, bottom: box.bottom, width: box.width,
    rows: [...verdicts.querySelectorAll("tr")].map(r => r.textContent.trim()),
  } : null;
  const forest = [...document.querySelectorAll("figure")].find(
    f => (f.querySelector("figcaption") || {}).textContent.startsWith("What each variant costs"));
  const fbox = forest ? forest.querySelector("svg, img").getBoundingClientRect() : null;
  document.getElementById("probe-result").textContent = JSON.stringify(
    {figures, resources, violations, tables: document.querySelectorAll("table").length,
     answer, forest: fbox && {top: fbox.top, bottom: fbox.bottom, left: fbox.left,
                              right: fbox.right, width: fbox.width, height: fbox.height},
     viewport: {width: window.innerWidth, height: window.innerHeight}});
});
</script>
"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("no chromium: scripts/setup.sh installs it (apt-get install chromium)")


def render(html_path: Path, window: str = "1280,2000") -> dict[str, object]:
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
            f"--window-size={window}",
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


QUICK_SUMMARY = ROOT / "docs" / "runs" / "quick" / "summary.json"


def test_the_first_screen_of_quicks_report_holds_the_answer(tmp_path: Path) -> None:
    """In the first 1400 × 900 pixels: every verdict line and the whole forest plot."""
    from secperf.scenario.loader import load_scenario

    run = RunDir.create(tmp_path, "quick")
    scenario = load_scenario(ROOT / "scenarios" / "quick.toml")
    run.write_run_json(
        {
            "scenario": scenario.to_json_dict(),
            "scenario_text": (ROOT / "scenarios" / "quick.toml").read_text(),
            "status": "complete",
            "started": "2026-11-23T20:27:46+00:00",
            "finished": "2026-11-23T20:29:51+00:00",
            "host": {"kernel": "6.18.44", "cpus": 2, "cpu_model": "AMD EPYC"},
        }
    )
    run.write_summary(json.loads(QUICK_SUMMARY.read_text()))
    result = render(write_html(run), window="1400,900")
    answer, forest = result["answer"], result["forest"]
    assert isinstance(answer, dict) and isinstance(forest, dict), result
    rows = answer["rows"]
    # a row per variant, then one per workload and headline metric (3 workloads × 2)
    assert [r for r in rows if r.startswith("acl-")] == [
        r for r in rows if r.startswith(("acl-linear", "acl-set"))
    ]
    assert len(rows) == 2 + 2 * 6, rows
    assert any("costs +" in r for r in rows)
    viewport = result["viewport"]
    assert isinstance(viewport, dict)
    height = min(900, viewport["height"])  # the window, less what the browser keeps
    assert answer["top"] >= 0 and answer["bottom"] <= height, answer
    assert forest["top"] >= 0 and forest["bottom"] <= height, forest
    assert forest["right"] <= 1400 and forest["width"] > 300 and forest["height"] > 150, forest
