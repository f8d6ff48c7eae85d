"""One `netprof watch`: attach to a running server's tree, read the probes every interval, publish each window,
detach. No loader, no marks: windows are the watch's own clock, requests are the kernel's (figures.py).

The flow: resolve the target (target.py) → take its watch lock (one watch per process) → turn on the kernel's BPF
run-time statistics (the probes' cost) → compile and attach the probe set (probes/watch) → every interval a
snapshot, the window's figures to `on_window` and the cumulative ones to the metrics board → on --duration,
Ctrl-C, SIGTERM or the process's exit: the last snapshot, everything detached and closed.
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
from netprof.probes.watch import WatchProbes, WatchSnapshot
from netprof.profiler.core.errors import InputError
from netprof.profiler.core.runlock import watch_lock

from . import target as targets
from .config import WatchConfig
from .figures import window_figures
from .metrics import Board, Published


@dataclass
class Outcome:
    target: targets.Target
    figures: dict[str, Any]       # over the whole watch
    ended_by: str                 # "duration", "interrupt", "SIGTERM", "process exited"


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


def run(cfg: WatchConfig, on_window: Callable[[dict[str, Any]], None], board: Board | None = None,
        on_attached: Callable[[targets.Target], None] | None = None) -> Outcome:
    t = targets.resolve(cfg.pid, cfg.port, cfg.cgroup)
    if targets.is_self(t):
        raise InputError("watch: that is netprof itself; give the server's pid")
    stop = _Stop()
    with watch_lock(t.pid), _signals(stop):
        stats_fd = progstats.enable()
        probes = WatchProbes(attached=False, routes=cfg.routes)
        try:
            probes.target(t.pid, t.also)
            probes.attach()
            if on_attached:
                on_attached(t)
            return _loop(cfg, t, probes, stop, on_window, board)
        finally:
            probes.close()
            if stats_fd is not None:
                os.close(stats_fd)


def _cost(probes: WatchProbes) -> tuple[int, int]:
    return progstats.run_time(probes.bpf)


def _loop(cfg: WatchConfig, t: targets.Target, probes: WatchProbes, stop: _Stop,
          on_window: Callable[[dict[str, Any]], None], board: Board | None) -> Outcome:
    base: WatchSnapshot = probes.snapshot()
    t0 = time.monotonic()
    cost0 = _cost(probes)
    prev, t_prev, cost_prev = base, t0, cost0
    end = t0 + cfg.duration if cfg.duration is not None else None
    if board:
        board.publish(Published(base, base, 0))
    while True:
        now = time.monotonic()
        wake = t_prev + cfg.interval
        if end is not None:
            wake = min(wake, end)
        if stop.event.wait(max(0.0, wake - now)):
            ended = stop.why
        elif end is not None and time.monotonic() >= end - 1e-3:
            ended = "duration"
        elif not targets.alive(t):
            ended = "process exited"
        else:
            ended = ""
        snap = probes.snapshot()
        t_snap = time.monotonic()
        cost = _cost(probes)
        if board:
            board.publish(Published(base, snap, cost[0] - cost0[0]))
        if t_snap - t_prev > 0.05:  # a window too short to say anything (an early stop) is left out
            on_window(window_figures(prev, snap, t_snap - t_prev, (cost[0] - cost_prev[0], cost[1] - cost_prev[1])))
        prev, t_prev, cost_prev = snap, t_snap, cost
        if ended:
            break
    figures = window_figures(base, prev, t_prev - t0, (cost_prev[0] - cost0[0], cost_prev[1] - cost0[1]))
    return Outcome(t, figures, ended)
