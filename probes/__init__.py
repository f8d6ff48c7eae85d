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
folder with its BPF C, its Python and its row shaping.

Nothing needs bcc until a probe set is created, so `check_available()`, `proc_cpu_times()` and
`per_message_notation()` work everywhere.
"""

from .base import ProbeError, syscall_name, syscall_number
from .counting import CountingProbes, ProbeDelta, Snapshot, check_available, delta, per_message_notation
from .proc import proc_cpu_times, proc_delta
from .sockwait import ConnWait, SockWaitDelta, SockWaitProbes, SockWaitSnapshot, WaitDist, sockwait_delta
from .stacks import DEFAULT_SYSCALLS, StackProbes

__all__ = [
    "ProbeError", "check_available", "syscall_name", "syscall_number",
    "CountingProbes", "ProbeDelta", "Snapshot", "delta", "per_message_notation",
    "proc_cpu_times", "proc_delta", "StackProbes", "DEFAULT_SYSCALLS",
    "SockWaitProbes", "SockWaitSnapshot", "SockWaitDelta", "WaitDist", "ConnWait", "sockwait_delta",
]
