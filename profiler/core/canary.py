"""The speed canary: how fast one CPU runs, moment by moment, timed by a loop with no system call in it.

Every `--every` seconds a fixed loop of pure Python arithmetic is timed (time.perf_counter_ns reads the vDSO
clock, no syscall) and "monotonic-seconds loop-nanoseconds" is written to stdout (or `--out`, a new file).
Bounded: it exits after `--seconds`, at SIGTERM or SIGINT, or when its reader goes away.

Why: this host's throughput moves with how fast the hypervisor runs each CPU, in regimes of 0.3-3 s, and
steal time shows none of it (docs/facts.md). The loop time on the backend's CPU follows those regimes
(r = -0.57 to -0.78 against the 0.1 s rate: bench/host_regimes.py), so `netprof ab` uses it as a covariate
and to drop pairs the host disturbed. No probe sits on this loop (they are on syscall and scheduler paths),
and its cost (a ~60 µs loop each 10 ms, about 0.6% of the CPU) is the same for every variant it compares.

    python -I -m netprof.profiler.core.canary --cpu 0 --seconds 600           # samples on stdout
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import TextIO

SPIN = 2000  # iterations of the timed loop: ~60 µs here, short enough to fall mostly between preemptions
FLUSH_S = 0.05  # stdout is flushed this often: the reader sees each cell's samples soon after it ends


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, required=True)
    ap.add_argument("--out", help="a new file (created exclusively) for the samples, instead of stdout")
    ap.add_argument("--seconds", type=float, default=600.0, help="exit after this long at the latest")
    ap.add_argument("--every", type=float, default=0.01, help="seconds between samples")
    args = ap.parse_args(argv)
    os.sched_setaffinity(0, {args.cpu})
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    out: TextIO
    if args.out:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        out = os.fdopen(fd, "w", buffering=1 << 16)
    else:
        out = sys.stdout
    until = time.monotonic() + args.seconds
    flushed = time.monotonic()
    try:
        with out:
            while not stop and time.monotonic() < until:
                t0 = time.perf_counter_ns()
                x = 0
                for i in range(SPIN):
                    x += i
                t1 = time.perf_counter_ns()
                now = time.monotonic()
                out.write(f"{now:.4f} {t1 - t0}\n")
                if not args.out and now - flushed >= FLUSH_S:
                    out.flush()
                    flushed = now
                time.sleep(args.every)
    except BrokenPipeError:  # the reader is gone: nothing left to time for
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
