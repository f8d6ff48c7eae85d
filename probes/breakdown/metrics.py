"""--breakdown's judged figures (`netprof compare`, summary.json's per-cell aggregates): the mean request's parts
and its total, heavy-tailed like the socket waits (a log scale, 0 as 1 ns). Found by name (probes/registry.py
`judge_metrics`)."""

from __future__ import annotations

from netprof.profiler.model.metrics import NS_FLOOR_US, Metric

JUDGED_PARTS = ("queue_wait", "loop_wait", "runqueue", "on_cpu", "off_cpu_futex", "off_cpu_io")  # of breakdown.PARTS

METRICS = {
    **{f"breakdown.mean_us.{part}": Metric(f"{part.replace('_', ' ')} per request (breakdown)", "µs", log=True,
                                           floor=NS_FLOOR_US)
       for part in JUDGED_PARTS},
    "breakdown.parts_mean_us": Metric("request time, sum of its parts (breakdown)", "µs", log=True, floor=NS_FLOOR_US),
}
