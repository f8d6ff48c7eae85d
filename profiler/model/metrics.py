"""What each judged figure of a cell is called and how it reads: the derived columns' names, each figure's label,
unit and direction (Metric), and the table of them (CELL_METRICS, then the instruments' METRICS). Light, no pandas:
an instrument's metrics.py, `--fail-if` and `--metric` read names before anything is measured; model/stats.py
computes the figures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from netprof.profiler.core import units

# The figures a cell is judged by, round by round: summary.json's per-cell aggregates and
# `netprof compare` read these columns (see docs/results-format.md).

CPU_TOTAL = "cpu_us_per_msg_total"  # user + kernel CPU µs per message
SYSCALLS_TOTAL = "syscalls_per_msg_total"  # every counted syscall per message (NaN without probes)
# Every kernel operation per message: the syscalls and the io_uring submissions (the same as SYSCALLS_TOTAL
# for a server that hands nothing to a ring)
KERNEL_OPS_TOTAL = "kernel_ops_per_msg_total"
# --sockwait: the loader's mean round trip minus the server's mean time per answered request (first
# byte queued → answer sent), both over the same window: the time on the wire and in the two kernels.
SOCKWAIT_TRANSIT = "sockwait.transit_us"
# A watched row's (watch/rundir.py): its syscalls and io_uring operations per request, counted per request, not by name
WATCH_SYSCALLS, WATCH_RING = "watch.syscalls_per_request", "watch.ring_ops_per_request"
CONN_CV = "per_conn_cv"  # spread of messages across connections: CV = √(1/Jain − 1)
CV_FLOOR = 1e-4  # a spread below this is perfect fairness (keeps the log scale finite)


@dataclass(frozen=True)
class Metric:
    # as a person reads it; in CELL_METRICS {rate}, {per} and {many} stand for the cells' words (metric_info)
    label: str
    unit: str = ""
    higher_is_better: bool = False
    log: bool = False  # judged on a log scale (ratio of geometric means)
    judged_by: str | None = None  # judged through another column (a monotone function of this one)
    floor: float = 0.0  # values below it are judged as it (a 0 would be -inf on the log scale)
    explains: bool = False  # compare's why-sentence continues with it (after compare.EXPLAIN_METRICS)


CELL_METRICS: dict[str, Metric] = {
    # The rate on a log scale (the ratio of geometric means), as `netprof ab` judges it: this host's speed moves in
    # regimes that scale a cell's rate (three rounds of selector at 102.6k, 28.9k and 49.2k msgs/s), and on the
    # linear scale such a spread left a 30× slower variant (2.1k msgs/s) "no significant change" (Welch p 0.12).
    # Latency and CPU per message stay linear: what a slow host adds to them is mostly added time (a stall, stolen
    # CPU), and on the log scale the spread of a small BASE (user CPU 0.5-3 µs per message) hid a 20-µs change.
    "msgs_per_sec": Metric("{rate}", higher_is_better=True, log=True),
    "lat_us.p50": Metric("latency p50", "µs"),
    "lat_us.p95": Metric("latency p95", "µs"),
    "lat_us.p99": Metric("latency p99", "µs"),
    "lat_us.p999": Metric("latency p999", "µs"),
    "cpu_us_per_msg.user": Metric("user CPU {per}", "µs"),
    "cpu_us_per_msg.sys": Metric("kernel CPU {per}", "µs"),
    CPU_TOTAL: Metric("CPU {per}", "µs"),
    SYSCALLS_TOTAL: Metric("syscalls {per}"),
    KERNEL_OPS_TOTAL: Metric("kernel operations {per} (syscalls + io_uring)"),
    "ctx_switches_per_msg": Metric("context switches {per}"),
    # Jain saturates near 1 (0.86 and 0.9999 look close, yet are a spread of 0.40 vs 0.01): it is
    # judged through J = 1/(1 + CV²), the per-connection coefficient of variation, on a log scale.
    "per_conn.jain": Metric("Jain index", higher_is_better=True, judged_by=CONN_CV),
    CONN_CV: Metric("spread across connections (CV)", log=True),
    "per_conn.active_share": Metric("share of connections that handled 95% of {many}", higher_is_better=True),
}
# Each instrument's judged figures (METRICS of its folder's metrics.py), after CELL_METRICS in the instruments'
# order: added by probes/registry.py `judge_metrics` (compare and the report's summary call it before they judge).
INSTRUMENT_METRICS: dict[str, Metric] = {}
SYSCALL_PREFIX = "syscalls_per_msg."
RING_PREFIX = "ring_per_msg."  # io_uring operations per message, by operation
# A kernel operation per message, by name: a syscall or an io_uring operation (0 when a probed cell made none).
KERNEL_OP_PREFIXES = (SYSCALL_PREFIX, RING_PREFIX)
NS_FLOOR_US = 1e-3  # the socket-wait histograms' resolution: 1 ns (their metrics' floor)


def add_metrics(metrics: Mapping[str, Metric]) -> None:
    """An instrument's judged figures, after those already known (probes/registry.py `judge_metrics`)."""
    for col, m in metrics.items():
        if col in CELL_METRICS:
            raise ValueError(f"{col}: a built-in judged figure, not an instrument's")
        INSTRUMENT_METRICS[col] = m


def judged_metrics() -> dict[str, Metric]:
    """Every judged column with how it reads: CELL_METRICS, then the instruments' (INSTRUMENT_METRICS)."""
    return {**CELL_METRICS, **INSTRUMENT_METRICS}


def metric_info(col: str, protocol=None) -> Metric:
    """How a judged column reads and is judged, in the words of `protocol` (a row's, or the cells'; see
    units.rate_unit): a syscall column reads 'epoll_ctl per message', 'epoll_ctl per request' for HTTP."""
    per = units.per_unit(protocol)
    if col.startswith(SYSCALL_PREFIX):
        return Metric(f"{col[len(SYSCALL_PREFIX):]} {per}")
    if col.startswith(RING_PREFIX):
        return Metric(f"{col[len(RING_PREFIX):]} (io_uring) {per}")
    m = judged_metrics()[col]
    return replace(m, label=m.label.format(rate=units.rate_unit(protocol), per=per, many=units.exchanges(protocol)))
