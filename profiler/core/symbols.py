"""User-space addresses to names (BCC's "name [module]"), resolved in a forked child.

Why a child: libbcc 0.26's symbolizer for a process (`BPF.sym(addr, pid)`, which builds a ProcSyms for
the pid) has been seen closing a descriptor it never opened. Traced with strace in a `--stacks` run: the
thread that symbolized the first server's stacks called close(10) right after probing for
/tmp/perf-PID.map, where fd 10 was one of the stack set's BPF programs, so BCC's own cleanup of that set
later failed with EBADF (CI failed on it twice). Whatever number it hits, a stray close in our process
can take any descriptor of a run (a program, a pipe, a results file); in a child it takes only the
child's copy. Kernel symbols (`BPF.ksym`) stay in the caller: they never build a ProcSyms.

The child is forked (not spawned): it inherits BCC already imported, and does nothing but look the
addresses up and pickle the names down a pipe, as plotset's drawing children do.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
from collections.abc import Iterable, Mapping

from netprof.profiler.core import procs

TIMEOUT_S = 60.0  # a child that has not answered by then is killed, and its addresses stay unnamed
UNKNOWN = "[unknown]"  # what BCC itself says of an address it cannot name


def _lookup(want: dict[int, list[int]]) -> dict[tuple[int, int], str]:
    from bcc import BPF  # the caller loaded BCC already: this costs nothing

    return {(tgid, a): BPF.sym(a, tgid, show_module=True).decode(errors="replace")
            for tgid, addrs in want.items() for a in addrs}


def user_symbols(addrs: Mapping[int, Iterable[int]], tries: int = 2) -> dict[tuple[int, int], str]:
    """{(tgid, addr): "name [module]"} for each process's addresses (the processes must still run). A
    child that fails is tried again (`tries` in all: the stray close may hit the child's own pipe); an
    address no child could name (failed, or out of time) is missing: callers say UNKNOWN."""
    want = {tgid: sorted(set(a)) for tgid, a in addrs.items()}
    if not any(want.values()):
        return {}
    for _ in range(tries):
        if (names := _in_child(want)) is not None:
            return names
    return {}


def _in_child(want: dict[int, list[int]]) -> dict[tuple[int, int], str] | None:
    """_lookup(want) in a forked child; None when it failed or ran out of time."""

    def child(w: int) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        names = _lookup(want)
        with os.fdopen(w, "wb") as f:
            pickle.dump(names, f, protocol=pickle.HIGHEST_PROTOCOL)

    forked = procs.fork_child(child)
    if forked is None:
        return None
    pid, r = forked
    data, finished = bytearray(), False
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while (left := deadline - time.monotonic()) > 0 and select.select([r], [], [], left)[0]:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                finished = True
                break
            data += chunk
    finally:
        os.close(r)
        if not finished:  # out of time, or interrupted: the child goes now
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if not finished or os.waitstatus_to_exitcode(status) != 0 or not data:
        return None
    return pickle.loads(bytes(data))  # our own child's answer
