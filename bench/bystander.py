"""A noisy neighbour for benchmarks: one process per CPU that alternates bursts of system calls with
sleeps (random burst and pause lengths, `--duty` of the time busy), as another tenant of a shared host
would. Bounded: it exits after `--seconds` even if nobody stops it, and at SIGTERM.

    .venv/bin/python bench/bystander.py --duty 0.25 --seconds 600

Used by bench/probe_window.py --noise. Each burst calls getppid() in a loop: a cheap syscall, so the
bystander mostly pays the syscall entry/exit path — the path the counting probes slow down for every
task on the machine while they are attached (+43 … +147 ns per bystander syscall, RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time


def neighbour(cpu: int, duty: float, until: float, seed: int) -> None:
    os.sched_setaffinity(0, {cpu})
    rng = random.Random(seed)
    while time.monotonic() < until:
        burst = rng.uniform(0.005, 0.050)
        end = time.monotonic() + burst
        while time.monotonic() < end:
            for _ in range(200):
                os.getppid()
        time.sleep(burst * (1 - duty) / duty)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duty", type=float, default=0.25, help="share of the time each neighbour is busy (0 < d < 1)")
    ap.add_argument("--seconds", type=float, default=600.0, help="exit after this long at the latest")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if not 0 < args.duty < 1:
        ap.error("--duty must be between 0 and 1, e.g. --duty 0.25")
    until = time.monotonic() + args.seconds
    kids = []
    for cpu in sorted(os.sched_getaffinity(0)):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            neighbour(cpu, args.duty, until, args.seed + cpu)
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
