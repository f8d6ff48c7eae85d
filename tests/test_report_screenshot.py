"""The report as a person first sees it: headless Chromium renders the report.html of a short real run
in a 1400×900 window; the first screen must hold the headline table and a plot, drawn (not blank).

Where things are comes from the browser itself: a copy of the page gets a tiny script that writes the
getBoundingClientRect of the headline table and of the first plot into the DOM, which `--dump-dom`
prints; the screenshot of the unmodified page is then checked for ink inside those rectangles.

Also a script: `python tests/test_report_screenshot.py DIR` writes DIR/screenshot-first-screen.png
(1400×900) and DIR/screenshot-full-page.png for a committed reference report.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

WIDTH, HEIGHT = 1400, 900
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--hide-scrollbars",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--force-device-scale-factor=1",
)
PROBE = """<script>
window.addEventListener('load', () => {
  const rect = sel => { const el = document.querySelector(sel); if (!el) return null;
    const b = el.getBoundingClientRect(); return {top: b.top, left: b.left, width: b.width, height: b.height}; };
  const fig = document.querySelector('figure');
  const out = {viewport: [innerWidth, innerHeight], page_height: document.documentElement.scrollHeight,
               headline: rect('#headline table'), plot: rect('figure img'), plot_id: fig ? fig.id : null,
               plot_loaded: !!(fig && fig.querySelector('img').naturalWidth > 0)};
  const pre = document.createElement('pre'); pre.id = 'netprof-layout'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _chrome(args: list[str], profile: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    exe = chromium()
    assert exe is not None
    return subprocess.run(
        [exe, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def layout(html: Path, work: Path) -> dict:
    """Rectangles (CSS px, relative to the first screen) of the headline table and the first plot."""
    probe = work / "probe.html"
    probe.write_text(html.read_text().replace("</body>", PROBE + "</body>"))
    height = HEIGHT
    for _ in range(2):  # --dump-dom's window keeps some height for browser UI (143 px here): measure, resize
        res = _chrome(
            ["--dump-dom", "--virtual-time-budget=5000", f"--window-size={WIDTH},{height}", probe.resolve().as_uri()],
            work / "profile",
        )
        m = re.search(r'<pre id="netprof-layout">(.*?)</pre>', res.stdout, re.S)
        assert m, f"chromium dumped no layout: {res.stderr[-1000:]}"
        where = json.loads(m.group(1).replace("&quot;", '"'))
        if where["viewport"][1] == HEIGHT:
            break
        height += HEIGHT - where["viewport"][1]
    return where


def screenshot(html: Path, png: Path, work: Path, height: int = HEIGHT) -> Path:
    _chrome(
        [
            f"--screenshot={png}",
            f"--window-size={WIDTH},{height}",
            "--virtual-time-budget=5000",
            html.resolve().as_uri(),
        ],
        work / "profile",
    )
    assert png.exists() and png.stat().st_size > 10_000, "chromium wrote no screenshot"
    return png


def ink(png: Path, rect: dict) -> tuple[float, int]:
    """(share of non-white pixels, distinct colours) inside `rect`, clipped to the first screen."""
    import matplotlib.image as mpimg

    img = mpimg.imread(png)[..., :3]
    top, left = max(0, int(rect["top"])), max(0, int(rect["left"]))
    bottom = min(img.shape[0], int(rect["top"] + rect["height"]))
    right = min(img.shape[1], int(rect["left"] + rect["width"]))
    crop = img[top:bottom, left:right]
    if crop.size == 0:
        return 0.0, 0
    non_white = float((crop.mean(axis=2) < 0.92).mean())
    return non_white, len(np.unique((crop * 255).astype(np.uint8).reshape(-1, 3), axis=0))


# --- the test ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_report(request):
    """The report of conftest's shared run (selector and asyncio_sock, 10 and 100 connections, 2 rounds)."""
    from helpers import REQUIRE_TOOLS

    if chromium() is None:
        if REQUIRE_TOOLS:
            pytest.fail("CI=true but chromium is not installed (scripts/setup-system.sh installs it)")
        pytest.skip("chromium not installed")
    out, _, left = request.getfixturevalue("standard_run")  # only once chromium is there to look at it
    assert not left
    return out


def test_first_screen_holds_the_headline_table_and_a_plot(real_report, tmp_path):
    html = real_report / "report.html"
    where = layout(html, tmp_path)
    assert where["viewport"] == [WIDTH, HEIGHT], where
    table, plot = where["headline"], where["plot"]
    assert table is not None, "no headline table in the page"
    assert plot is not None and where["plot_loaded"], "no plot image, or it did not decode"
    assert where["plot_id"] == "plot-throughput"
    # the table starts on the first screen with its header and at least two rows visible
    assert 0 <= table["top"] and table["top"] + 70 <= HEIGHT, table
    # the plot is on the first screen, mostly visible, and large enough to read
    assert 0 <= plot["top"] and plot["top"] + 0.6 * plot["height"] <= HEIGHT, plot
    assert plot["width"] >= 500 and plot["height"] >= 200, plot
    png = screenshot(html, tmp_path / "first.png", tmp_path)
    share, colours = ink(png, {**table, "height": min(table["height"], HEIGHT - table["top"])})
    assert share > 0.03 and colours > 20, f"the headline table's area is blank ({share:.1%}, {colours} colours)"
    share, colours = ink(png, plot)
    assert share > 0.02 and colours > 20, f"the plot's area is blank ({share:.1%}, {colours} colours)"


def test_headline_table_has_every_cell(real_report):
    md = (real_report / "report.md").read_text()
    head = md.split("## What ran")[0]
    rows = [ln for ln in head.splitlines() if ln.startswith("| selector") or ln.startswith("| asyncio_sock")]
    assert len(rows) == 4, head  # 2 backends × 2 connection counts
    assert all("±" in r for r in rows)  # 2 rounds: each mean has its interval


# --- screenshots of a committed reference report -------------------------------------------------


def main(directory: str) -> int:
    import tempfile

    d = Path(directory)
    html = d / "report.html"
    if not html.exists():
        print(f"{html}: no report (run `netprof report {d}` first)", file=sys.stderr)
        return 2
    if chromium() is None:
        print("chromium is not installed (scripts/setup-system.sh installs it)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        where = layout(html, work)
        screenshot(html, d / "screenshot-first-screen.png", work)
        screenshot(html, d / "screenshot-full-page.png", work, height=int(where["page_height"]) + 16)
    print(
        f"{d}/screenshot-first-screen.png, {d}/screenshot-full-page.png; first screen: headline table at "
        f"{where['headline']}, plot at {where['plot']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
