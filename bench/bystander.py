"""A noisy neighbour for benchmarks: one process per CPU that alternates bursts of system calls with
sleeps (random burst and pause lengths, `--duty` of the time busy), as another tenant of a shared host
would. Bounded: it exits after `--seconds` even if nobody stops it, and at SIGTERM.

    .venv/bin/python bench/bystander.py --duty 0.25 --seconds 600

Used by bench/probe_window.py --noise and bench/probe_window_paired.py --noise. With `--log PREFIX`
each neighbour writes the monotonic start and end of every burst to PREFIX.cpuN (created
exclusively), so a benchmark can tell how much of a given span a neighbour was busy on each CPU.

Each burst calls getppid() in a loop: a cheap syscall, so the bystander mostly pays the syscall
entry/exit path — the path the counting probes slow down for every task on the machine while they
are attached (+43 … +147 ns per bystander syscall, RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time


def neighbour(cpu: int, duty: float, until: float, seed: int, log: str | None) -> None:
    os.sched_setaffinity(0, {cpu})
    rng = random.Random(seed)
    out = None
    if log:
        fd = os.open(f"{log}.cpu{cpu}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        out = os.fdopen(fd, "w", buffering=1)  # line-buffered: a SIGTERM loses no finished burst
    while time.monotonic() < until:
        burst = rng.uniform(0.005, 0.050)
        start = time.monotonic()
        end = start + burst
        while time.monotonic() < end:
            for _ in range(200):
                os.getppid()
        if out is not None:
            out.write(f"{start:.6f} {time.monotonic():.6f}\n")
        time.sleep(burst * (1 - duty) / duty)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duty", type=float, default=0.25, help="share of the time each neighbour is busy (0 < d < 1)")
    ap.add_argument("--seconds", type=float, default=600.0, help="exit after this long at the latest")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log", metavar="PREFIX", help="write each burst's monotonic start and end to PREFIX.cpuN")
    args = ap.parse_args()
    if not 0 < args.duty < 1:
        ap.error("--duty must be between 0 and 1, e.g. --duty 0.25")
    until = time.monotonic() + args.seconds
    kids = []
    for cpu in sorted(os.sched_getaffinity(0)):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            neighbour(cpu, args.duty, until, args.seed + cpu, args.log)
            os._exit(0)
        kids.append(pid)

    def stop(*_):
        for k in kids:
            try:
                os.kill(k, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for k in kids:
        while True:
            try:
                os.waitpid(k, 0)
                break
            except InterruptedError:
                continue
    return 0


if __name__ == "__main__":
    sys.exit(main())
