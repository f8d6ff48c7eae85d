"""`netprof watch`'s options, typed and checked once (the CLI builds one WatchConfig; the rest reads it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from netprof.probes.watch import FIRST, ROUTES
from netprof.profiler.core.errors import InputError

MAX_ROUTES = 1024
# The probes' CPU as a share of the watched processes' own, on average (session.next_duty): above it, watch stays
# attached for part of each interval only. bench/watch_overhead.py measures what it costs the server.
DEFAULT_MAX_OVERHEAD = 0.10


@dataclass(frozen=True)
class WatchConfig:
    pid: int | None = None
    port: int | None = None
    cgroup: str | None = None
    duration: float | None = None     # None: until Ctrl-C, SIGTERM or the process exits
    interval: float = 1.0             # seconds between the live view's windows (and windows.jsonl's)
    as_json: bool = False
    out: Path | None = None
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    routes: int = ROUTES
    max_overhead: float = DEFAULT_MAX_OVERHEAD  # the probes' CPU ÷ the watched processes' CPU; 0: no cap

    def __post_init__(self) -> None:
        if self.duration is not None and not (math.isfinite(self.duration) and 0.1 <= self.duration <= 7 * 86400):
            raise InputError(f"--duration {self.duration:g}: give seconds between 0.1 and 604800, e.g. --duration 10")
        if not (math.isfinite(self.interval) and 0.1 <= self.interval <= 3600):
            raise InputError(f"--interval {self.interval:g}: give seconds between 0.1 and 3600, e.g. --interval 1")
        if not FIRST <= self.routes <= MAX_ROUTES:  # FIRST: the reserved names only, no route told apart
            raise InputError(f"--routes {self.routes}: give a number between {FIRST} and {MAX_ROUTES}")
        if not (math.isfinite(self.max_overhead) and (self.max_overhead == 0 or 0.001 <= self.max_overhead <= 10)):
            raise InputError(f"--max-overhead {self.max_overhead:g}: give a share between 0.001 and 10 (0.1: the "
                             "probes may take a tenth of the server's CPU), or 0 for no cap")
        if self.as_json and self.duration is None:
            raise InputError("--json prints the figures of a finished window: give --duration S")
