"""What the counting set costs per syscall on this host, measured in about a second.

The cost of a sys_enter hook depends on the host (mitigations, hypervisor: FACTS.md saw +43 ns on one
machine of this kind and +147 ns on another), so `netprof doctor` and every probed run measure it
rather than quote a benchmark. A child process makes N getppid() calls; its CPU time per call is read
with the probes detached, attached and watching it (target), and attached but watching another process
(bystander: what every other task on the machine pays). Medians of a few repetitions; the Python loop's
own cost is the same in all three and cancels in the differences.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

CALLS = 300_000
REPEATS = 3
_CHILD = ("import os, resource, sys\n"
          "sys.stdin.readline()\n"  # wait until the probes target us
          "cpu = lambda r: r.ru_utime + r.ru_stime\n"  # rusage: microsecond resolution (os.times: 10 ms)
          "t0 = cpu(resource.getrusage(resource.RUSAGE_SELF))\n"
          f"for _ in range({CALLS}): os.getppid()\n"
          "print(cpu(resource.getrusage(resource.RUSAGE_SELF)) - t0, flush=True)\n")


def _cpu_per_call(probes, target_child: bool) -> float:
    """CPU seconds per getppid() of one child run; `probes` (attached or not) re-targeted first."""
    child = subprocess.Popen([sys.executable, "-I", "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd="/")
    try:
        if probes is not None:
            probes.target(child.pid if target_child else os.getpid())
        out, _ = child.communicate("go\n", timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return float(out.strip()) / CALLS


def measure(probes) -> dict:
    """{'bare_ns', 'added_target_ns', 'added_bystander_ns'} for a CountingProbes set (left detached)."""
    def median(attached: bool, target: bool) -> float:
        if attached:
            probes.attach()
        else:
            probes.detach()
        return statistics.median(_cpu_per_call(probes, target) for _ in range(REPEATS))

    try:
        bare = median(False, True)
        target = median(True, True)
        bystander = median(True, False)
    finally:
        probes.detach()
    return {"bare_ns": 1e9 * bare, "added_target_ns": 1e9 * (target - bare),
            "added_bystander_ns": 1e9 * (bystander - bare), "calls": CALLS, "repeats": REPEATS}
