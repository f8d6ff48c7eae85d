"""How this host's throughput moves within one window, and whether the backend CPU's speed explains it.

One backend pinned to CPU 0, the loader on CPU 1, no probes; the loader's `progress` events give the
rate of each 0.1 s slice, and bench/speed_canary.py times a syscall-free loop on CPU 0 throughout.

    .venv/bin/python bench/host_regimes.py [backend] [-d 30] [--write]

Prints the spread of the rate over slices and over blocks of slices (beside what independent slices
would give: a spread that shrinks more slowly than that is drift, not noise that averages out), the
correlation between each slice's rate and the canary's median loop time in it, and the rate of each
slice relative to the mean. On this host (2 vCPUs under KVM) the rate at times sits at a few levels
for 0.3-3 s at a time, at others dips for a moment, and follows the canary: the reason
bench/probe_window_paired.py compares cells paired in time and takes the canary as a covariate.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from probe_window_paired import BACKEND_CPU, canary  # bench/ is sys.path[0]: these run as files
from results_md import command, publish

from netprof.profiler.core.procs import ProcessGroup
from netprof.profiler.run import interpreters
from netprof.profiler.run.cell import CellEnv, start_server
from netprof.profiler.run.loader_client import Loader, RunRequest
from netprof.profiler.run.plan import Cell, RunConfig, loader_cpus

SECTION = "This host's throughput regimes (bench/host_regimes.py)"
SLICE_S = 0.1


def slices(backend: str, duration: float, canary_out: Path) -> tuple[list[tuple[float, float, float]], np.ndarray]:
    """[(slice start, slice end, msgs/s)] over the window, and the canary's samples (t, ns)."""
    cfg = RunConfig(backends=[backend], connections=[100], duration=duration)
    events: list[dict] = []
    with canary(canary_out, duration + 30), ProcessGroup() as group:
        server = start_server(group, Cell(backend, 100, 1, 0), CellEnv(cfg, None, interpreters.prepare("")))
        loader = Loader.start(group, cpus=loader_cpus(cfg))
        loader.run(RunRequest(target=f"{server.host}:{server.port}", connections=100, duration=duration,
                              warmup=1.0, progress=SLICE_S, transport=cfg.loader_transport(backend)),
                   on_event=events.append)
        loader.stop()
    marks = [(float(e["t"]), float(e["msgs_per_sec"])) for e in events
             if e.get("event") == "progress" and e.get("phase") == "measure"]
    # Each event's rate covers the time since the one before it; the first measure slice straddles
    # the warm-up's end, so it is left out.
    return [(t0, t1, r) for (t0, _), (t1, r) in zip(marks, marks[1:])], np.loadtxt(canary_out, ndmin=2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("backend", nargs="?", default="selector")
    ap.add_argument("-d", "--duration", type=float, default=30.0)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="netprof-regimes-") as tmp:
        got, samples = slices(args.backend, args.duration, Path(tmp) / "canary.txt")
    rates = np.array([r for _, _, r in got])
    loops = np.array([np.median(samples[(samples[:, 0] >= t0) & (samples[:, 0] < t1), 1]) for t0, t1, _ in got])
    mean, sd = rates.mean(), rates.std(ddof=1)
    lines = ["| block | blocks | sd of the block's msgs/s (share of the mean) | if the slices were independent |",
             "|---|---|---|---|"]
    for k in (1, 5, 10, 20):
        blocks = [rates[i:i + k].mean() for i in range(0, len(rates) - k + 1, k)]
        lines.append(f"| {k * SLICE_S:.1f} s | {len(blocks)} | {statistics.stdev(blocks) / mean:.3f} "
                     f"| {sd / mean / k ** 0.5:.3f} |")
    r = float(np.corrcoef(rates, loops)[0, 1])
    fast = loops < np.median(loops)
    body = "\n".join(lines) + (
        f"\n\nCorrelation between a slice's msgs/s and the canary's median loop time in it (CPU {BACKEND_CPU}): "
        f"r = {r:+.2f}. Slices with the canary faster than its median ran at {rates[fast].mean() / mean:.3f} of the "
        f"mean, the others at {rates[~fast].mean() / mean:.3f}.\n\nEach 0.1 s slice's msgs/s ÷ the mean, in order:\n\n"
        "```\n" + "\n".join(" ".join(f"{x / mean:.2f}" for x in rates[i:i + 20]) for i in range(0, len(rates), 20))
        + "\n```")
    intro = (f"{command()} — {_dt.date.today()}, {args.backend}, 100 connections, {args.duration:g} s window, "
             f"no probes; {len(rates)} slices of {SLICE_S:g} s (the loader's progress events), mean "
             f"{mean:,.0f} msgs/s; bench/speed_canary.py on CPU {BACKEND_CPU} throughout.")
    publish(SECTION, intro, body, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
