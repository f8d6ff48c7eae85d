#!/usr/bin/env python3
"""What does `--sockwait` cost a run's headline figures? The same cell with and without the
socket-wait probes, through the CLI as a user runs it, interleaved rounds.

    sudo .venv/bin/python bench/sockwait_overhead.py [--backends selector,asyncio_sock] [-c 100] [-d 5]
        [--rounds 5] [--write]

Each round runs every backend once with and once without `--sockwait`, in a shuffled order
(`netprof run B -c C -d D -r 1 --json --wait`, default probe share: the counting set in the middle
30% of the window, the socket-wait set, when on, for the whole cell). The headline msgs/s comes from
the unprobed part of the window, so it carries the socket-wait set's cost and not the counting set's:
the per-round ratio with/without is the set's throughput cost. Mean ± half-width of the 95% t-interval
over rounds. Also reported: the per-message CPU cost each `--sockwait` run measured on this host
(meta.json `sockwait_cost_per_message`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_md import command, publish  # bench/ is sys.path[0]: these run as files
from rounds import add_arguments, interleaved, interval

VENV_BIN = Path(sys.executable).parent


def one_run(backend: str, sockwait: bool, args, tmp: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix="run-", dir=tmp))
    shutil.rmtree(out)  # netprof creates it (and refuses an existing one)
    argv = [
        str(VENV_BIN / "netprof"),
        "run",
        backend,
        "-c",
        str(args.connections),
        "-d",
        str(args.duration),
        "-r",
        "1",
        "--warmup",
        str(args.warmup),
        "--wait",
        "--json",
        "--out",
        str(out),
        *(["--sockwait"] if sockwait else []),
    ]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=args.duration * 4 + 120)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip()[-400:]}")
    summary = json.loads(res.stdout)
    (row,) = summary["runs"]
    cost = (summary.get("meta") or {}).get("sockwait_cost_per_message") or {}
    shutil.rmtree(out, ignore_errors=True)
    return {
        "rate": row["msgs_per_sec"],
        "p50": row["lat_us"]["p50"],
        "watched_ns": cost.get("added_watched_ns"),
        "bystander_ns": cost.get("added_bystander_ns"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap, rounds=5)
    ap.add_argument("--warmup", type=float, default=1)
    ap.add_argument("--write", action="store_true", help="write the table into bench/RESULTS.md")
    args = ap.parse_args()
    backends = args.backends.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="netprof-sockwait-bench-"))
    try:
        raw = interleaved(backends, (False, True), args.rounds, args.seed, lambda b, s: one_run(b, s, args, tmp),
                          lambda s, m: f"{'sockwait' if s else 'plain':<8} {m['rate']:9.0f} msgs/s "
                                       f"p50 {m['p50']:.0f} µs")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = [
        "| backend | msgs/s without | msgs/s with --sockwait | throughput ratio | latency p50 ratio "
        "| measured CPU ns/message (watched / bystander) |",
        "|---|---|---|---|---|---|",
    ]
    for b in backends:
        plain, sw = raw[(b, False)], raw[(b, True)]
        ratio, hw = interval([x["rate"] / p["rate"] for x, p in zip(sw, plain)])
        lat, lhw = interval([x["p50"] / p["p50"] for x, p in zip(sw, plain) if p["p50"]])
        watched = statistics.median(x["watched_ns"] for x in sw if x["watched_ns"] is not None)
        bystander = statistics.median(x["bystander_ns"] for x in sw if x["bystander_ns"] is not None)
        lines.append(
            f"| {b} | {statistics.fmean(x['rate'] for x in plain):.0f} | "
            f"{statistics.fmean(x['rate'] for x in sw):.0f} | {ratio:.3f} ± {hw:.3f} | "
            f"{lat:.3f} ± {lhw:.3f} | +{watched:.0f} / +{bystander:.0f} |"
        )
    intro = (
        f"{command()} — {time.strftime('%Y-%m-%d')}, {args.connections} connections, {args.duration:g} s "
        f"per cell (+{args.warmup:g} s warm-up), {args.rounds} interleaved rounds of `netprof run` with and "
        "without `--sockwait` (headline msgs/s: the unprobed part of the window, where only the socket-wait "
        "set runs). Ratio: mean of per-round ratios ± half-width of the 95% t-interval. Last column: the "
        "per-message cost each `--sockwait` run measured (median), one loopback echo with both ends watched "
        "/ with neither."
    )
    publish("Socket-wait probes: throughput cost (bench/sockwait_overhead.py)", intro, "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
