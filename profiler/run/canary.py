"""The processes that watch a run's host beside its cells: the speed canary (core/canary.py) on the backend's CPU,
and a loader that keeps each run's events, whose `t` (the loader's monotonic clock, the canary's too) bound the
spans of a cell's headline (model/hostspeed.py). `netprof ab` judges pairs by them, `netprof knee` its tries."""

from __future__ import annotations

import signal
import sys
import threading
import time

import numpy as np

from netprof.profiler.core.procs import LineTimeout, ManagedProcess, ProcessError, ProcessGroup
from netprof.profiler.model import hostspeed
from netprof.profiler.run.loader_client import Loader

CANARY_START_S = 30.0  # how long the canary may take to give its first sample (an interpreter starting)
CANARY_WAIT_S = 1.0  # how long to wait after a cell for the canary's samples of its last span


class Canary:
    """`python -I -m netprof.profiler.core.canary` on the backend's CPU for the whole run (through the run's
    ProcessGroup); a thread keeps its samples (monotonic s, loop ns) as they come."""

    def __init__(self, proc: ManagedProcess) -> None:
        self.proc = proc
        self._samples: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="canary", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, group: ProcessGroup, cpu: int, seconds: float) -> Canary:
        argv = [sys.executable, "-I", "-m", "netprof.profiler.core.canary", "--cpu", str(cpu),
                "--seconds", f"{seconds:.0f}", "--every", f"{hostspeed.SAMPLE_S:g}"]
        return cls(group.spawn("canary", argv, cpus=[cpu]))

    def _read(self) -> None:
        while True:
            try:
                line = self.proc.readline(1.0)
            except LineTimeout:
                continue
            except (OSError, ValueError):  # the pipe closed under us at the end of the run
                return
            if line is None:
                return
            try:
                t, ns = line.split()
                sample = (float(t), float(ns))
            except ValueError:
                continue
            with self._lock:
                self._samples.append(sample)

    def samples(self, until: float, wait: float = CANARY_WAIT_S) -> np.ndarray:
        """Every sample so far, once one at or after `until` (monotonic) has come or `wait` has passed."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                done = bool(self._samples) and self._samples[-1][0] >= until
                if done or time.monotonic() >= deadline or not self.proc.alive():
                    return np.array(self._samples, dtype=float).reshape(-1, 2)
            time.sleep(0.02)

    def wait_started(self, timeout: float = CANARY_START_S) -> None:
        """Until its first sample: its own start-up (an interpreter on the backend's CPU) must not fall in a
        measured cell. ProcessError when it gives none in time."""
        deadline = time.monotonic() + timeout
        while not self.count():
            if not self.proc.alive() or time.monotonic() > deadline:
                raise ProcessError(f"the speed canary gave no sample within {timeout:g} s"
                                   + (f": {tail}" if (tail := self.proc.stderr_tail()) else ""))
            time.sleep(0.05)

    def close(self) -> None:
        """Stop it and let the reader see its end of file (before the group closes the pipe under it)."""
        self.proc.signal_group(signal.SIGTERM)
        self._thread.join(timeout=5)

    def count(self) -> int:
        with self._lock:
            return len(self._samples)


class RecordingLoader(Loader):
    """The run's loader, keeping the last run's events: their `t` (the loader's monotonic clock, the
    canary's too) bound the spans a cell's headline came from."""

    events: list[dict]

    def run(self, req, on_event=None, timeout=None):
        self.events = []

        def record(evt: dict) -> None:
            self.events.append(evt)
            if on_event is not None:
                on_event(evt)

        return super().run(req, on_event=record, timeout=timeout)
