"""/proc figures for a whole process tree (the target, its threads, its live descendants).

utime/stime: the kernel scales the exact runtime by tick samples (cputime_adjust), so user+sys is
exact but the split is statistical. Faults and times of reaped children are included (c* fields);
context switches, migrations and schedstat's three figures (on-CPU time, time runnable but waiting for a
CPU, turns on a CPU) are per live thread, so threads and children that already exited drop out of those.
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


# Per-thread counts (/proc/PID/task/TID): proc_delta subtracts them thread by thread, over the threads alive at the
# second read (a thread born between the reads counts from 0). A thread that exited between them drops out with
# what it did before; subtracting the sums instead counted its earlier total against the window (a thread per
# connection exits as the loader closes its connections at the window's end: the sums went negative).
PER_THREAD = ("oncpu_s", "runq_s", "turns", "vol_ctx", "invol_ctx")


def proc_cpu_times(pid: int, *, migrations: bool = False) -> dict:
    """{'user_s','sys_s','minflt','majflt','vol_ctx','invol_ctx','oncpu_s','runq_s','turns'} summed over the tree
    (schedstat: ns on a CPU, ns runnable and waiting for one, turns on one), each thread's own in 'per_thread'
    ({tid: (those of PER_THREAD, its state "R"/"S"/...)}), and with `migrations` each thread's se.nr_migrations
    too ('migrations'). Read at both ends of a window and subtract (proc_delta).
    A run reads this at its marks, the host's CPU taken from the server it measures: migrations are the counting
    probes' (per-message rows), and the thread's `sched` file, ~10 µs to read and more to parse, is left to the
    test that checks the probes against it."""
    out: dict = dict(user_s=0.0, sys_s=0.0, minflt=0, majflt=0, vol_ctx=0, invol_ctx=0, oncpu_s=0.0, runq_s=0.0,
                     turns=0)
    if migrations:
        out["migrations"] = 0
    per_thread: dict[int, tuple] = {}
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
            status = _read(f"{base}/status")
            sched = _read(f"{base}/schedstat").split()
            if not status or not sched:  # gone meanwhile
                continue
            i = status.find("\nState:\t")
            mine = (int(sched[0]) * 1e-9, int(sched[1]) * 1e-9, int(sched[2]),  # on a CPU, waiting for one, turns
                    _status_count(status, "\nvoluntary_ctxt_switches:"),
                    _status_count(status, "\nnonvoluntary_ctxt_switches:"), status[i + 8:i + 9] if i >= 0 else "")
            per_thread[int(t)] = mine
            for k, v in zip(PER_THREAD, mine):
                out[k] += v
            if migrations:
                for line in _read(f"{base}/sched").splitlines():
                    if line.startswith("se.nr_migrations"):
                        out["migrations"] += int(line.split()[-1])
    out["per_thread"] = per_thread
    return out


def proc_delta(a: dict, b: dict) -> dict:
    """b − a: the per-thread counts (PER_THREAD) thread by thread, with 'threads_exited' between the reads (their
    counts since the first are missing from those), the others as totals (user_s and sys_s: the whole process,
    exited threads included, in clock ticks)."""
    out = {k: b[k] - a[k] for k in a if k != "per_thread"}
    first, last = a.get("per_thread"), b.get("per_thread")
    if first is not None and last is not None:
        zero = (0,) * len(PER_THREAD)
        for j, k in enumerate(PER_THREAD):
            out[k] = sum(now[j] - first.get(tid, zero)[j] for tid, now in last.items())
        out["threads_exited"] = sum(1 for tid in first if tid not in last)
    return out


def turns_between(a: dict, b: dict) -> tuple[list[int], int] | None:
    """Between two reads: the turns on a CPU of each thread alive at both, and how many of them had none and were
    runnable at the second (waiting for a CPU all the time since they last ran, not asleep); None without them."""
    first, last = a.get("per_thread"), b.get("per_thread")
    if first is None or last is None:
        return None
    turns, waiting = [], 0
    at = PER_THREAD.index("turns")
    for tid, now in last.items():
        if tid in first:
            n = now[at] - first[tid][at]
            turns.append(n)
            waiting += n == 0 and now[-1] == "R"
    return turns, waiting
