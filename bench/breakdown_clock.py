"""The breakdown's `clock` skips: before and after two races of its programs across CPUs were narrowed (2026-12-05).

A request whose parts came out negative is skipped as `clock` (probes/breakdown/breakdown.bpf.h K_CLOCK). Traced
one by one, they were two races between programs on two CPUs, each opened when this VM held a program for ~15 µs at
a timer tick: the answer's program gave its socket up before reading the request's fields, so the client's next
request (sent on the other CPU as soon as it had the answer) reset them; and an arrival read the serving thread's
clocks while that thread's own program had taken the time of a state change and not yet written it (or had written
half of it). Two loads, each on every build in every round (the order rotated round by round, so a speed regime
of the host falls on each alike), `--breakdown --probe-share 1` at 100 connections:
- `thread`: a thread per connection (where the skips were traced);
- `asyncio_sock`: one event loop.

Per row: the requests skipped as `clock` per million the breakdown measured, and the parts' sum over the loader's
mean round trip (the fix must not move the parts).

--build NAME=COMMAND (repeatable): anything that runs as `netprof` (another clone's .venv/bin/netprof).

    .venv/bin/python bench/breakdown_clock.py --build before=/tmp/base/.venv/bin/netprof \
        --build after=.venv/bin/netprof -r 4
    .venv/bin/python bench/breakdown_clock.py --from bench/data/breakdown_clock/FILE.json [--write]
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

DATA = lib.ROOT / "bench" / "data" / "breakdown_clock"
HEADING = "The breakdown's clock skips (bench/breakdown_clock.py)"
LOADS = {"thread": ("thread", "-c", "100"), "asyncio_sock": ("asyncio_sock", "-c", "100")}


def measure(command: str, load: str, duration: float) -> dict:
    """One cell of `load` by the build `command`: the figures of its row."""
    with tempfile.TemporaryDirectory(prefix="breakdown-clock-") as scratch:
        argv = [command, "run", *LOADS[load], "-d", str(duration), "-r", "1", "--breakdown", "--probe-share", "1",
                "--no-report", "--json", "-o", str(Path(scratch) / "out")]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if res.returncode != 0 or '"runs"' not in res.stdout:
        raise SystemExit(f"{command} run failed: {res.stderr.strip().splitlines()[-1:]}")
    (row,) = json.loads(res.stdout)["runs"]
    b = row["breakdown"]
    return {"requests": b["requests"], "skipped": b["skipped"], "parts_mean_us": b["parts_mean_us"],
            "rtt_mean_us": b["rtt_mean_us"]}


def spread(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}–{max(xs):{fmt}})"


def table(doc: dict) -> str:
    lines = ["| load | build | `clock` per million measured | all rounds: skipped / measured | "
             "parts / round trip |", "|---|---|---|---|---|"]
    for load in LOADS:
        for build in doc["builds"]:
            rs = [r for r in doc["records"] if r["load"] == load and r["build"] == build]
            per_m = [r["skipped"]["clock"] / r["requests"] * 1e6 for r in rs]
            skipped, measured = sum(r["skipped"]["clock"] for r in rs), sum(r["requests"] for r in rs)
            parts = [r["parts_mean_us"] / r["rtt_mean_us"] for r in rs]
            lines.append(f"| {load} | {build} | {spread(per_m, '.1f')} | {skipped:,} / {measured:,} | "
                         f"{spread(parts, '.3f')} |")
    lines += ["", f"Medians (min–max) over {doc['rounds']} rounds, a row each."]
    return "\n".join(lines)


def main() -> int:
    ap = lib.cli(__doc__, rounds=4)
    lib.add_build_arguments(ap, duration=8.0)
    args = ap.parse_args()
    doc = lib.earlier(args) or lib.measure_builds("breakdown_clock", DATA, args, LOADS, measure)
    intro = (f"Measured by {lib.builds_command('breakdown_clock.py', doc)}; "
             f"table by {results_md.command()}; commit {doc['commit']}, {doc['date']}: {doc['duration']:g}-s "
             "windows, `--breakdown --probe-share 1` (the breakdown over the whole window), one round a cell, the "
             "builds and loads in an order rotated round by round. `clock`: `breakdown.skipped.clock` over "
             "`breakdown.requests`; parts: `breakdown.parts_mean_us` over `breakdown.rtt_mean_us`.")
    results_md.publish(HEADING, intro, table(doc), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
