"""How often this host stops a busy CPU, and for how long: a spinner pinned to each CPU reads the clock in a
tight loop, and every gap between two reads of 50 µs or more is a pause (the hypervisor running something
else, an interrupt, a kernel thread), as jHiccup or cyclictest's idea of it.

    .venv/bin/python bench/cpu_pauses.py [--seconds 10] [--rounds 3] [--cpus 0,1] [--one-at-a-time] [--write]

Why it matters to netprof's figures: a server that is paused for P ms at a utilisation u takes about P / (1 - u)
to drain what arrived meanwhile, and every request in that stretch carries part of the pause. At 90% of its
capacity one 3-ms pause delays ~30 ms of requests; a 1-s window with one or two of them has its p99 in the
milliseconds whatever the server does. The speed canary (core/canary.py) times a 60-µs loop every 10 ms: it sees
how fast a CPU runs, not a pause that falls between its loops. No netprof process runs here: the pauses are the
host's own.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import multiprocessing as mp
import os
import subprocess
import sys
import time

from results_md import command, publish  # bench/ is sys.path[0]: these run as files

MIN_GAP_NS = 50_000  # a gap this long is no loop iteration (~0.1 µs) and no timer tick's handler (a few µs)
BOUNDS_MS = (0.1, 0.5, 1.0, 2.0, 5.0)


def spin(cpu: int, seconds: float, out: mp.Queue) -> None:
    """Read the clock as fast as possible on `cpu` for `seconds`; put (cpu, [gap ns >= MIN_GAP_NS]) on `out`."""
    os.sched_setaffinity(0, {cpu})
    now = time.perf_counter_ns
    gaps = []
    last = now()
    end = last + int(seconds * 1e9)
    while last < end:
        t = now()
        if t - last >= MIN_GAP_NS:
            gaps.append(t - last)
        last = t
    out.put((cpu, gaps))


def steal_s() -> dict[int, float]:
    """Each CPU's steal time so far (/proc/stat, USER_HZ ticks), in seconds: what the hypervisor says it took."""
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        return {int(w[0][3:]): int(w[8]) / hz for w in (line.split() for line in f)
                if w[0].startswith("cpu") and w[0] != "cpu"}


def one_round(cpus: list[int], seconds: float) -> tuple[dict[int, list[int]], dict[int, float]]:
    """Spinners on `cpus` at once (a loaded run keeps both CPUs of this host busy): their gaps by CPU, and the
    steal time each CPU had meanwhile (s)."""
    ctx = mp.get_context("fork")
    before = steal_s()
    q: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=spin, args=(c, seconds, q)) for c in cpus]
    for p in procs:
        p.start()
    got = dict(q.get(timeout=seconds + 30) for _ in procs)
    for p in procs:
        p.join(timeout=10)
    after = steal_s()
    return got, {c: after[c] - before[c] for c in cpus}


def row(label: str, gaps: list[int], seconds: float, steal: float) -> str:
    """One table row: pauses per second at or above each bound, the longest, the share of the time lost, the
    share the CPU's steal time accounts for."""
    per_s = [sum(g >= b * 1e6 for g in gaps) / seconds for b in BOUNDS_MS]
    lost = sum(gaps) / (seconds * 1e9)
    longest = max(gaps, default=0) / 1e6
    return (f"| {label} | " + " | ".join(f"{x:.2f}" for x in per_s)
            + f" | {longest:.2f} | {100 * lost:.2f}% | {100 * steal / seconds:.2f}% |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="each spinner's length per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpus", default=",".join(str(c) for c in sorted(os.sched_getaffinity(0))))
    ap.add_argument("--one-at-a-time", action="store_true", help="one CPU spinning per round, the others idle")
    ap.add_argument("--write", action="store_true", help="put the section into bench/RESULTS.md")
    args = ap.parse_args()
    cpus = [int(c) for c in args.cpus.split(",")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"| round, CPU | ≥{' ms | ≥'.join(f'{b:g}' for b in BOUNDS_MS)} ms | longest (ms) | time lost | steal |",
             "|---|" + "---|" * (len(BOUNDS_MS) + 3)]
    for r in range(1, args.rounds + 1):
        groups = [[c] for c in cpus] if args.one_at_a_time else [cpus]
        for group in groups:
            gaps, steal = one_round(group, args.seconds)
            for cpu in sorted(gaps):
                label = f"{r}, CPU {cpu}" + (" (alone)" if args.one_at_a_time else "")
                lines.append(row(label, gaps[cpu], args.seconds, steal[cpu]))
    mode = "one CPU at a time, the other idle" if args.one_at_a_time else "every CPU at once"
    intro = (f"{command()}, commit {commit}, {_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC, nothing else "
             f"running: a spinner per CPU ({mode}), {args.seconds:g} s a round. Pauses per second of each length or "
             f"longer (gaps of {MIN_GAP_NS / 1000:g} µs or more between two clock reads), the longest, and the "
             "share of the spinner's time they took; beside it the share /proc/stat counts as the CPU's steal time.")
    publish(f"A busy CPU's pauses, {mode} (bench/cpu_pauses.py)", intro, "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
