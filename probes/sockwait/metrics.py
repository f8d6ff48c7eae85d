"""--sockwait's judged figures (`netprof compare`, summary.json's per-cell aggregates): where the server side of a
round trip went. Waits are heavy-tailed and span decades between a fair and a starving backend: judged on a log
scale, a wait of 0 (nothing waited) as the histograms' 1 ns. Found by name (probes/registry.py `judge_metrics`)."""

from __future__ import annotations

from netprof.profiler.model.metrics import NS_FLOOR_US, SOCKWAIT_TRANSIT, Metric

METRICS = {
    # explains: compare's why-sentence names a significant change of the median wait
    "sockwait.wait_p50_us": Metric("socket queue wait p50", "µs", log=True, floor=NS_FLOOR_US, explains=True),
    "sockwait.wait_p99_us": Metric("socket queue wait p99", "µs", log=True, floor=NS_FLOOR_US),
    "sockwait.handler_p50_us": Metric("handler time p50", "µs", log=True, floor=NS_FLOOR_US),
    "sockwait.handler_p99_us": Metric("handler time p99", "µs", log=True, floor=NS_FLOOR_US),
    SOCKWAIT_TRANSIT: Metric("loader↔server transit", "µs"),
    "sockwait.conn_wait_ratio": Metric("queue wait, least-served tenth vs most-served connections", log=True,
                                       floor=NS_FLOOR_US),
}
