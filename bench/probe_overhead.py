#!/usr/bin/env python3
"""What do the probes cost? Throughput of a backend under the loader with each kind of
instrumentation attached, relative to none, interleaved, several rounds.

    sudo .venv/bin/python bench/probe_overhead.py [--backends selector,cpp_epoll] [-c 100] [-d 5]
        [--rounds 5] [--variants none,counting,evidence,perf,bpftrace] [--write]

Every measurement starts a fresh backend pinned to CPU 0 and runs the loader one-shot
(`netprof-loader --target ... -c N -d D --json`) on the other CPUs. In each round, every variant
runs once per backend, in a shuffled order. A variant's figure is the mean of its per-round ratios
to that round's `none` run, with a 95% t-interval. --write puts the table into bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from netprof.probes import CountingProbes, StackProbes
from netprof.profiler.procs import ProcessGroup

VENV_BIN = Path(sys.executable).parent
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SETTLE_S = 1.0  # after attaching, before the load starts (perf attaches asynchronously)
VARIANTS = {
    "none": "no instrumentation",
    "counting": "netprof counting set (CountingProbes, track_children)",
    "evidence": "netprof evidence set (StackProbes: user stacks of mmap/munmap/mremap/brk/futex/epoll_ctl)",
    "perf": "perf stat -e 'syscalls:sys_enter_*' -p PID",
    "bpftrace": "bpftrace -e 'tracepoint:raw_syscalls:sys_enter /pid == N/ { @[args->id] = count(); }'",
}


class Attached:
    """Context manager: one variant attached to `pid` for the duration of the block."""

    def __init__(self, variant: str, pid: int, group: ProcessGroup) -> None:
        self.variant, self.pid, self.group = variant, pid, group
        self.probes = self.proc = None

    def __enter__(self) -> "Attached":
        v, pid = self.variant, self.pid
        if v == "counting":
            self.probes = CountingProbes()
            self.probes.target(pid)
        elif v == "evidence":
            self.probes = StackProbes()
            self.probes.target(pid)
        elif v == "perf":
            self.proc = self.group.spawn("perf", ["perf", "stat", "-x", ",", "-e", "syscalls:sys_enter_*",
                                                  "-p", str(pid)], capture_stdout=False)
        elif v == "bpftrace":
            prog = f"tracepoint:raw_syscalls:sys_enter /pid == {pid}/ {{ @[args->id] = count(); }}"
            self.proc = self.group.spawn("bpftrace", ["bpftrace", "-e", prog])
            self.proc.wait_line("Attaching", 60)
        time.sleep(SETTLE_S)
        return self

    def __exit__(self, *exc) -> None:
        if self.probes is not None:
            self.probes.close()
        if self.proc is not None:
            self.proc.signal_group(signal.SIGINT)
            try:
                self.proc.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            self.proc.stop()


def one_run(backend: str, variant: str, args) -> float:
    loader = shutil.which("netprof-loader") or str(VENV_BIN / "netprof-loader")
    with ProcessGroup() as group:
        be = group.spawn(f"backend-{backend}", [sys.executable, "-m", "netprof.backends", backend,
                                                "--host", "127.0.0.1", "--port", "0"], cpus="0")
        _, pid, port = be.wait_line("ready", 30).split()[:3]
        with Attached(variant, int(pid), group):
            out = subprocess.run([loader, "--target", f"127.0.0.1:{port}", "-c", str(args.connections),
                                  "-d", str(args.duration), "--warmup", "1", "--cpus", args.loader_cpus,
                                  "--json"], capture_output=True, text=True, timeout=args.duration + 120)
        if out.returncode != 0:
            raise RuntimeError(f"loader failed ({out.returncode}): {out.stderr.strip()[-300:]}")
        stats = json.loads(out.stdout.strip().splitlines()[-1])
        return float(stats["msgs_per_sec"])


def interval(ratios: list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95% t-interval."""
    from scipy import stats

    m = statistics.fmean(ratios)
    if len(ratios) < 2:
        return m, float("nan")
    return m, stats.t.ppf(0.975, len(ratios) - 1) * statistics.stdev(ratios) / len(ratios) ** 0.5


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="selector,cpp_epoll")
    ap.add_argument("-c", "--connections", type=int, default=100)
    ap.add_argument("-d", "--duration", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--loader-cpus", default="1")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--write", action="store_true", help="write the table into bench/RESULTS.md")
    args = ap.parse_args()
    backends = args.backends.split(",")
    variants = args.variants.split(",")
    if "none" not in variants:
        variants.insert(0, "none")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    rng = random.Random(args.seed)
    raw: dict[tuple[str, str], list[float]] = {(b, v): [] for b in backends for v in variants}
    for r in range(args.rounds):
        for b in backends:
            order = variants[:]
            rng.shuffle(order)
            for v in order:
                rate = one_run(b, v, args)
                raw[(b, v)].append(rate)
                print(f"round {r + 1}/{args.rounds} {b:<10} {v:<9} {rate:10.0f} msg/s", file=sys.stderr, flush=True)
    lines = ["| backend | instrumentation | msgs/s (mean) | ratio vs none | 95% CI |", "|---|---|---|---|---|"]
    for b in backends:
        base = raw[(b, "none")]
        for v in variants:
            ratios = [x / n for x, n in zip(raw[(b, v)], base)]
            m, hw = interval(ratios)
            lines.append(f"| {b} | {v} | {statistics.fmean(raw[(b, v)]):.0f} | {m:.3f} | ±{hw:.3f} |")
    table = "\n".join(lines)
    cmd = "sudo .venv/bin/python bench/probe_overhead.py " + " ".join(sys.argv[1:])
    print(table)
    print("\nraw msgs/s:", json.dumps({f"{b}/{v}": [round(x) for x in xs] for (b, v), xs in raw.items()}))
    if args.write:
        write_section(table, cmd, args, raw)
    return 0


def write_section(table: str, cmd: str, args, raw) -> None:
    legend = "\n".join(f"- `{v}`: {d}" for v, d in VARIANTS.items())
    body = (f"## Probe overhead (bench/probe_overhead.py)\n\n`{cmd.strip()}` — {time.strftime('%Y-%m-%d')}, "
            f"{args.connections} connections, {args.duration:g} s per run (+1 s warm-up), {args.rounds} interleaved "
            f"rounds, backend pinned to CPU 0, loader on CPU {args.loader_cpus}. Ratio = mean of per-round "
            f"throughput ratios to the same round's uninstrumented run.\n\n{legend}\n\n{table}\n\n"
            f"<details><summary>raw msgs/s</summary>\n\n```\n"
            + "\n".join(f"{b}/{v}: {[round(x) for x in xs]}" for (b, v), xs in raw.items())
            + "\n```\n</details>\n")
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\nMeasured figures; each section names the script and command that produced it.\n"
    start = text.find("## Probe overhead")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + body + (text[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + body
    RESULTS.write_text(text)
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
