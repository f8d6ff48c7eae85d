"""Make (or remake) a committed reference report: one `netprof run`, then its report.md, meta.json,
results.csv, raw parquet files, plots/ and stacks/ copied into bench/reports/NAME/ (`netprof report` re-makes it).

    .venv/bin/python bench/reference_report.py pipeline -- asyncio_sock uvloop_sock -c 100 \\
        --pipeline 1,4,8 -r 3 --framing message,stream

The HTTP servers (issue 18; the built-in HTTP backends, `netprof list` reads "http": the run speaks
HTTP, `GET /plaintext`, without --protocol):

    .venv/bin/python bench/reference_report.py http -- http_asyncio aiohttp uvicorn_h11 \\
        uvicorn_httptools granian_asgi granian_rsgi gunicorn_sync gunicorn_gevent tornado_http \\
        -c 10,100,1000 --pipeline 1,8 -r 3

Latency against load (issue 34: the curve and why it bends, open loop at rates below and past the knees):

    .venv/bin/python bench/reference_report.py knee -- uvicorn_httptools aiohttp granian_rsgi -c 10 \
        --rate 5k,10k,15k,20k,25k,30k,40k -r 1
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPORTS = Path(__file__).with_name("reports")
# The raw parquet files too, so that `netprof report` can re-make the report from what is committed (the
# reports committed before 2026-11-26 kept only results.csv: the per-connection evidence and plots, and
# the column types, cannot be re-made from them).
KEPT = ("report.md", "report.html", "meta.json", "results.csv", "results.parquet", "per_conn.parquet",
        "sockwait_conn.parquet", "timeline.parquet", "plots", "stacks")
SCREENSHOTS = Path(__file__).parents[1] / "tests" / "test_report_screenshot.py"  # also a script: DIR → PNGs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="bench/reports/NAME")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then the `netprof run` arguments")
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    out = Path("runs") / f"ref-{a.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    rc = subprocess.run([str(Path(sys.executable).with_name("netprof")), "run", *args, "--wait",
                         "--out", str(out)]).returncode
    if not (out / "report.md").exists():
        print(f"no report in {out} (netprof exit {rc})", file=sys.stderr)
        return rc or 1
    dest = REPORTS / a.name
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in KEPT:
        src = out / name
        if src.is_dir():
            shutil.copytree(src, dest / name)
        elif src.exists():
            shutil.copy2(src, dest / name)
    # The first screen (1400×900) and the full page, next to the report they show.
    subprocess.run([sys.executable, str(SCREENSHOTS), str(dest)], check=False)
    print(f"{dest}: from {out} (netprof exit {rc})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
