"""Headline numbers no probe can touch (issue 23): a default run's headline msgs/s (the unprobed part
of each cell's window) against a --no-probes run's, interleaved, plus the probes' cost each cell
measured on itself (probed sub-window vs the rest).

Each round runs every backend twice, once per variant, in alternating order; a ratio is taken within
a round and the rounds' ratios are averaged (this machine varies ±10% between minutes).

    .venv/bin/python bench/probe_window.py                       # selector, cpp_epoll, asyncio_sock; 5 rounds
    .venv/bin/python bench/probe_window.py --write               # ... and replace its section in RESULTS.md
    .venv/bin/python bench/probe_window.py --noise 0.25 --write  # the same on a noisy host (own section)

--noise D runs bench/bystander.py for the whole benchmark: one neighbour per CPU, busy a share D of
the time with bursts of system calls (the kind of host where the counting set costs most, and where
throughput drifts between minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from results_md import command, publish  # bench/ is sys.path[0]: these run as files

from netprof.profiler.stats import summarize

SECTION = "Probe window: headline throughput with and without probes (bench/probe_window.py)"
NOISY = "Probe window on a noisy host (bench/probe_window.py --noise)"
VARIANTS = {"no-probes": ["--no-probes"], "default": []}


@contextlib.contextmanager
def neighbours(duty: float):
    """bench/bystander.py for the block's duration (nothing when duty is 0)."""
    if not duty:
        yield
        return
    p = subprocess.Popen([sys.executable, str(Path(__file__).with_name("bystander.py")), "--duty", str(duty),
                          "--seconds", "3600"])
    try:
        yield
    finally:
        p.terminate()
        p.wait(timeout=10)


def one(backend: str, args: argparse.Namespace, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="netprof-bench-") as tmp:
        argv = [str(Path(sys.executable).with_name("netprof")), "run", backend, "-c", str(args.connections),
                "-d", str(args.duration), "-r", "1", "--wait", "--json", "--out", f"{tmp}/run", *extra]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"{backend} {extra}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        (row,) = json.loads(p.stdout)["runs"]
        return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("backends", nargs="*", default=["selector", "cpp_epoll", "asyncio_sock"])
    ap.add_argument("-c", "--connections", type=int, default=100)
    ap.add_argument("-d", "--duration", type=float, default=4.0)
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("--noise", type=float, default=0.0, metavar="D",
                    help="run a noisy neighbour per CPU, busy a share D of the time (bench/bystander.py)")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    with neighbours(args.noise):
        return measure(args)


def measure(args: argparse.Namespace) -> int:
    ratios: dict[str, list[float]] = {b: [] for b in args.backends}
    costs: dict[str, list[float]] = {b: [] for b in args.backends}
    # When the probes really attached before / detached after the probed sub-window (ms), per round.
    leads: dict[str, list[float]] = {b: [] for b in args.backends}
    lags: dict[str, list[float]] = {b: [] for b in args.backends}
    rates: dict[str, dict[str, list[float]]] = {b: {v: [] for v in VARIANTS} for b in args.backends}
    for rnd in range(args.rounds):
        for b in args.backends:
            order = list(VARIANTS) if rnd % 2 == 0 else list(reversed(VARIANTS))
            got = {v: one(b, args, VARIANTS[v]) for v in order}
            for v, row in got.items():
                rates[b][v].append(row["msgs_per_sec"])
            ratios[b].append(got["default"]["msgs_per_sec"] / got["no-probes"]["msgs_per_sec"])
            if got["default"].get("probe_cost") is not None:
                costs[b].append(got["default"]["probe_cost"])
            timing = got["default"].get("probed") or {}
            if "attach_lead_ms" in timing:
                leads[b].append(timing["attach_lead_ms"])
                lags[b].append(timing["detach_lag_ms"])
            print(f"round {rnd + 1} {b}: ratio {ratios[b][-1]:.3f}, cell's probe cost "
                  f"{100 * costs[b][-1] if costs[b] else float('nan'):+.1f}%", file=sys.stderr)
    # The median beside the mean: one round that another process on the machine disturbed moves the
    # mean by several percent either way; the median says what a typical round shows.
    lines = ["| backend | no-probes msgs/s | default headline msgs/s | headline ratio (95% CI) | median ratio "
             "| probe cost measured in the cell (mean, range) | attached before / detached after the probed part "
             "(worst round) |", "|---|---|---|---|---|---|---|"]
    for b in args.backends:
        s = summarize(ratios[b])
        lines.append(f"| {b} | {statistics.mean(rates[b]['no-probes']):,.0f} "
                     f"| {statistics.mean(rates[b]['default']):,.0f} "
                     f"| {s['mean']:.3f} ±{s['ci']:.3f} | {statistics.median(ratios[b]):.3f} "
                     f"| {100 * statistics.mean(costs[b]):+.1f}% "
                     f"({100 * min(costs[b]):+.1f} … {100 * max(costs[b]):+.1f}%) "
                     + (f"| {min(leads[b]):.1f} ms / {max(lags[b]):.1f} ms |" if leads[b] else "| - |"))
    intro = (f"{command()} — {_dt.date.today()}, {args.connections} connections, {args.duration:g} s per run, "
             f"{args.rounds} interleaved rounds; default = `--probe-share 0.3` (probes attached in the middle 30% "
             "of each window, 0.1 s guards on either side of it that count in neither part; headline figures "
             "from the rest). Ratio = default headline msgs/s ÷ --no-probes "
             "msgs/s of the same round. Probe cost = 1 − probed/unprobed msgs/s inside the default run's own cell "
             "(what the report quotes).")
    if args.noise:
        intro += (f" Noisy host: bench/bystander.py --duty {args.noise:g} ran throughout (one neighbour per CPU "
                  "making bursts of system calls).")
    publish(NOISY if args.noise else SECTION, intro, "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
