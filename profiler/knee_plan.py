"""`netprof knee`'s plan: the objective (`--slo`), what one knee measures (KneePlan) and its checks. Light (no
pandas; of the run layer only its plan): the CLI refuses a knee it cannot run before it loads what measures one
(knee.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from netprof.profiler.core.errors import InputError
from netprof.profiler.run.plan import ARRIVALS, RunConfig, check_max_connections, closed_loop_only

STEPS = (1, 12)  # --steps' range
TRIES = (1, 5)  # --tries' range
STATS = ("p50", "p90", "p95", "p99", "p999")
_SLO = re.compile(r"\s*(p50|p90|p95|p99|p999)\s*<\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|µs|ms|s)\s*", re.IGNORECASE)
_UNIT_US = {"us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}


@dataclass(frozen=True)
class Slo:
    stat: str  # a latency percentile of the rows' lat_us (from the intended time in open loop)
    limit_us: float

    def text(self) -> str:
        v = self.limit_us
        return f"{self.stat}<{v / 1e3:g}ms" if v >= 1e3 else f"{self.stat}<{v:g}us"


def parse_slo(text: str) -> Slo:
    """'p99<5ms' (also p50, p90, p95, p999; us, ms, s) → Slo."""
    m = _SLO.fullmatch(text)
    if not m:
        raise InputError(f"--slo '{text}' is not an objective: give a percentile, '<' and a time, e.g. --slo 'p99<5ms' "
                         f"(percentiles {', '.join(STATS)}; units us, ms, s)")
    limit = float(m.group(2)) * _UNIT_US[m.group(3).lower()]
    if not 0 < limit <= 60e6:
        raise InputError(f"--slo {text}: the limit must be more than 0 and at most 60 s")
    return Slo(m.group(1).lower(), limit)


@dataclass
class KneePlan:
    cfg: RunConfig  # validated; one server (cfg.backends[0]), one connections value, closed loop
    label: str
    slo: Slo
    steps: int = 6
    arrivals: str = ARRIVALS[0]
    wait: bool = False
    tries: int = 3


def check(p: KneePlan) -> None:
    if len(p.cfg.backends) != 1 or len(p.cfg.connections) != 1 or len(p.cfg.pipeline) != 1:
        raise InputError("netprof knee measures one server at one scale: give one SERVER (or one --cmd), one -c "
                         "and one --pipeline")
    if not STEPS[0] <= p.steps <= STEPS[1]:
        raise InputError(f"--steps {p.steps} is out of range: use {STEPS[0]} to {STEPS[1]} (each halves the "
                         "interval the knee is in)")
    if not TRIES[0] <= p.tries <= TRIES[1]:
        raise InputError(f"--tries {p.tries} is out of range: use {TRIES[0]} to {TRIES[1]} (cells a rate may take to "
                         "pass)")
    if p.arrivals not in ARRIVALS:
        raise InputError(f"--arrivals '{p.arrivals}' is not known; use constant or poisson")
    if p.cfg.think != "none":
        raise InputError("netprof knee sends on a schedule: drop --think")
    check_max_connections(p.cfg)
    if closed_loop_only(p.cfg):
        raise InputError(f"netprof knee is not for the ZeroMQ backends ({p.cfg.backends[0]}) under --zmq-client "
                         "libzmq: libzmq's DEALER sockets are driven closed-loop only; add --zmq-client native")
