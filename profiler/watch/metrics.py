"""`netprof watch --metrics-port`: the figures as Prometheus metrics (prometheus-client's exposition server and
a custom collector), cumulative since watch attached.

    netprof_requests_total{route}                      requests answered
    netprof_request_seconds{route}                     histogram of server time (first byte in → answer sent)
    netprof_request_part_seconds_total{route,part}     the breakdown's parts, summed over the requests it followed
    netprof_request_timer_seconds_total{route}         ... of their off_cpu_io, the loop asleep until a timer
    netprof_request_breakdown_requests_total{route}    ... how many it followed (parts ÷ this = the parts' means)
    netprof_request_syscalls_total{route}              syscalls of the threads serving the route
    netprof_request_ring_ops_total{route}              their io_uring submissions
    netprof_loop_wait_seconds                          histogram of loop_wait (the event loop's lag, per request)
    netprof_probe_cpu_seconds_total                    the probes' own CPU time (the kernel's count)
    netprof_watch_attached_seconds_total               the whole set's attached seconds (--max-overhead: a share)
    netprof_accept_queue                               connections waiting to be accepted (a gauge, at the last window)
    netprof_threads_waiting_for_cpu                    threads runnable with no CPU for them (a gauge, the last
                                                       window's mean)

Every request is counted and timed. Under --max-overhead the whole set is attached for a share of each interval
only: requests answered in the rest count as the route "(unsampled)" (with their server time), and the other
counters (parts, syscalls) grow only while it is whole (netprof_watch_attached_seconds_total says how long). Labels stay
bounded: routes are at most the probe set's table (--routes), the rest folded into "(other)"; parts
are the breakdown's nine. Per-request figures are ratios of counters in PromQL, e.g.
`rate(netprof_request_syscalls_total[1m]) / rate(netprof_requests_total[1m])`.

The collector reads what the watch loop last published (Published), never the BPF maps: a scrape costs the
watched server nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

from netprof.probes.breakdown import PARTS
from netprof.probes.sockwait.sockwait import NSLOTS, slot_bounds
from netprof.probes.watch import SERVER_PARTS, WatchSnapshot
from netprof.profiler.core.errors import InputError

# Bucket bounds in seconds: 50 µs to 10 s (a server's request time spans that range).
BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
           5.0, 10.0)
_SERVER_PART_INDEX = [(i, p) for i, p in enumerate(PARTS[:-1]) if p in SERVER_PARTS]


@dataclass(frozen=True)
class Published:
    base: WatchSnapshot          # at attach
    latest: WatchSnapshot
    probe_ns: int
    attached_s: float            # seconds attached so far (all of the watch but under --max-overhead)
    accept_queue: int | None = None  # connections waiting to be accepted at the last window's end (None: unread)
    threads_waiting: float | None = None  # threads runnable but waiting for a CPU, the last window's mean


class Board:
    """What the watch loop publishes for scrapes (one reference, swapped whole)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now: Published | None = None

    def publish(self, p: Published) -> None:
        with self._lock:
            self._now = p

    def read(self) -> Published | None:
        with self._lock:
            return self._now


def buckets(hist: list[int]) -> list[tuple[str, float]]:
    """Cumulative counts at each bound (a slot counts in the first bucket its upper bound fits: ≤ 6% wide)."""
    out, total, k = [], 0, 0
    bounds_ns = [b * 1e9 for b in BUCKETS]
    for i in range(NSLOTS):
        c = hist[i]
        if not c:
            continue
        hi = slot_bounds(i)[1]
        while k < len(bounds_ns) and hi > bounds_ns[k] + 1:
            out.append((repr(BUCKETS[k]), float(total)))
            k += 1
        total += c
    while k < len(bounds_ns):
        out.append((repr(BUCKETS[k]), float(total)))
        k += 1
    out.append(("+Inf", float(total)))
    return out


class WatchCollector:
    """prometheus-client custom collector over a Board."""

    def __init__(self, board: Board) -> None:
        self.board = board

    def describe(self) -> list:
        return []  # unchecked: the registry then calls collect() only at scrapes

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        p = self.board.read()
        if p is None:
            return
        requests = CounterMetricFamily("netprof_requests", "Requests answered, by route.", labels=["route"])
        seconds = HistogramMetricFamily("netprof_request_seconds", "Server time of a request: its first byte in "
                                        "the socket queue to its answer sent.", labels=["route"])
        parts = CounterMetricFamily("netprof_request_part_seconds", "The breakdown's parts of the requests it "
                                    "followed, summed.", labels=["route", "part"])
        timers = CounterMetricFamily("netprof_request_timer_seconds", "Of the part off_cpu_io: the readiness waits "
                                     "(epoll_wait, poll, select) that ended on their timeout, the loop asleep until a "
                                     "timer, summed over the requests followed.", labels=["route"])
        followed = CounterMetricFamily("netprof_request_breakdown_requests", "Requests the breakdown followed.",
                                       labels=["route"])
        syscalls = CounterMetricFamily("netprof_request_syscalls", "Syscalls of the threads serving the route.",
                                       labels=["route"])
        ring = CounterMetricFamily("netprof_request_ring_ops", "io_uring submissions of the threads serving the "
                                   "route.", labels=["route"])
        for route, y in sorted(p.latest.routes.items()):
            x = p.base.routes.get(route)

            def d(name: str) -> int:
                return getattr(y, name) - (getattr(x, name) if x else 0)  # noqa: B023 (used at once)

            hist = [b - (x.hist[i] if x else 0) for i, b in enumerate(y.hist)]
            requests.add_metric([route], d("requests"))
            seconds.add_metric([route], buckets(hist), sum_value=d("server_ns") / 1e9)
            for i, part in _SERVER_PART_INDEX:
                parts.add_metric([route, part], (y.part_ns[i] - (x.part_ns[i] if x else 0)) / 1e9)
            timers.add_metric([route], d("timer_ns") / 1e9)
            followed.add_metric([route], d("measured"))
            syscalls.add_metric([route], d("syscalls"))
            ring.add_metric([route], d("ring_ops"))
        yield from (requests, seconds, parts, timers, followed, syscalls, ring)
        k = PARTS.index("loop_wait")
        a, b = p.base.snapshot.breakdown, p.latest.snapshot.breakdown
        lw = [y - x for x, y in zip(a.hist[k], b.hist[k])]
        loop = HistogramMetricFamily("netprof_loop_wait_seconds", "Per request: the time its thread served others "
                                     "between reading it and answering (an event loop's lag).")
        loop.add_metric([], buckets(lw), sum_value=(b.sum_ns[k] - a.sum_ns[k]) / 1e9)
        yield loop
        yield CounterMetricFamily("netprof_probe_cpu_seconds", "CPU time the probes ran, by the kernel's count.",
                                  value=p.probe_ns / 1e9)
        yield CounterMetricFamily("netprof_watch_attached_seconds", "Seconds the whole probe set was attached: "
                                  "the parts and syscalls above are of those seconds (--max-overhead keeps only the "
                                  "requests' count and server time part of the time, as the route (unsampled)).",
                                  value=p.attached_s)
        if p.accept_queue is not None:
            yield GaugeMetricFamily("netprof_accept_queue", "Connections waiting to be accepted on the ports the "
                                    "server listens on (its listen queue), at the last window's end.",
                                    value=p.accept_queue)
        if p.threads_waiting is not None:
            yield GaugeMetricFamily("netprof_threads_waiting_for_cpu", "The watched processes' threads runnable but "
                                    "waiting for a CPU, on average over the last window (/proc schedstat: their run "
                                    "queue).", value=p.threads_waiting)


def serve(board: Board, port: int, addr: str):
    """Start the exposition server on addr:port; returns what stop() needs."""
    from prometheus_client import CollectorRegistry, start_http_server

    if not 0 < port < 65536:
        raise InputError(f"--metrics-port {port}: give a TCP port between 1 and 65535")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WatchCollector(board))
    try:
        return start_http_server(port, addr=addr, registry=registry)
    except OSError as e:
        raise InputError(f"--metrics-port {port}: cannot listen on {addr}:{port} ({e.strerror}); "
                         "give a free port") from None


def stop(server) -> None:
    httpd, thread = server
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)
