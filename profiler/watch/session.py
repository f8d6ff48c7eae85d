"""One `netprof watch`: attach to a running server's tree, read the probes every interval, publish each window,
detach. No loader, no marks: windows are the watch's own clock, requests are the kernel's (figures.py).

The flow, for a target the caller resolved (target.py): take its watch lock (one watch per process) → turn on
the kernel's BPF run-time statistics (the probes' cost) → compile and attach the probe set (probes/watch) → every
interval a snapshot, the window's figures to `on_window` and the cumulative ones to the metrics board → on
--duration, Ctrl-C, SIGTERM or the process's exit: the last snapshot, everything detached and closed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from netprof.probes import progstats
from netprof.probes.proc import proc_cpu_times, proc_delta, turns_between
from netprof.probes.watch import WatchProbes, WatchSnapshot
from netprof.profiler.core.runlock import watch_lock
from netprof.profiler.model import stats

from . import target as targets
from .config import WatchConfig
from .figures import window_figures
from .metrics import Board, Published

MIN_DUTY = 0.05  # the least share of each interval attached under --max-overhead: some requests are always seen


@dataclass
class Outcome:
    target: targets.Target
    figures: dict[str, Any]       # over the whole watch
    ended_by: str                 # "duration", "interrupt", "SIGTERM", "process exited"
    first: WatchSnapshot          # at attach
    last: WatchSnapshot           # at the end
    seconds: float                # between the two
    proc: dict[str, float]        # the followed processes' /proc deltas over it (probes.proc.proc_delta)
    sched: dict[str, Any]         # their threads against their CPUs over it (stats.sched)


class _Stop:
    """Ends the loop early: SIGTERM (and SIGINT, for a caller that ignores it) set it; the loop waits on it."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.why = ""

    def set(self, why: str) -> None:
        self.why = self.why or why
        self.event.set()


@contextlib.contextmanager
def _signals(stop: _Stop):
    def on(signum, frame) -> None:
        stop.set("interrupt" if signum == signal.SIGINT else signal.Signals(signum).name)

    old = {s: signal.signal(s, on) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run(cfg: WatchConfig, t: targets.Target, on_window: Callable[[dict[str, Any]], None], board: Board | None = None,
        on_attached: Callable[[targets.Target], None] | None = None) -> Outcome:
    """Watch `t` (target.resolve: the CLI resolves it before this module's imports) until the config's end."""
    stop = _Stop()
    with watch_lock(t.pid), _signals(stop):
        stats_fd = progstats.enable()
        probes = WatchProbes(attached=False, routes=cfg.routes)
        try:
            probes.target(t.pid, t.also)
            probes.attach()
            return _loop(cfg, t, probes, stop, on_window, board, on_attached)
        finally:
            probes.close()
            if stats_fd is not None:
                os.close(stats_fd)


def _cost(probes: WatchProbes) -> tuple[int, int]:
    return progstats.run_time(probes.bpf)


def _tree_times(t: targets.Target) -> dict[str, Any]:
    """The followed processes' /proc counters so far (their live descendants included), summed, with each thread's
    ('per_thread': probes.proc.proc_delta subtracts those thread by thread)."""
    total: dict[str, Any] = {}
    threads: dict[int, tuple] = {}
    for pid in (t.pid, *t.also):
        for k, v in proc_cpu_times(pid).items():
            if k == "per_thread":
                threads.update(v)
            else:
                total[k] = total.get(k, 0) + v
    total["per_thread"] = threads
    return total


def _cpu_ns(times: dict[str, Any]) -> int:
    """CPU time of the followed processes in a _tree_times read (user + system)."""
    return int((times["user_s"] + times["sys_s"]) * 1e9)


def _threads_waiting(a: dict[str, Any], b: dict[str, Any], seconds: float) -> float | None:
    """The followed processes' threads runnable but waiting for a CPU, on average between two _tree_times reads
    (stats.sched's runq_mean: the live line, windows.jsonl and the gauge); None when threads exited between them
    (their waits went with them)."""
    d = proc_delta(a, b)
    if d.get("threads_exited"):
        return None
    turns = turns_between(a, b)
    return stats.sched(d, seconds, *(turns or (None, None))).get("runq_mean")


def next_duty(duty: float, probe_ns: int, server_ns: int, cap: float) -> float:
    """The share of each interval to stay attached next, so that the probes' CPU stays within `cap` of the
    watched processes' CPU on average: cap ÷ (their share while attached), between MIN_DUTY and 1. No cap (0)
    keeps it at 1; an idle server (under 1 ms of CPU in the window: nothing to weigh) keeps it as it is."""
    if not cap:
        return 1.0
    if server_ns < 1_000_000:
        return duty
    share = probe_ns / server_ns
    return 1.0 if share <= cap else max(MIN_DUTY, cap / share)


def _loop(cfg: WatchConfig, t: targets.Target, probes: WatchProbes, stop: _Stop,
          on_window: Callable[[dict[str, Any]], None], board: Board | None,
          on_attached: Callable[[targets.Target], None] | None) -> Outcome:
    """Each interval: the whole set attached for its first `duty` share (all of it while the probes cost less
    than --max-overhead), then light (requests counted and timed, nothing else) for the rest; a window's figures
    over the interval (requests and server time over all of it, parts, routes and syscalls over the attached
    share, `whole`: when, in epoch seconds). `on_attached` once the first snapshot is taken: every request after
    it counts."""
    base: WatchSnapshot = probes.snapshot()
    cost0, proc0, t_proc0 = _cost(probes), _tree_times(t), time.monotonic()
    if on_attached:
        on_attached(t)
    start = time.monotonic()
    end = start + cfg.duration if cfg.duration is not None else None
    prev, t_prev, cost_prev = base, start, cost0
    proc_w, t_w = proc0, t_proc0  # /proc at the last window's end (each thread's: its threads waiting for a CPU)
    attached_s, duty = 0.0, 1.0
    if board:
        board.publish(Published(base, base, 0, 0.0))
    ended = ""
    while not ended:
        t_a = time.monotonic()
        probes.attach()  # no-op while whole
        wall_a = time.time()
        cost_a, cpu_a = _cost(probes), _cpu_ns(proc_w)  # the last window's end: this one's start
        ended = _wait(stop, t_a + duty * cfg.interval, end, t)
        cost_b, proc_b = _cost(probes), _tree_times(t)
        next_ = next_duty(duty, cost_b[0] - cost_a[0], _cpu_ns(proc_b) - cpu_a, cfg.max_overhead)
        t_light = wall_b = None
        if not ended and duty < 1.0:
            wall_b = time.time()
            probes.lighten()
            t_light = time.monotonic()
            ended = _wait(stop, t_a + cfg.interval, end, t)
        snap, t_snap, cost = probes.snapshot(describe=bool(ended)), time.monotonic(), _cost(probes)
        wall_b = wall_b or time.time()
        attached_s += (t_light or t_snap) - t_a
        queued = targets.accept_queue(t, snap.ports)  # a gauge: at the window's end
        proc_now = _tree_times(t) if t_light is not None else proc_b  # all of it attached: read at its end already
        waiting = _threads_waiting(proc_w, proc_now, time.monotonic() - t_w)
        proc_w, t_w = proc_now, time.monotonic()
        if board:
            board.publish(Published(base, snap, cost[0] - cost0[0], attached_s, queued, waiting))
        if t_snap - t_prev > 0.05:  # a window too short to say anything (an early stop) is left out
            f = window_figures(prev, snap, t_snap - t_prev, (cost[0] - cost_prev[0], cost[1] - cost_prev[1]))
            on_window({**f, "duty": round(duty, 3), "whole": [round(wall_a, 4), round(wall_b, 4)],
                       "accept_queue": queued, "threads_waiting": waiting})
        prev, t_prev, cost_prev, duty = snap, t_snap, cost, next_
    proc1, t_proc1 = proc_w, t_w
    figures = window_figures(base, prev, t_prev - start, (cost_prev[0] - cost0[0], cost_prev[1] - cost0[1]))
    figures["attached_share"] = round(min(1.0, attached_s / (t_prev - start)), 3) if t_prev > start else None
    proc = proc_delta(proc0, proc1)
    turns = turns_between(proc0, proc1)
    return Outcome(t, figures, ended, base, prev, t_prev - start, proc,
                   stats.sched(proc, t_proc1 - t_proc0, *(turns or (None, None))))


def _wait(stop: _Stop, until: float, end: float | None, t: targets.Target) -> str:
    """Sleep until `until` (or the watch's end); why the watch ends, or "" to go on."""
    if end is not None:
        until = min(until, end)
    if stop.event.wait(max(0.0, until - time.monotonic())):
        return stop.why
    if end is not None and time.monotonic() >= end - 1e-3:
        return "duration"
    if not targets.alive(t):
        return "process exited"
    return ""
