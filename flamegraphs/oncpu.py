"""On-CPU stacks with `perf record` on the cpu-clock software event (no hardware PMU here).

Why perf and not a BCC perf_event program (bcc's profile.py): both sample the same event and unwind
with frame pointers, and both cost the backend about the same at 499 Hz (bench/sampling_overhead.py
measures it); perf needs no compile step (BCC's clang takes ~1-2 s), symbolises kernel + native
frames more robustly (it resolves against the mappings recorded at sample time), and the same code
path also gives the DWARF "mixed" view that BCC cannot produce.

Two modes:
- "oncpu": `perf record -F RATE -e cpu-clock -g` (frame pointers: cheap, kernel + native user frames;
  Python frames are not visible through an interpreter built without frame pointers).
- "mixed": `-k 1 --call-graph dwarf` + `perf inject --jit`: when the backend runs CPython >= 3.12
  with `-X perf_jit`, the jitdump turns interpreter frames into `py::function` frames, so one stack
  goes from Python code through libc into the kernel. DWARF copies 16 KiB of user stack per sample,
  so this mode runs at a lower rate (MIXED_MAX_HZ).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

from netprof.flamegraphs import jitdump
from netprof.flamegraphs.fold import fold_perf_script, write_folded
from netprof.profiler.procs import ManagedProcess, spawn

MIXED_MAX_HZ = 99          # DWARF samples are ~16 KiB each; 99 Hz keeps perf.data and unwinding small
DWARF_STACK_BYTES = 16384  # enough for Python → libc → syscall entry on these backends
SCRIPT_TIMEOUT = 120.0


def perf_binary() -> str | None:
    return shutil.which("perf")


class PerfRecorder:
    """One `perf record` of the target pids for `duration` seconds, then folded into a file."""

    def __init__(self, pids: list[int], duration: float, workdir: str, *, rate_hz: int, mixed: bool = False,
                 cpus=None) -> None:
        self.pids = pids
        self.duration = duration
        self.mixed = mixed
        self.rate_hz = min(rate_hz, MIXED_MAX_HZ) if mixed else rate_hz
        self.cpus = cpus
        self.data = os.path.join(workdir, ("mixed" if mixed else "oncpu") + ".perf.data")
        self.proc: ManagedProcess | None = None

    def argv(self) -> list[str]:
        perf = perf_binary() or "perf"
        argv = [perf, "record", "-q", "-F", str(self.rate_hz), "-e", "cpu-clock",
                "-p", ",".join(map(str, self.pids)), "-o", self.data]
        if self.mixed:
            # -k 1 (CLOCK_MONOTONIC) is what `perf inject --jit` needs to match jitdump records.
            argv += ["-k", "1", "--call-graph", f"dwarf,{DWARF_STACK_BYTES}"]
        else:
            argv += ["-g"]
        # --no-buildid: skip the build-id pass at the end (post-processing we don't use, and it would
        # copy every DSO and jitted-*.so into ~/.debug).
        argv += ["--no-buildid"]
        # With -p, the command only sets the duration: perf stops when `sleep` exits.
        return argv + ["--", "sleep", f"{self.duration:g}"]

    def start(self) -> None:
        self.proc = spawn("perf-mixed" if self.mixed else "perf-record", self.argv(),
                          cpus=self.cpus, capture_stdout=False)

    def stop(self) -> None:
        """Idempotent cleanup, also on error paths: the process and its stderr file."""
        if self.proc is not None:
            self.proc.discard()

    def finish(self, folded_path: str, notes: list[str]) -> int:
        """Wait for perf, fold its samples into `folded_path`; returns the sample count (0 = failed)."""
        assert self.proc is not None
        view = "mixed" if self.mixed else "oncpu"
        try:
            self.proc.popen.wait(timeout=self.duration + 60)
        except subprocess.TimeoutExpired:
            notes.append(f"{view}: perf record did not finish in time; killed")
        rc, err = self.proc.discard()
        # perf re-raises its workload's fate: when the backend exits early, perf stops `sleep` and dies by
        # the same SIGTERM, yet its perf.data is complete. So judge by the data, not the exit code.
        if not os.path.exists(self.data) or os.path.getsize(self.data) == 0:
            notes.append(f"{view}: perf record failed (exit {rc}): {err or 'no stderr'}")
            return 0
        data = self.data
        try:
            if self.mixed:
                data = self._inject_jit(notes)
            script = subprocess.run(
                [perf_binary() or "perf", "script", "-i", data, "--no-inline", "-F", "comm,tid,period,ip,sym,dso"],
                capture_output=True, text=True, errors="replace", timeout=SCRIPT_TIMEOUT,
            )
            if script.returncode != 0:
                notes.append(f"{view}: perf script failed: {script.stderr.strip()[-300:]}")
                return 0
            stacks = fold_perf_script(script.stdout.splitlines())
        except subprocess.TimeoutExpired:
            notes.append(f"{view}: perf script/inject took over {SCRIPT_TIMEOUT:.0f}s; view skipped")
            return 0
        finally:
            # perf.data files are scratch (DWARF ones reach tens of MiB); the folded file is the artifact.
            # `perf inject --jit` writes one ELF per Python function next to the jitdump, in /tmp.
            jitted = [p for pid in self.pids for p in glob.glob(f"/tmp/jitted-{pid}-*.so")] if self.mixed else []
            for path in {self.data, data, *jitted}:
                _unlink(path)
        n = write_folded(stacks, folded_path)
        if self.mixed and not any("_[j]" in s for s in stacks):
            notes.append("mixed: no Python (py::) frames; run the backend on CPython >= 3.12 with -X perf_jit "
                         "(e.g. pyenv 3.13) to see Python frames joined to kernel frames")
        if n == 0:
            notes.append(f"{view}: perf recorded no samples of pids {self.pids} (idle backend?)")
        return n

    def _inject_jit(self, notes: list[str]) -> str:
        for pid in self.pids:
            try:
                jitdump.flush_pending(pid)
            except (OSError, ValueError, subprocess.SubprocessError) as e:
                notes.append(f"mixed: could not complete {jitdump.dump_path(pid)} ({e}); recently compiled "
                             "Python functions may show as [perf-PID.map]")
        out = self.data + ".jit"
        inj = subprocess.run([perf_binary() or "perf", "inject", "--jit", "-i", self.data, "-o", out],
                             capture_output=True, text=True, timeout=SCRIPT_TIMEOUT,
                             cwd=os.path.dirname(self.data))
        if inj.returncode != 0:
            notes.append(f"mixed: perf inject --jit failed ({inj.stderr.strip()[-200:]}); stacks without jit symbols")
            return self.data
        return out


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
