"""Off-CPU view: where and for how long the backend's threads block (BCC, sched:sched_switch).

The BPF side (offcpu.bpf.c) aggregates in the kernel, so the cost is one map update per context
switch of a target thread, and nothing is copied to user space until the window closes. Folded
stacks are weighted by microseconds off CPU. The first frame under the command name says why the
thread was off CPU: `[sleeping]` (waited for something: epoll_wait, recv, futex), `[uninterruptible]`
(D state) or `[preempted]` (still runnable, the CPU went to someone else — e.g. the loader sharing
the backend's CPU).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from netprof.flamegraphs.fold import INTERP, INTERP_DSO, KERNEL
from netprof.probes.base import LoadedProgram
from netprof.profiler.core.symbols import UNKNOWN, user_symbols

SOURCE = Path(__file__).resolve().parent / "offcpu.bpf.c"

# Tracepoint prev_state encoding (kernel's __trace_sched_switch_state): 0 = running, TASK_REPORT_MAX
# (0x100 on 6.x; 0x80/0x800 on others) when preempted, else the one reported state bit.
_STATE_SLEEP = 0x1
_STATE_DISK = 0x2


def state_frame(state: int) -> str:
    if state & _STATE_SLEEP and state < 0x80:
        return "[sleeping]"
    if state & _STATE_DISK and state < 0x80:
        return "[uninterruptible]"
    if state == 0 or state >= 0x80:
        return "[preempted]"
    return f"[state {state:#x}]"


class OffCpuProbe(LoadedProgram):
    """Compile once (about a second of clang), then open/close windows for any set of tgids.
    Raises netprof.probes.ProbeError when BPF is unusable; close() (or a `with` block) releases it."""

    def __init__(self) -> None:
        self._load(SOURCE, [])
        assert self.bpf is not None  # _load() succeeded
        self.targets = self.bpf[b"targets"]
        self.pids: list[int] = []

    def start(self, pids: list[int]) -> None:
        """Open the window: clear old data, then write the target tgids (the BPF filter)."""
        assert self.bpf is not None, "probe closed"
        self.bpf[b"offcpu"].clear()
        self.bpf[b"start"].clear()
        self.pids = list(pids)
        for pid in self.pids:
            self.targets[self.targets.Key(pid)] = self.targets.Leaf(1)

    def stop(self) -> None:
        """Close the window: no new switch-outs are recorded (pending switch-ins may still land)."""
        self.targets.clear()

    def collect(self) -> tuple[Counter, int]:
        """Folded stacks (weight = µs off CPU) and the number of off-CPU events."""
        self.stop()
        assert self.bpf is not None, "probe closed"
        stacks_map = self.bpf[b"stacks"]
        folded: Counter = Counter()
        events = 0
        items = list(self.bpf[b"offcpu"].items())
        user = {key.user_stack_id: self._walk(stacks_map, key.user_stack_id) for key, _ in items}
        wanted: dict[int, set[int]] = defaultdict(set)
        for key, val in items:
            if val.us:
                wanted[key.tgid].update(user[key.user_stack_id])
        symbols = user_symbols(wanted)  # in a child: see profiler/core/symbols.py
        for key, val in items:
            events += val.n
            if val.us == 0:
                continue
            comm = key.comm.decode(errors="replace").replace(";", ":") or "?"
            frames = [comm, state_frame(key.state)]
            frames += [self._user_frame(symbols.get((key.tgid, a), UNKNOWN)) for a in reversed(user[key.user_stack_id])]
            frames += [self._kernel_frame(a) for a in reversed(self._walk(stacks_map, key.kernel_stack_id))]
            if key.user_stack_id < 0 and key.kernel_stack_id < 0:
                frames.append("[no stack]")
            folded[";".join(frames)] += val.us
        self.bpf[b"offcpu"].clear()
        self.bpf[b"start"].clear()
        return folded, events

    @staticmethod
    def _walk(stacks_map, stack_id: int) -> list[int]:
        if stack_id < 0:  # -EFAULT (no user stack, e.g. kernel thread) or -EEXIST/-ENOMEM (map full)
            return []
        try:
            return list(stacks_map.walk(stack_id))
        except KeyError:
            return []

    def _kernel_frame(self, addr: int) -> str:
        assert self.bpf is not None, "probe closed"
        return self.bpf.ksym(addr).decode(errors="replace").replace(";", ":") + KERNEL

    @staticmethod
    def _user_frame(sym: str) -> str:
        """A frame from BCC's name of a user address (profiler/core/symbols.py)."""
        sym = sym.replace(";", ":")
        # BCC renders "name [module]" (or "[unknown] [module]" / "[unknown]").
        name, _, module = sym.rpartition(" [")
        if not name:
            return sym
        module = module.rstrip("]")
        if name == "[unknown]":
            name = f"[{module}]"
        return name + (INTERP if INTERP_DSO.match(module) else "")
