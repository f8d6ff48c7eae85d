"""The seed's whole matrix through `netprof run`: 12 backends × 10, 100, 1k, 10k connections × 3 rounds.

One `netprof run` invocation does the whole matrix (rounds outermost, so a noisy period of the machine
spreads over every backend alike; a backend that fails a cell is an FF row and the run goes on).
Recorded: the wall time of the whole matrix, and per backend the largest connection count it
sustained — every round ok, every connection connected and given at least one message in the window
(`per_conn.idle == 0`) — next to the largest count it merely survived (all rounds ok, some
connections idle). Also per cell: msgs/s (mean ± 95% CI over rounds), latency p50/p99, connection
setup time and backend RSS per connection.

Default is `--no-probes`: the matrix is about throughput and scale, and BPF costs 5–20% (docs/facts.md);
`--probes` runs it with the counting probes instead (slower, adds syscalls/msg). The full default
matrix takes ~25 minutes on the 2-core machine; run it when the machine is quiet:

    .venv/bin/python bench/full_matrix.py --write                       # the seed matrix, appends to RESULTS.md
    .venv/bin/python bench/full_matrix.py selector thread -c 10,100 -r 1   # a tiny one (~30 s)
    nohup .venv/bin/python bench/full_matrix.py --write > runs/full_matrix.log 2>&1 &

Timing figures belong here, not in tests; the machine is noisy (±10%).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fcntl
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

SEED_BACKENDS = ["asyncio", "asyncio_proto", "asyncio_sock", "uvloop", "uvloop_proto", "uvloop_sock", "gevent",
                 "selector", "thread", "cpp_epoll", "cpp_poll", "cpp_th"]
RESULTS_MD = Path(__file__).with_name("RESULTS.md")
CELL_OVERHEAD_S = 40.0  # per cell, on top of warm-up + duration: backend start, 10k setup, exit grace


def netprof_bin() -> str:
    here = Path(sys.executable).parent / "netprof"
    return str(here) if here.exists() else "netprof"


def ci95(values: list[float]) -> float:
    if len(values) < 2:
        return float("nan")
    from scipy import stats as sps

    return float(sps.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values)))


def summarize(rows: list[dict], backends: list[str], counts: list[int]) -> tuple[list[dict], dict]:
    """Per cell figures, and per backend {sustained, survived} connection counts."""
    cells, limits = [], {}
    for b in backends:
        sustained = survived = None
        for c in counts:
            rs = [r for r in rows if r["backend"] == b and r["connections"] == c]
            ok = [r for r in rs if r.get("status") == "ok"]
            idle = [int((r.get("per_conn") or {}).get("idle", 0) or 0) for r in ok]
            mps = [r["msgs_per_sec"] for r in ok if r.get("msgs_per_sec") is not None]

            def mean(key, sub=None, ok=ok):  # this iteration's rows
                vals = [(r.get(key) or {}).get(sub) if sub else r.get(key) for r in ok]
                vals = [v for v in vals if v is not None]
                return statistics.mean(vals) if vals else None

            all_ok = bool(rs) and len(ok) == len(rs)
            if all_ok:
                survived = c
                if not any(idle):
                    sustained = c
            cells.append({
                "backend": b, "connections": c, "rounds": len(rs), "ok": len(ok),
                "msgs_per_sec": statistics.mean(mps) if mps else None, "ci95": ci95(mps) if mps else None,
                "p50_us": mean("lat_us", "p50"), "p99_us": mean("lat_us", "p99"),
                "setup_s": mean("setup_s"), "rss_per_conn_kb": mean("rss_per_conn_kb"),
                "idle_max": max(idle) if idle else None,
                "errors": sorted({str(r.get("error")) for r in rs if r.get("status") != "ok"}),
            })
        limits[b] = {"sustained": sustained, "survived": survived}
    return cells, limits


def fmt(v, spec: str = ",.0f", none: str = "–") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    return format(v, spec)


def markdown(cmd: str, wall_s: float, rc: int, out: Path, cells: list[dict], limits: dict, load: tuple,
             probes: bool) -> str:
    day = _dt.date.today().isoformat()
    lines = [
        f"## Full seed matrix (bench/full_matrix.py{'' if probes else ', --no-probes'})", "",
        f"`{cmd}` — {day}; results in `{out}`. Wall time of the whole matrix: **{wall_s / 60:.1f} min** "
        f"({wall_s:.0f} s); `netprof run` exit code {rc}; load average before/after "
        f"{load[0]:.1f}/{load[1]:.1f} (other work on the machine makes the figures noisy).", "",
        "Largest connection count each backend sustained (every round ok and every connection served "
        "at least once in the window) and survived (every round ok, some connections idle):", "",
        "| backend | sustained | survived |", "|---|---|---|",
    ]
    for b, lim in limits.items():
        lines.append(f"| {b} | {fmt(lim['sustained'], ',')} | {fmt(lim['survived'], ',')} |")
    lines += ["", "| backend | conns | ok/rounds | msgs/s | ±95% CI | p50 µs | p99 µs | setup s | RSS KiB/conn "
              "| idle conns (max) | FF reason |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        reason = "; ".join(c["errors"])[:160].replace("|", "/")
        lines.append(
            f"| {c['backend']} | {c['connections']:,} | {c['ok']}/{c['rounds']} | {fmt(c['msgs_per_sec'])} "
            f"| {fmt(c['ci95'])} | {fmt(c['p50_us'], ',.0f')} | {fmt(c['p99_us'], ',.0f')} "
            f"| {fmt(c['setup_s'], '.3f')} | {fmt(c['rss_per_conn_kb'], '.1f')} | {fmt(c['idle_max'], ',')} "
            f"| {reason} |")
    return "\n".join(lines) + "\n"


def append_results(text: str) -> None:
    """Append under an exclusive lock: other benches write the same file."""
    with open(RESULTS_MD, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.write("\n" + text)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("backends", nargs="*", default=SEED_BACKENDS)
    ap.add_argument("-c", "--connections", default="10,100,1000,10000")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("-d", "--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--probes", action="store_true", help="attach the counting probes (default: --no-probes)")
    ap.add_argument("--out", default="", help="results directory (default runs/full-matrix-<time>)")
    ap.add_argument("--write", action="store_true", help=f"append the tables to {RESULTS_MD.name}")
    args, extra = ap.parse_known_args()  # anything else (e.g. --remote netns) goes to `netprof run`

    counts = [int(c) for c in args.connections.split(",") if c]
    out = Path(args.out or f"runs/full-matrix-{time.strftime('%Y%m%d-%H%M%S')}")
    argv = [netprof_bin(), "run", "--wait", *args.backends, "-c", ",".join(map(str, counts)), "-r", str(args.rounds),
            "-d", str(args.duration), "--warmup", str(args.warmup), "--json", "--out", str(out)]
    if not args.probes:
        argv.append("--no-probes")
    argv += [a for a in extra if a != "--"]
    n_cells = len(args.backends) * len(counts) * args.rounds
    timeout = n_cells * (args.duration + args.warmup + CELL_OVERHEAD_S) + 120
    print(f"{n_cells} cells → {out} (bounded at {timeout / 60:.0f} min): {shlex.join(argv)}", file=sys.stderr)

    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    res = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=timeout)  # stderr: progress, FF lines
    wall = time.monotonic() - t0
    load1 = os.getloadavg()[0]
    try:
        rows = json.loads(res.stdout)["runs"]
    except (ValueError, KeyError):
        print(f"netprof run gave no JSON summary (exit {res.returncode})", file=sys.stderr)
        return 1
    cells, limits = summarize(rows, args.backends, counts)
    cmd = shlex.join([".venv/bin/python", "bench/full_matrix.py", *sys.argv[1:]])
    text = markdown(cmd, wall, res.returncode, out, cells, limits, (load0, load1), args.probes)
    print(text)
    (out / "full_matrix.md").write_text(text)
    (out / "full_matrix.json").write_text(json.dumps(
        {"command": cmd, "netprof_argv": argv, "wall_s": wall, "exit_code": res.returncode,
         "limits": limits, "cells": cells}, indent=1, default=str))
    if args.write:
        append_results(text)
        print(f"appended to {RESULTS_MD}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
