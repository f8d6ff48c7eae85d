"""How fast one CPU runs, moment by moment, with no system call in what it times.

Every `--every` seconds a fixed loop of pure Python arithmetic is timed (time.perf_counter_ns reads the vDSO clock,
no syscall) and "monotonic-time nanoseconds" is appended to `--out`. Bounded: it exits after
`--seconds`, or at SIGTERM.

Why: this host's throughput moves with how fast the hypervisor lets the backend's CPU run (at times
0.1 s slices of one window sit at about 0.8, 1.1 or 1.2 of the mean for 0.3-3 s at a time; at others
it dips for a moment). The loop time on the backend's CPU follows it (r = -0.57 to -0.78 against the
0.1 s rate: bench/host_regimes.py, RESULTS.md). The counting
probes sit on the syscall and scheduler paths only, and are detached in headline time anyway, so
they cannot change this loop's time: it is a covariate that bench/probe_window_paired.py uses to take
the host's speed out of its comparison. Its cost (a ~60 µs loop each 10 ms, about 0.6% of the CPU)
is the same in every variant it compares.

    .venv/bin/python bench/speed_canary.py --cpu 0 --out /tmp/x/c0.txt --seconds 600
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

SPIN = 2000  # iterations of the timed loop: ~60 µs here, short enough to fall mostly between preemptions


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, required=True)
    ap.add_argument("--out", required=True, help="a new file (created exclusively) for the samples")
    ap.add_argument("--seconds", type=float, default=600.0, help="exit after this long at the latest")
    ap.add_argument("--every", type=float, default=0.01, help="seconds between samples")
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    until = time.monotonic() + args.seconds
    with os.fdopen(fd, "w", buffering=1 << 16) as out:
        while not stop and time.monotonic() < until:
            t0 = time.perf_counter_ns()
            x = 0
            for i in range(SPIN):
                x += i
            t1 = time.perf_counter_ns()
            out.write(f"{time.monotonic():.4f} {t1 - t0}\n")
            time.sleep(args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
