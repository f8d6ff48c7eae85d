"""Python stacks with py-spy: `py-spy record --format raw` writes folded stacks directly.

Choices (measured in bench/sampling_overhead.py):
- `--nonblocking`: by default py-spy stops the target (ptrace) for every sample; at 499 Hz against a
  ping-pong backend that costs throughput, and the other views run in the same round. Without the
  pause a sample can occasionally catch a half-updated frame chain — a fair trade for a flamegraph.
- no `--native`: it needs the pause (py-spy refuses `--native` with `--nonblocking`), and native +
  kernel frames come from the perf views anyway.
- `--nolineno`: one box per function (not per line), so views of different runs/backends diff cleanly.
- `--full-filenames`: inferno's python palette tells stdlib / site-packages / application code apart
  by path.
- `--subprocesses`: prefork/fork backends serve from children.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter

from netprof.flamegraphs.fold import read_folded, write_folded
from netprof.profiler.core.procs import ManagedProcess, spawn

# --subprocesses puts `process 1234:"argv"` at the root of every stack.
_PROCESS_ROOT = re.compile(r'^process \d+:"[^;]*";')

NONBLOCKING = True


def pyspy_binary() -> str | None:
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("py-spy")


class PySpyRecorder:
    """py-spy writes its raw output into `workdir` (private scratch; default: beside `folded_path`);
    `finish` turns it into `folded_path`."""

    def __init__(self, pid: int, duration: float, folded_path: str, *, rate_hz: int,
                 nonblocking: bool = NONBLOCKING, cpus=None, workdir: str | None = None) -> None:
        self.pid = pid
        self.duration = duration
        self.folded_path = folded_path
        self.raw_path = os.path.join(workdir, "python.raw") if workdir else folded_path + ".raw"
        self.rate_hz = rate_hz
        self.nonblocking = nonblocking
        self.cpus = cpus
        self.proc: ManagedProcess | None = None

    def argv(self) -> list[str]:
        # py-spy takes whole seconds; round up so the window covers at least `duration`.
        secs = max(1, int(-(-self.duration // 1)))
        argv = [pyspy_binary() or "py-spy", "record", "--pid", str(self.pid), "--duration", str(secs),
                "--rate", str(self.rate_hz), "--format", "raw", "--output", self.raw_path,
                "--nolineno", "--full-filenames", "--subprocesses"]
        return argv + (["--nonblocking"] if self.nonblocking else [])

    def start(self) -> None:
        self.proc = spawn("py-spy", self.argv(), cpus=self.cpus, capture_stdout=False)

    def stop(self) -> None:
        """Idempotent cleanup, also on error paths: the process and its stderr file."""
        if self.proc is not None:
            self.proc.discard()

    def finish(self, notes: list[str]) -> int:
        """Wait for py-spy; returns the number of samples in the folded file (0 = failed/empty)."""
        assert self.proc is not None
        try:
            self.proc.popen.wait(timeout=self.duration + 30)
        except subprocess.TimeoutExpired:
            notes.append("python: py-spy did not finish in time; killed")
        rc, err = self.proc.discard()
        if rc != 0 or not os.path.exists(self.raw_path):
            notes.append(f"python: py-spy failed (exit {rc}): {err or 'no stderr'}")
            return 0
        try:
            n = _drop_process_root(self.raw_path, self.folded_path)
        finally:
            os.unlink(self.raw_path)
        if n == 0:
            # py-spy drops idle samples (threads waiting in epoll/recv hold no Python frame on CPU).
            notes.append("python: py-spy saw no active Python stacks (idle, or not a Python process)")
        return n


def _drop_process_root(raw: str, folded: str) -> int:
    """`raw` without py-spy's per-pid root frame → `folded`, so graphs of two runs (different pids)
    diff cleanly and a prefork backend's workers merge into one picture. Returns the sample count."""
    stacks: Counter = Counter()
    for stack, n in read_folded(raw):
        stacks[_PROCESS_ROOT.sub("", stack)] += n
    return write_folded(stacks, folded)
