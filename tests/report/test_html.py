"""The HTML page: self-contained, and it renders in headless Chromium with its plots."""

from __future__ import annotations

import json
import re
import subprocess

from report.resultsets import demo_like, draws, ten_percent_slower
from support import need_binary, run_cli

from dlinfra.report.build import build_report
from dlinfra.report.html import render_html

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _campaign(store, campaign):
    ten_percent_slower(store)
    c = campaign("html")
    for workers, rate in ((1, 100.0), (2, 185.0), (4, 330.0)):
        c.add("bm", draws(rate, 2, 3, seed=workers), mode="ps-async", workers=workers, ps=1)
        c.add("ctr", draws(rate * 0.95, 2, 3, seed=workers + 10), mode="ps-async", workers=workers, ps=1)
    c.add("vm", draws(90, 2, 2, seed=7), mode="ps-async", workers=1, ps=1, emulated=True)


def test_html_renders_in_headless_chromium_with_plots(store, campaign, db_path, tmp_path):
    chromium = need_binary("chromium")
    _campaign(store, campaign)
    page = tmp_path / "report.html"
    result = run_cli("--db", str(db_path), "report", "--campaign", "html", "--format", "html", "--out", str(page))
    assert result.returncode == 0, result.stderr
    html = page.read_text()
    # Self-contained: nothing fetched at view time.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<script" not in html and "<link" not in html and "@import" not in html
    # One workload: its overhead plot, throughput with CI bars, scaling curves, step times.
    assert html.count("<svg") == 4
    assert "emulated-mismatch" in html and 'id="warnings"' in html
    profile = tmp_path / "chromium-profile"
    dom = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = dom.stdout
    assert rendered.count("<svg") == 4
    assert rendered.count('<figure class="plot">') == 4
    assert rendered.count("<table>") >= 5
    assert "Overhead against the baseline" in rendered
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            "--window-size=1280,2000",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists() and shot.stat().st_size > 10_000


#: Appended to a copy of the page (the page itself has no script): how wide it and its tables are, into the DOM.
MEASURE = """<script>(function () {
  const tables = [...document.querySelectorAll("table, figure, svg")].map((t) => t.getBoundingClientRect().right);
  const m = {scroll: document.documentElement.scrollWidth, inner: innerWidth, widest: Math.max(...tables)};
  const out = document.createElement("pre"); out.id = "measure"; out.textContent = JSON.stringify(m);
  document.body.appendChild(out);
})()</script>"""


def test_html_fits_a_1280_px_window(store, tmp_path):
    """The demo's shape of report in headless Chromium at 1280x2000: no horizontal scroll, no table or plot
    wider than the window."""
    chromium = need_binary("chromium")
    demo_like(store)
    html = render_html(build_report(store, "c-demo"))
    page, measured = tmp_path / "report.html", tmp_path / "measured.html"
    page.write_text(html)
    measured.write_text(html.replace("</body>", MEASURE + "</body>"))
    window = [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2000"]
    dom = subprocess.run(
        [chromium, *window, "--dump-dom", measured.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="measure">([^<]*)</pre>', dom.stdout)
    assert found, dom.stdout[-2000:]
    m = json.loads(found.group(1))
    assert m["inner"] == 1280
    assert m["scroll"] <= m["inner"], f"horizontal scroll: the page is {m['scroll']} px wide"
    assert m["widest"] <= m["inner"], f"a table or plot reaches {m['widest']} px"
    shot = tmp_path / "report.png"
    subprocess.run([chromium, *window, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000
