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

`perf inject --jit` writes one jitted-PID-N.so per Python function beside the jitdump it reads, and
CPython's jitdump lives in /tmp, where a link planted at such a name would be followed by root. So
the mixed view copies the dump into its private work directory and runs `perf inject` and `perf
script` in a mount namespace of their own in which that directory is /tmp (`private_tmp_argv`).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

from netprof.flamegraphs import jitdump
from netprof.flamegraphs.fold import fold_perf_script, write_folded
from netprof.profiler.core import procs
from netprof.profiler.core.procs import ManagedProcess, spawn

MIXED_MAX_HZ = 99          # DWARF samples are ~16 KiB each; 99 Hz keeps perf.data and unwinding small
DWARF_STACK_BYTES = 16384  # enough for Python → libc → syscall entry on these backends
SCRIPT_TIMEOUT = 120.0


def perf_binary() -> str | None:
    return shutil.which("perf")


def private_tmp_argv(private: str, argv: list[str]) -> list[str] | None:
    """`argv` run in a new mount namespace where the directory `private` is mounted on /tmp; None
    when util-linux's `unshare`/`mount` are missing.

    Also a new pid namespace (with its own /proc): perf opens a live target's jitdump inside the
    target's mount namespace (/proc/PID/ns/mnt), i.e. in the real /tmp; when the pid is not visible
    perf stays in ours."""
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    if not unshare or not mount:
        return None
    return [unshare, "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--mount-proc",
            "--", "/bin/sh", "-c", f'{mount} --bind "$0" /tmp && exec "$@"', private, *argv]


class PerfRecorder:
    """One `perf record` of the target pids for `duration` seconds, then folded into a file."""

    def __init__(self, pids: list[int], duration: float, workdir: str, *, rate_hz: int, mixed: bool = False,
                 cpus=None) -> None:
        self.pids = pids
        self.duration = duration
        self.mixed = mixed
        self.rate_hz = min(rate_hz, MIXED_MAX_HZ) if mixed else rate_hz
        self.cpus = cpus
        self.workdir = workdir
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
        data, private = self.data, False
        try:
            if self.mixed:
                data, private = self._inject_jit(notes)
            argv = [perf_binary() or "perf", "script", "-i", self._seen_as(data, private), "--no-inline",
                    "-F", "comm,tid,period,ip,sym,dso"]
            seen = private_tmp_argv(self.workdir, argv) if private else argv
            assert seen is not None  # private: _inject_jit() found unshare and mount
            script = procs.run(seen, timeout=SCRIPT_TIMEOUT, errors="replace")
            if script.returncode != 0:
                notes.append(f"{view}: perf script failed: {script.stderr.strip()[-300:]}")
                return 0
            stacks = fold_perf_script(script.stdout.splitlines())
        except subprocess.TimeoutExpired:
            notes.append(f"{view}: perf script/inject took over {SCRIPT_TIMEOUT:.0f}s; view skipped")
            return 0
        finally:
            # perf.data files are scratch (DWARF ones reach tens of MiB); the folded file is the artifact.
            # The mixed view's jitdump copies and the ELF files `perf inject --jit` wrote are scratch too.
            scratch = glob.glob(os.path.join(self.workdir, "jit*-*.*")) if self.mixed else []
            for path in {self.data, data, *scratch}:
                _unlink(path)
        n = write_folded(stacks, folded_path)
        if self.mixed and not any("_[j]" in s for s in stacks):
            notes.append("mixed: no Python (py::) frames; run the backend on CPython >= 3.12 with -X perf_jit "
                         "(e.g. pyenv 3.13) to see Python frames joined to kernel frames")
        if n == 0:
            notes.append(f"{view}: perf recorded no samples of pids {self.pids} (idle backend?)")
        return n

    def _seen_as(self, path: str, private: bool) -> str:
        """How a file of the work dir is named inside the private-/tmp namespace (or outside it)."""
        return os.path.join("/tmp", os.path.relpath(path, self.workdir)) if private else path

    def _inject_jit(self, notes: list[str]) -> tuple[str, bool]:
        """(perf data to read, whether to read it inside the private /tmp): the jit-injected data when
        `perf inject --jit` worked, else the plain recording."""
        for pid in self.pids:
            try:
                jitdump.copy_dump(pid, self.workdir)
            except jitdump.UnsafeFileError as e:
                notes.append(f"mixed: {e}; stacks without Python frames")
                return self.data, False
            except (OSError, ValueError, subprocess.SubprocessError) as e:
                notes.append(f"mixed: could not complete {jitdump.dump_path(pid)} ({e}); recently compiled "
                             "Python functions may show as [perf-PID.map]")
        out = self.data + ".jit"
        argv = private_tmp_argv(self.workdir, [perf_binary() or "perf", "inject", "--jit",
                                               "-i", self._seen_as(self.data, True), "-o", self._seen_as(out, True)])
        if argv is None:
            notes.append("mixed: util-linux `unshare`/`mount` are needed to run perf inject with a private /tmp; "
                         "stacks without jit symbols")
            return self.data, False
        inj = procs.run(argv, timeout=SCRIPT_TIMEOUT)
        if inj.returncode != 0:
            notes.append(f"mixed: perf inject --jit failed ({inj.stderr.strip()[-200:]}); stacks without jit symbols")
            return self.data, False
        return out, True


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
