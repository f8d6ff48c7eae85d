"""/proc figures for a whole process tree (the target, its threads, its live descendants).

utime/stime: the kernel scales the exact runtime by tick samples (cputime_adjust), so user+sys is
exact but the split is statistical. Faults and times of reaped children are included (c* fields);
context switches, migrations and schedstat on-CPU time are per live thread, so threads and
children that already exited drop out of those.
"""

from __future__ import annotations

import os

_TCK = os.sysconf("SC_CLK_TCK")


def _tree(pid: int) -> list[int]:
    import psutil

    try:
        return [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return [pid]


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # the thread or process is gone
        return ""


def _status_count(status: str, name: str) -> int:
    """A count line of /proc/.../status ("\nvoluntary_ctxt_switches:\t12\n"), found without splitting the
    file into lines: read for every thread at every mark, where its ~50 lines' split was most of the cost."""
    i = status.find(name)
    if i < 0:
        return 0
    i += len(name)
    end = status.find("\n", i)
    return int(status[i:end if end >= 0 else None])  # the last line: nonvoluntary_ctxt_switches


def proc_cpu_times(pid: int, *, migrations: bool = False) -> dict:
    """{'user_s','sys_s','minflt','majflt','vol_ctx','invol_ctx','oncpu_s'} summed over the tree, and with
    `migrations` each thread's se.nr_migrations too ('migrations'). Read at both ends of a window and subtract.
    A run reads this at its marks, the host's CPU taken from the server it measures: migrations are the counting
    probes' (per-message rows), and the thread's `sched` file, ~10 µs to read and more to parse, is left to the
    test that checks the probes against it."""
    out = dict(user_s=0.0, sys_s=0.0, minflt=0, majflt=0, vol_ctx=0, invol_ctx=0, oncpu_s=0.0)
    if migrations:
        out["migrations"] = 0
    for p in _tree(pid):
        stat = _read(f"/proc/{p}/stat")
        if not stat:
            continue
        f = stat.rsplit(")", 1)[1].split()  # f[0] is field 3 (state)
        out["minflt"] += int(f[7]) + int(f[8])
        out["majflt"] += int(f[9]) + int(f[10])
        out["user_s"] += (int(f[11]) + int(f[13])) / _TCK
        out["sys_s"] += (int(f[12]) + int(f[14])) / _TCK
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            base = f"/proc/{p}/task/{t}"
            if status := _read(f"{base}/status"):
                out["vol_ctx"] += _status_count(status, "\nvoluntary_ctxt_switches:")
                out["invol_ctx"] += _status_count(status, "\nnonvoluntary_ctxt_switches:")
            sched = _read(f"{base}/schedstat").split()
            if sched:
                out["oncpu_s"] += int(sched[0]) * 1e-9
            if migrations:
                for line in _read(f"{base}/sched").splitlines():
                    if line.startswith("se.nr_migrations"):
                        out["migrations"] += int(line.split()[-1])
    return out


def proc_delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in a}
