"""What every probe set shares: availability checks, errors, loading a `*.bpf.c` file, syscall names."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRACEFS = "/sys/kernel/tracing"
# x86_64 syscall numbers are below 512; the last slot collects anything out of range.
NR_SLOTS = 512
OTHER_SLOT = NR_SLOTS - 1
NO_PROBES = "or run with --no-probes"


class ProbeError(RuntimeError):
    """Probes cannot be loaded or attached; the message says how to fix it."""


def _tracefs_ready() -> bool:
    return os.path.isdir(os.path.join(TRACEFS, "events", "sched"))


def _prerequisites() -> str | None:
    if os.geteuid() != 0:
        return f"BPF probes need root (or CAP_BPF+CAP_PERFMON): run as root, {NO_PROBES}"
    try:
        import bcc  # noqa: F401
    except Exception as e:  # ImportError, or libbcc.so missing
        return (f"BCC's `bcc` module is not importable ({e}): run `make setup` (Debian python3-bpfcc) "
                f"and use .venv/bin/python, {NO_PROBES}")
    build = f"/lib/modules/{os.uname().release}/build/include"
    if not os.path.isdir(build):
        return f"no kernel headers for BCC at {build}: run `make setup` (links Debian's headers), {NO_PROBES}"
    return None


_checked: list[str | None] = []


def check_available() -> str | None:
    """None if the probes can run here, else one line: what is missing and the fix.

    Checks the prerequisites, mounts tracefs if needed, then really compiles and attaches the
    counting set once per process (~0.5 s) so header or verifier trouble shows up here.
    """
    why = _prerequisites()
    if why:
        return why
    if not _checked:
        try:
            from .counting import CountingProbes

            CountingProbes(track_children=False).close()
            _checked.append(None)
        except ProbeError as e:
            _checked.append(str(e))
    return _checked[0]


def ensure_tracefs() -> None:
    """Mount tracefs when it is missing (BCC's tracepoints and perf's need it); root only."""
    if _tracefs_ready() or os.path.isdir("/sys/kernel/debug/tracing/events/sched"):
        return
    r = subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], capture_output=True, text=True)
    if r.returncode != 0 or not _tracefs_ready():
        raise ProbeError(f"tracefs is not mounted and mounting it failed ({r.stderr.strip()}): "
                         f"`mount -t tracefs nodev {TRACEFS}` as root, {NO_PROBES}")


class LoadedProgram:
    """Lifecycle shared by the probe sets: `self.bpf` is detached on close(), on leaving a `with`
    block (also on errors and Ctrl-C) and, last resort, when the object is collected."""

    bpf = None

    def close(self) -> None:
        bpf, self.bpf = self.bpf, None
        if bpf is not None:
            bpf.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: BCC's own atexit cleanup has run
            pass


def load(src: str, cflags: list[str]):
    """Compile and load probes/<src> (auto-attaches its *_PROBE programs). Raises ProbeError."""
    why = _prerequisites()
    if why:
        raise ProbeError(why)
    ensure_tracefs()
    from bcc import BPF

    try:
        return BPF(src_file=str(HERE / src).encode(), cflags=[f"-DNR_SLOTS={NR_SLOTS}", *cflags])
    except Exception as e:
        raise ProbeError(f"cannot load {src}: {str(e).splitlines()[0] if str(e) else type(e).__name__} "
                         f"(kernel headers usable by BCC? run `make setup`; {NO_PROBES})") from e


_NAMES: dict[int, str] = {}


UNISTD = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"


def _table() -> dict[int, str]:
    """The one syscall table: BCC's bcc.syscall (x86_64). Its table stops around Linux 5.x, so
    numbers it lacks (epoll_pwait2 = 441, io_uring_*, …) are filled from the system's
    asm/unistd_64.h (Debian linux-libc-dev) when that file is there."""
    if not _NAMES:
        from bcc.syscall import syscalls

        try:
            with open(UNISTD) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3 and parts[0] == "#define" and parts[1].startswith("__NR_"):
                        _NAMES[int(parts[2])] = parts[1][5:]
        except (OSError, ValueError):
            pass
        _NAMES.update({nr: raw.decode() for nr, raw in syscalls.items()})
    return _NAMES


def syscall_name(nr: int) -> str:
    """Name of an x86_64 syscall number; `other` for the overflow slot, `syscall_<nr>` if unknown."""
    if nr == OTHER_SLOT:
        return "other"
    return _table().get(nr, f"syscall_{nr}")


def syscall_number(name: str) -> int:
    for nr, n in _table().items():
        if n == name:
            return nr
    raise ValueError(f"unknown syscall {name!r} (names come from bcc.syscall)")
