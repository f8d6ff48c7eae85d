"""Connections as needed for a server whose answers spread wide (issue 51): before and after the loader judged
queueing against its least mean round trip over 64 answers instead of its fastest answer (commit ba5b4d8).

Two loads, each on every build in every round (the builds' order rotated round by round, so a speed regime of the
host falls on each alike):
- `spread`: `run thread --work poisson-sleep:1000 -c 2 --rate 2000`: a thread per connection whose answers take
  an exponential time of mean 1 ms, so nothing queues in it and more connections carry more; the fastest answer
  is tens of µs.
- `queue`: `run selector --work sleep:1000 -c 10 --rate 2000`: one loop with a blocking 1-ms handler, ~1,000/s at
  most: the requests queue in it, and the loader should keep them waiting in itself rather than open connections.

--build NAME=COMMAND (repeatable): anything that runs as `netprof` (another clone's .venv/bin/netprof).

    .venv/bin/python bench/spread_pool.py --build before=/tmp/base/.venv/bin/netprof --build after=.venv/bin/netprof
    .venv/bin/python bench/spread_pool.py --from bench/data/spread_pool/FILE.json [--write]
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

DATA = lib.ROOT / "bench" / "data" / "spread_pool"
HEADING = "Open loop: connections as needed for a server whose answers spread wide (bench/spread_pool.py, issue 51)"
LOADS = {"spread": ("thread", "--work", "poisson-sleep:1000", "-c", "2", "--rate", "2000"),
         "queue": ("selector", "--work", "sleep:1000", "-c", "10", "--rate", "2000")}
FIELDS = ("msgs_per_sec", "open_loop.achieved_share", "open_loop.conns_max", "open_loop.waited_share",
          "lat_us.p50", "lat_us.p99", "lat_sent_us.p99")


def measure(command: str, load: str, duration: float) -> dict:
    """One cell of `load` by the build `command`: the row's FIELDS."""
    with tempfile.TemporaryDirectory(prefix="spread-pool-") as scratch:
        argv = [command, "run", *LOADS[load], "-d", str(duration), "-r", "1", "--no-probes", "--no-report",
                "--json", "-o", str(Path(scratch) / "out")]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if res.returncode != 0 or '"runs"' not in res.stdout:
        raise SystemExit(f"{command} run failed: {res.stderr.strip().splitlines()[-1:]}")
    (row,) = json.loads(res.stdout)["runs"]
    out = {}
    for f in FIELDS:
        v = row
        for part in f.split(".", 1):  # "lat_us.p50": row["lat_us"]["p50"]
            v = (v or {}).get(part)
        out[f] = v
    return out


def med(xs: list, share: bool) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    fmt = (lambda x: f"{x:.2f}") if share else (lambda x: f"{x:,.0f}")
    return f"{fmt(statistics.median(xs))} ({fmt(min(xs))}–{fmt(max(xs))})"


def table(doc: dict) -> str:
    lines = ["| load | build | msgs/s | achieved share | most connections open | share of requests that waited for "
             "a connection | p50 µs | p99 µs | p99 µs from the send |", "|---|---|---|---|---|---|---|---|---|"]
    for load in LOADS:
        for build in doc["builds"]:
            rs = [r for r in doc["records"] if r["load"] == load and r["build"] == build]
            figures = (med([r[f] for r in rs], f.endswith("_share")) for f in FIELDS)
            lines.append(f"| {load} | {build} | " + " | ".join(figures) + " |")
    lines += ["", f"Medians (min–max) over {doc['rounds']} rounds."]
    return "\n".join(lines)


def main() -> int:
    ap = lib.cli(__doc__, rounds=5)
    lib.add_build_arguments(ap, duration=3.0)
    args = ap.parse_args()
    doc = lib.earlier(args) or lib.measure_builds("spread_pool", DATA, args, LOADS, measure)
    intro = (f"Measured by {lib.builds_command('spread_pool.py', doc)}; "
             f"table by {results_md.command()}; commit {doc['commit']}, {doc['date']}: {doc['duration']:g}-s "
             "windows, no probes, the builds and loads in an order rotated round by round. `spread`: "
             "`run thread --work poisson-sleep:1000 -c 2 --rate 2000` (a thread per connection, answers after an "
             "exponential 1 ms: nothing queues). `queue`: `run selector --work sleep:1000 -c 10 --rate 2000` (one "
             "loop, a blocking 1-ms handler: ~1,000/s at most, the rest queues).")
    results_md.publish(HEADING, intro, table(doc), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
