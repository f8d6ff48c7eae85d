"""How fast the host ran a cell's backend CPU, from the speed canary's samples (core/canary.py): rows of
(monotonic seconds, loop ns), read over the spans a cell's headline figures came from. `netprof ab` judges
pairs by a cell's median loop time (model/paired.py), `netprof knee` its failing tries by the slowest stretch
of a cell (knee.py's SLOWED). Pure functions on numbers."""

from __future__ import annotations

import math

import numpy as np

SAMPLE_S = 0.01  # the canary's --every, as netprof starts it (run/canary.py)
# Samples in a stretch: 0.3 s, the shortest regime of this host's speed (docs/facts.md). A stretch that long at
# 1.5x slower puts a server at 85% of its capacity at 1.3x it, ~80 ms of work queued by its end: enough to fail
# a p99 of milliseconds over a 2 s window on its own.
STRETCH = 30
STRETCH_S = STRETCH * SAMPLE_S


def headline_spans(events: list[dict]) -> list[tuple[float, float]]:
    """The monotonic spans a cell's headline figures came from (the loader's event times `t`): the window,
    minus the probed sub-window and its guards when there was one. [] when the marks are missing."""
    t = {e["event"]: float(e["t"]) for e in events if "t" in e and "event" in e}
    if "measure_start" not in t or "measure_stop" not in t:
        return []
    if "guard_start" in t and "guard_stop" in t:
        return [(t["measure_start"], t["guard_start"]), (t["guard_stop"], t["measure_stop"])]
    return [(t["measure_start"], t["measure_stop"])]


def _inside(samples: np.ndarray, t0: float, t1: float) -> np.ndarray:
    samples = np.asarray(samples, dtype=float).reshape(-1, 2)
    return samples[(samples[:, 0] >= t0) & (samples[:, 0] < t1), 1]


def loop_ns(samples: np.ndarray, spans: list[tuple[float, float]]) -> float:
    """The canary's median loop time over `spans`; NaN when no sample fell in them."""
    loops = [_inside(samples, t0, t1) for t0, t1 in spans]
    inside = np.concatenate(loops) if loops else np.empty(0)
    return float(np.median(inside)) if inside.size else math.nan


def slowest_stretch_ns(samples: np.ndarray, spans: list[tuple[float, float]], n: int = STRETCH) -> float:
    """The canary's median loop time over its slowest `n` samples in a row within one of `spans` (a span with
    fewer: all of them); NaN when no sample fell in them. A median, so that one sample the scheduler cut in two
    does not make a stretch slow."""
    worst = math.nan
    for t0, t1 in spans:
        loops = _inside(samples, t0, t1)
        if not loops.size:
            continue
        runs = np.lib.stride_tricks.sliding_window_view(loops, min(n, loops.size))
        slowest = float(np.median(runs, axis=1).max())
        worst = slowest if math.isnan(worst) else max(worst, slowest)
    return worst
