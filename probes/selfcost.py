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
from collections.abc import Callable

CALLS = 300_000
REPEATS = 3
_CHILD = ("import os, resource, sys\n"
          "sys.stdin.readline()\n"  # wait until the probes target us
          "cpu = lambda r: r.ru_utime + r.ru_stime\n"  # rusage: microsecond resolution (os.times: 10 ms)
          "t0 = cpu(resource.getrusage(resource.RUSAGE_SELF))\n"
          f"for _ in range({CALLS}): os.getppid()\n"
          "print(cpu(resource.getrusage(resource.RUSAGE_SELF)) - t0, flush=True)\n")


def child_cpu(probes, source: str, target_child: bool, per: int) -> float:
    """CPU seconds per operation of one run of `source` in a child (it waits for a line on stdin,
    does `per` operations and prints its CPU seconds); `probes` (attached or not) re-targeted first,
    at the child or (bystander) at us."""
    child = subprocess.Popen([sys.executable, "-I", "-c", source], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd="/")
    try:
        if probes is not None:
            probes.target(child.pid if target_child else os.getpid())
        out, _ = child.communicate("go\n", timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return float(out.strip()) / per


def _cpu_per_call(probes, target_child: bool) -> float:
    """CPU seconds per getppid() of one child run."""
    return child_cpu(probes, _CHILD, target_child, CALLS)


def three_medians(probes, once: Callable[[bool], float], repeats: int) -> tuple[float, float, float]:
    """`once(watched)` with the set detached, attached and watching the measuring process, and attached
    but watching another process (bystander): the three figures every probe set's self-measurement
    takes. Returns the detached run's median and, for the other two, that median plus the median of
    their differences to the detached run of the same repeat. Each repeat runs all three, each first in
    turn: this host's speed moves in regimes of seconds (bench/host_regimes.py), which blocks of one
    variant each would put into the differences (a sockwait cost once came out at -305 ns).
    Leaves the set detached."""
    variants = [(False, True), (True, True), (True, False)]  # (attached, watched): bare, watched, bystander
    got: dict[tuple[bool, bool], list[float]] = {v: [] for v in variants}
    try:
        for i in range(repeats):
            for attached, watched in variants[i % 3:] + variants[:i % 3]:
                if attached:
                    probes.attach()
                else:
                    probes.detach()
                got[(attached, watched)].append(once(watched))
    finally:
        probes.detach()
    bare = got[variants[0]]
    base = statistics.median(bare)

    def paired(v: tuple[bool, bool]) -> float:
        return base + statistics.median(x - b for x, b in zip(got[v], bare))

    return base, paired(variants[1]), paired(variants[2])


def measure(probes) -> dict:
    """{'bare_ns', 'added_target_ns', 'added_bystander_ns'} for a CountingProbes set (left detached)."""
    bare, target, bystander = three_medians(probes, lambda watched: _cpu_per_call(probes, watched), REPEATS)
    return {"bare_ns": 1e9 * bare, "added_target_ns": 1e9 * (target - bare),
            "added_bystander_ns": 1e9 * (bystander - bare), "calls": CALLS, "repeats": REPEATS}
