"""The probes' own cost, counted by the kernel: the CPU time its BPF programs ran, and how many times.

The kernel times every BPF program run while run-time statistics are on. `enable()` turns them on the way
`bpftool prog profile` does, with BPF_ENABLE_STATS: the statistics stay on while the returned descriptor is
open, so they go off when the process exits, even by SIGKILL (the sysctl kernel.bpf_stats_enabled would stay
on). `run_time(bpf)` sums each loaded program's run_time_ns and run_cnt from /proc/self/fdinfo (a tail-called
program's time is its caller's). Timing costs each program run two clock reads (~20–40 ns), which the
figure includes.
"""

from __future__ import annotations

import ctypes
import os

_NR_BPF = 321            # x86_64
_BPF_ENABLE_STATS = 32   # enum bpf_cmd
_BPF_STATS_RUN_TIME = 0


def enable() -> int | None:
    """A descriptor that keeps BPF run-time statistics on until closed; None when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 2)(_BPF_STATS_RUN_TIME, 0)  # union bpf_attr's enable_stats: { __u32 type; }
    fd = libc.syscall(_NR_BPF, _BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd < 0:
        return None
    os.set_inheritable(fd, False)
    return fd


def run_time(bpf) -> tuple[int, int]:
    """(ns, runs) of every program loaded in a BCC object, since each was loaded."""
    ns = runs = 0
    for fn in list(getattr(bpf, "funcs", {}).values()):
        try:
            with open(f"/proc/self/fdinfo/{fn.fd}") as f:
                info = dict(line.split(":\t", 1) for line in f if ":\t" in line)
        except OSError:
            continue
        ns += int(info.get("run_time_ns", "0").strip() or 0)
        runs += int(info.get("run_cnt", "0").strip() or 0)
    return ns, runs
