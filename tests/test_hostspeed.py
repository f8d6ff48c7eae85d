"""The speed canary's figures over a cell (profiler/model/hostspeed.py) on constructed samples: the spans a
headline came from, the median loop time over them, and the slowest stretch within them."""

from __future__ import annotations

import math

import numpy as np

from netprof.profiler.model import hostspeed

PROBED = [{"event": "connected", "t": 9.0}, {"event": "measure_start", "t": 10.0},
          {"event": "guard_start", "t": 10.3}, {"event": "probe_start", "t": 10.4},
          {"event": "probe_stop", "t": 10.6}, {"event": "guard_stop", "t": 10.7},
          {"event": "measure_stop", "t": 11.0}, {"event": "result", "stats": {}}]


def test_headline_spans_and_the_canary_over_them():
    assert hostspeed.headline_spans(PROBED) == [(10.0, 10.3), (10.7, 11.0)]
    plain = [{"event": "measure_start", "t": 10.0}, {"event": "measure_stop", "t": 11.0}]
    assert hostspeed.headline_spans(plain) == [(10.0, 11.0)]
    assert hostspeed.headline_spans([{"event": "measure_start", "t": 10.0}]) == []  # cut short
    samples = np.array([[9.5, 999.0], [10.1, 60.0], [10.5, 500.0], [10.8, 62.0], [10.9, 61.0], [11.2, 999.0]])
    assert hostspeed.loop_ns(samples, hostspeed.headline_spans(PROBED)) == 61.0  # the probed middle is left out
    assert math.isnan(hostspeed.loop_ns(samples, [(20.0, 21.0)]))


def test_the_slowest_stretch_is_a_run_of_samples_not_one_sample():
    """A 2 s window sampled every 10 ms at 50 µs, with 0.4 s of it at 80 µs: the slowest 0.3 s reads 80 µs; one
    sample the scheduler cut in two (5 ms) among 50 µs ones does not make a stretch slow; stretches do not run
    across the probed middle, which is left out; a span with fewer samples than a stretch is one stretch."""
    t = np.arange(10.0, 12.0, 0.01)
    loops = np.full(t.size, 50_000.0)
    loops[(t >= 11.0) & (t < 11.4)] = 80_000.0
    loops[20] = 5_000_000.0
    samples = np.column_stack([t, loops])
    assert hostspeed.slowest_stretch_ns(samples, [(10.0, 12.0)]) == 80_000.0
    assert hostspeed.slowest_stretch_ns(samples, [(10.0, 10.9)]) == 50_000.0  # the lone slow sample: no stretch
    assert hostspeed.loop_ns(samples, [(10.0, 12.0)]) == 50_000.0  # over the window its median hides the stretch
    # the slow 0.4 s split by a probed middle into 0.1 s on each side: no stretch of 0.3 s is slow on its own
    assert hostspeed.slowest_stretch_ns(samples, [(10.0, 11.1), (11.3, 12.0)]) == 50_000.0
    assert hostspeed.slowest_stretch_ns(samples, [(11.05, 11.2)]) == 80_000.0  # 15 samples: one stretch
    assert math.isnan(hostspeed.slowest_stretch_ns(samples, [(20.0, 21.0)]))
