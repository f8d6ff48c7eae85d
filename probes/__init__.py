"""netprof.probes — BPF probes on a backend process tree, plus /proc figures for the same window.

    with CountingProbes() as probes:            # compiles probes/counting/counting.bpf.c once
        probes.target(backend_pid)
        a = probes.snapshot(); ...; b = probes.snapshot()
        d = delta(a, b)                          # ProbeDelta: syscalls, switches, on-CPU time
                                                 # (+ per-syscall times with syscall_time=True)

    with SockWaitProbes() as sw:                 # probes/sockwait/sockwait.bpf.c: socket queue wait vs handler
        sw.target(backend_pid)
        a = sw.snapshot(); ...; b = sw.snapshot()
        w = sockwait_delta(a, b)                 # SockWaitDelta: wait/handler/server (WaitDist), per_conn

`CountingProbes(attached=False)` compiles without attaching; attach()/detach() then switch the
counting on and off per window (milliseconds, no recompile; counters stand still while detached).

Each of the two is an instrument (instrument.py: the protocol a run drives; registry.py: the list), one
folder with its BPF C, its Python and its row shaping (and, for sockwait and breakdown, its rules and
report section: registry.parts).

Nothing needs bcc until a probe set is created, so `check_available()`, `proc_cpu_times()` and
`per_message_notation()` work everywhere.
"""

from typing import Any

from netprof.profiler.core import lazy

# Where each name lives. Imported on first use (PEP 562), so that `netprof.probes.base` alone is light: the
# command starts compiling the counting set (profiler/entry.py) before pandas, which the row shaping needs,
# is imported beside it.
_WHERE = {
    "ProbeError": ".base", "syscall_name": ".base", "syscall_number": ".base",
    "CountingProbes": ".counting", "ProbeDelta": ".counting", "Snapshot": ".counting", "check_available": ".counting",
    "delta": ".counting", "per_message_notation": ".counting",
    "proc_cpu_times": ".proc", "proc_delta": ".proc",
    "ConnWait": ".sockwait", "SockWaitDelta": ".sockwait", "SockWaitProbes": ".sockwait",
    "SockWaitSnapshot": ".sockwait", "WaitDist": ".sockwait", "sockwait_delta": ".sockwait",
    "DEFAULT_SYSCALLS": ".stacks", "StackProbes": ".stacks",
}
__all__ = list(_WHERE)
_LAZY = {name: (module, name) for name, module in _WHERE.items()}


def __getattr__(name: str) -> Any:
    return lazy.attr(__name__, _LAZY, name)
