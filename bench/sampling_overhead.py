#!/usr/bin/env python3
"""What does stack sampling cost the backend? Throughput under the loader with each flamegraph
sampler attached, relative to none, interleaved, several rounds.

    sudo .venv/bin/python bench/sampling_overhead.py [--backends selector] [-c 100] [-d 5] [--rounds 3]
        [--rate 499] [--variants none,oncpu,oncpu_bcc,python,python_blocking,offcpu,all] [--write]

Every measurement starts a fresh backend pinned to CPU 0 and runs the loader one-shot on CPU 1
(`netprof-loader --target ... -c N -d D --warmup 1 --json`); samplers (perf, py-spy) are pinned to
CPU 1 too, as `sample(..., cpus=...)` allows, so the backend's CPU only pays what the sampling does
to the backend itself. Samplers attach, settle 1 s, then the load runs; they cover the whole load.
Each round runs every (backend, variant) once, in a shuffled order (bench/rounds.py).
A variant's figure is the mean of its per-round ratios to that round's `none` run (95% t-interval).
Sample counts per variant are printed too. --write puts the table into bench/RESULTS.md.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import results_md  # bench/ is sys.path[0]: these run as files
from rounds import add_arguments, interleaved, interval

from netprof.flamegraphs import sample
from netprof.flamegraphs.offcpu import OffCpuProbe
from netprof.flamegraphs.oncpu import PerfRecorder
from netprof.flamegraphs.pyspy import PySpyRecorder
from netprof.profiler.core.procs import ProcessGroup

VENV_BIN = Path(sys.executable).parent
SETTLE_S = 1.0
WARMUP_S = 1.0
SAMPLER_CPUS = "1"
VARIANTS = {
    "none": "no sampling",
    "oncpu": "netprof on-CPU view: perf record -F RATE -e cpu-clock -g -p PID (frame pointers)",
    "oncpu_bcc": "alternative considered: bcc profile (BPF perf_event program, CPU_CLOCK), "
                 "profile-bpfcc -F RATE -p PID -f",
    "python": "netprof Python view: py-spy record --rate RATE --nonblocking",
    "python_blocking": "py-spy record --rate RATE (default: pauses the backend for every sample)",
    "offcpu": "netprof off-CPU view: BCC sched:sched_switch program, tgid filter in BPF",
    "all": "netprof.flamegraphs.sample(): oncpu + python + offcpu at once (what a sampling round costs)",
}


class Sampler:
    """One variant running against `pid` for `seconds`; .samples after stop()."""

    def __init__(self, variant: str, pid: int, seconds: float, rate: int, work: str, group: ProcessGroup) -> None:
        self.variant, self.pid, self.seconds, self.rate = variant, pid, seconds, rate
        self.work, self.group = work, group
        self.samples: int | str = "-"
        self._obj = self._thread = self._proc = None

    def start(self) -> None:
        v, pid, secs = self.variant, self.pid, self.seconds
        if v == "oncpu":
            self._obj = PerfRecorder([pid], secs, self.work, rate_hz=self.rate, cpus=SAMPLER_CPUS)
            self._obj.start()
        elif v in ("python", "python_blocking"):
            self._obj = PySpyRecorder(pid, secs, f"{self.work}/python.folded", rate_hz=self.rate,
                                      nonblocking=(v == "python"), cpus=SAMPLER_CPUS)
            self._obj.start()
        elif v == "offcpu":
            self._obj = OffCpuProbe()
            self._obj.start([pid])
        elif v == "oncpu_bcc":
            tool = shutil.which("profile-bpfcc") or "/usr/sbin/profile-bpfcc"
            self._proc = self.group.spawn("profile", [tool, "-F", str(self.rate), "-p", str(pid), "-f",
                                                      str(int(secs))], cpus=SAMPLER_CPUS)
        elif v == "all":
            def run() -> None:
                # +3 s: the window opens after the ~2 s compile below, and must still cover the whole load.
                art = sample(pid, secs + 3, self.work, title="bench", rate_hz=self.rate, cpus=SAMPLER_CPUS)
                self.samples = "/".join(str(art.samples.get(k, 0)) for k in ("oncpu", "python", "offcpu"))
                if art.notes:
                    print(f"  all: {art.notes}", file=sys.stderr)
            self._thread = threading.Thread(target=run)
            self._thread.start()
            time.sleep(2.0)  # sample() compiles the off-CPU program before its window opens
        time.sleep(SETTLE_S)

    def stop(self) -> None:
        v, notes = self.variant, []
        if v == "oncpu":
            self.samples = self._obj.finish(f"{self.work}/oncpu.folded", notes)
        elif v in ("python", "python_blocking"):
            self.samples = self._obj.finish(notes)
        elif v == "offcpu":
            _, self.samples = self._obj.collect()
            self._obj.close()
        elif v == "oncpu_bcc":
            out = self._proc.popen.communicate(timeout=self.seconds + 60)[0]
            self.samples = sum(int(ln.rsplit(" ", 1)[1]) for ln in out.decode().splitlines()
                               if ln.rsplit(" ", 1)[-1].isdigit())
        elif v == "all":
            self._thread.join(timeout=self.seconds + 120)
        if notes:
            print(f"  {v}: {notes}", file=sys.stderr)


def one_run(backend: str, variant: str, args) -> tuple[float, int | str]:
    loader = shutil.which("netprof-loader") or str(VENV_BIN / "netprof-loader")
    # Samplers must outlast the load: warm-up + measurement + slack for the loader's connection setup.
    seconds = int(WARMUP_S + args.duration + 2)
    with ProcessGroup() as group, tempfile.TemporaryDirectory(prefix="netprof-bench-") as work:
        be = group.spawn(f"backend-{backend}", [sys.executable, "-m", "netprof.backends", backend,
                                                "--host", "127.0.0.1", "--port", "0"], cpus="0")
        _, pid, port = be.wait_line("ready", 30).split()[:3]
        s = Sampler(variant, int(pid), seconds, args.rate, work, group)
        s.start()
        out = subprocess.run([loader, "--target", f"127.0.0.1:{port}", "-c", str(args.connections),
                              "-d", str(args.duration), "--warmup", str(WARMUP_S), "--cpus", "1", "--json"],
                             capture_output=True, text=True, timeout=args.duration + 120)
        s.stop()
        if out.returncode != 0:
            raise RuntimeError(f"loader failed ({out.returncode}): {out.stderr.strip()[-300:]}")
        stats = json.loads(out.stdout.strip().splitlines()[-1])
        return float(stats["msgs_per_sec"]), s.samples


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap, rounds=3)
    ap.add_argument("--rate", type=int, default=499)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    backends = args.backends.split(",")
    variants = args.variants.split(",")
    if "none" not in variants:
        variants.insert(0, "none")
    if set(variants) - set(VARIANTS):
        ap.error(f"unknown variants {sorted(set(variants) - set(VARIANTS))}; known: {', '.join(VARIANTS)}")
    runs = interleaved(backends, variants, args.rounds, args.seed, lambda b, v: one_run(b, v, args),
                       lambda v, m: f"{v:<16} {m[0]:10.0f} msg/s  samples {m[1]}")
    raw = {k: [rate for rate, _ in ms] for k, ms in runs.items()}
    counts = {k: [n for _, n in ms] for k, ms in runs.items()}
    lines = ["| backend | sampler | msgs/s (mean) | ratio vs none | 95% CI | samples per run |",
             "|---|---|---|---|---|---|"]
    for b in backends:
        base = raw[(b, "none")]
        for v in variants:
            m, hw = interval([x / n for x, n in zip(raw[(b, v)], base)])
            lines.append(f"| {b} | {v} | {statistics.fmean(raw[(b, v)]):.0f} | {m:.3f} | ±{hw:.3f} | "
                         f"{', '.join(map(str, counts[(b, v)]))} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        write_section(table, "sudo .venv/bin/python bench/sampling_overhead.py " + " ".join(sys.argv[1:]), args, raw)
    return 0


def write_section(table: str, cmd: str, args, raw) -> None:
    legend = "\n".join(f"- `{v}`: {d}" for v, d in VARIANTS.items())
    paired = ""
    for b in sorted({b for b, _ in raw}):
        if raw.get((b, "python")) and raw.get((b, "python_blocking")):
            r = [x / y for x, y in zip(raw[(b, "python_blocking")], raw[(b, "python")])]
            paired += (f"\n\n{b}: py-spy blocking / non-blocking throughput, same round: "
                       f"{', '.join(f'{x:.2f}' for x in r)} (median {statistics.median(r):.2f}).")
    body = (f"`{cmd.strip()}` — {time.strftime('%Y-%m-%d')}, "
            f"{args.connections} connections, {args.duration:g} s per run (+{WARMUP_S:g} s warm-up), {args.rounds} "
            f"interleaved rounds, {args.rate} Hz, backend pinned to CPU 0, loader and samplers on CPU 1. Ratio = "
            f"mean of per-round throughput ratios to the same round's unsampled run. Samples per run: stacks "
            f"sampled (off-CPU: switch-outs recorded; `all`: oncpu/python/offcpu). The machine is shared and "
            f"noisy (±10% on a quiet day, far more while other load runs): trust ratios whose interval "
            f"excludes 1, and paired same-round comparisons.\n\n{legend}\n\n{table}{paired}\n\n"
            f"<details><summary>raw msgs/s</summary>\n\n```\n"
            + "\n".join(f"{b}/{v}: {[round(x) for x in xs]}" for (b, v), xs in raw.items())
            + "\n```\n</details>\n")
    results_md.write_section("Sampling overhead (bench/sampling_overhead.py)", body)


if __name__ == "__main__":
    sys.exit(main())
