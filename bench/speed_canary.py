"""How fast one CPU runs, moment by moment, with no system call in what it times: the product's speed
canary (netprof.profiler.core.canary, which `netprof ab` runs on the backend's CPU), kept here under the name
the benches and RESULTS.md use. `--out` writes the samples ("monotonic-seconds loop-nanoseconds" lines)
to a new file; see the module for why the loop time tracks this host's speed regimes.

    .venv/bin/python bench/speed_canary.py --cpu 0 --out /tmp/x/c0.txt --seconds 600
"""

from __future__ import annotations

import sys

from netprof.profiler.core.canary import main

if __name__ == "__main__":
    sys.exit(main())
