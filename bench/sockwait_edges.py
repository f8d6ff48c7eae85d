"""The socket waits over the loader's window: before and after the socket-wait set was gated on it (commit 399fd25).

Before, the set's figures were the span between netprof's reads at the window's marks, a few ms after each, and a
server that starves connections answers its oldest requests in a burst after each mark (netprof's reads are ms of
CPU on a two-core host): a mean over the span took in or left out those answers. After, the programs count only
the reads and answers inside the loader's counted window, whenever the marks are read. Two loads, each on every
build in every round (the order rotated round by round, so a speed regime of the host falls on each alike):
- `gevent`: `run gunicorn_gevent -c 100 --sockwait` (HTTP; one worker whose greenlets starve connections);
- `asyncio8`: `run asyncio_sock -c 100 --pipeline 8 --sockwait` (a connection whose recv finds data keeps the loop).

Per row: the server's mean time per request (first byte's arrival → answer) over the loader's mean round trip of
its window (at most 1: the rest is transit), and the answers counted over the loader's count of its window.

--build NAME=COMMAND (repeatable): anything that runs as `netprof` (another clone's .venv/bin/netprof).

    .venv/bin/python bench/sockwait_edges.py --build before=/tmp/base/.venv/bin/netprof \
        --build after=.venv/bin/netprof -r 4
    .venv/bin/python bench/sockwait_edges.py --from bench/data/sockwait_edges/FILE.json [--write]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import lib
import results_md

DATA = lib.ROOT / "bench" / "data" / "sockwait_edges"
HEADING = "The socket waits over the loader's window (bench/sockwait_edges.py)"
LOADS = {"gevent": ("gunicorn_gevent", "-c", "100"),
         "asyncio8": ("asyncio_sock", "-c", "100", "--pipeline", "8")}


def measure(command: str, load: str, duration: float) -> dict:
    """One cell of `load` by the build `command`: the figures of its row."""
    with tempfile.TemporaryDirectory(prefix="sockwait-edges-") as scratch:
        argv = [command, "run", *LOADS[load], "-d", str(duration), "-r", "1", "--sockwait", "--no-report",
                "--json", "-o", str(Path(scratch) / "out")]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if res.returncode != 0 or '"runs"' not in res.stdout:
        raise SystemExit(f"{command} run failed: {res.stderr.strip().splitlines()[-1:]}")
    (row,) = json.loads(res.stdout)["runs"]
    s, counted = row["sockwait"], row.get("counted") or {}
    return {"edges": s.get("edges", "marks"), "server_mean_us": s["server_mean_us"], "rtt_mean_us": s["rtt_mean_us"],
            "answers": s["handler_count"], "loader_messages": counted.get("loader_messages"),
            "start_heard_ms": counted.get("start_heard_ms"), "stop_heard_ms": counted.get("stop_heard_ms"),
            "wait_max_us": s["wait_max_us"]}


def ratios(r: dict) -> tuple[float, float]:
    """(server time / round trip, answers / the loader's count)."""
    return r["server_mean_us"] / r["rtt_mean_us"], r["answers"] / r["loader_messages"]


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}–{max(xs):.3f})"


def table(doc: dict) -> str:
    lines = ["| load | build | edges | server time / round trip | answers / the loader's count | "
             "the marks heard, ms after (start, stop; medians) |", "|---|---|---|---|---|---|"]
    for load in LOADS:
        for build in doc["builds"]:
            rs = [r for r in doc["records"] if r["load"] == load and r["build"] == build]
            server, answers = zip(*(ratios(r) for r in rs))
            heard = (statistics.median(r[k] for r in rs if r[k] is not None)
                     for k in ("start_heard_ms", "stop_heard_ms"))
            edges = "/".join(sorted({r["edges"] for r in rs}))
            lines.append(f"| {load} | {build} | {edges} | {spread(list(server))} | {spread(list(answers))} | "
                         + ", ".join(f"{h:.1f}" for h in heard) + " |")
    lines += ["", f"Medians (min–max) over {doc['rounds']} rounds, a row each."]
    return "\n".join(lines)


def main() -> int:
    ap = lib.cli(__doc__, rounds=4)
    lib.add_build_arguments(ap, duration=1.0)
    args = ap.parse_args()
    doc = lib.earlier(args) or lib.measure_builds("sockwait_edges", DATA, args, LOADS, measure)
    intro = (f"Measured by {lib.builds_command('sockwait_edges.py', doc)}; "
             f"table by {results_md.command()}; commit {doc['commit']}, {doc['date']}: {doc['duration']:g}-s "
             "windows (the counting probes' default sub-window counted), one round a cell, the builds and loads in "
             "an order rotated round by round. `gevent`: `run gunicorn_gevent -c 100 --sockwait`; `asyncio8`: "
             "`run asyncio_sock -c 100 --pipeline 8 --sockwait`. Server time: `sockwait.server_mean_us` (a "
             "request's first byte's arrival → its answer) over the loader's mean round trip of the window; answers: "
             "`sockwait.handler_count` over `counted.loader_messages`.")
    results_md.publish(HEADING, intro, table(doc), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
