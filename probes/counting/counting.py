"""The counting set: every syscall of the target process tree (counts; with syscall_time also wall
and on-CPU time), context switches, migrations and on-CPU time, and the kernel work it hands over without a
syscall (io_uring submissions by opcode, their completions, the CPU of io_uring's own threads), from
probes/counting/counting.bpf.c.

Attached only when wanted: `attach()` / `detach()` hook the compiled set on and off in milliseconds
(CountingProbes(attached=False) starts detached); counters keep their values while detached, so a
snapshot before a detach and one after the next attach pair up, and nothing happens in between counts.

Exact (every event seen): syscall counts, voluntary/involuntary switches (the kernel's own split),
forks/exits of the tree, migrations of the tree's threads once they have been switched out or timed
(a brand-new thread's placement before it first runs is missed), io_uring submissions by opcode (read from
the request at the offset the running kernel's BTF gives; without one they count as `unknown`, and
`ring_opcodes_unknown` says why) and completions.
Sampled, opt-in (syscall_time=True; it adds a sys_exit program, more than half the set's cost): syscall
wall time (enter→exit, blocking included) and its on-CPU part are measured for a random 1 in
`time_every` syscalls (default 16; 1 = every syscall) and scaled by count/timed per syscall name (an
unbiased ratio estimate; names never timed in the window get no time entry).
Approximate: `oncpu_s` is accounted at each switch-out and each timed syscall exit, so a window edge
(or an attach: each CPU's first slice after it) can miss the time since the tree's last such point
(tens of µs for a busy server; /proc schedstat, see proc_cpu_times()['oncpu_s'], is the exact total
for live threads); time of a syscall in flight at a window edge lands in the window where it ends;
interrupts/softirqs taken while the tree runs count as its time (as the kernel does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .. import tree
from ..base import _TP, NR_SLOTS, LoadedProgram, ProbeError, prerequisites, read_array, syscall_name
from ..base import prefetch as base_prefetch
from ..ring_ops import NR_RING_OPS, RING_SLOTS, UNKNOWN_WHY, opcode_offset, ring_op_name

NS = 1e-9
_CPU_FIELDS = ("vol", "invol", "migrations", "oncpu_ns", "forks", "exits", "ring_done", "ring_oncpu_ns")


@dataclass
class Snapshot:
    """Cumulative counters since the last target(); `t` is time.monotonic() when read."""

    t: float
    pid: int
    syscalls: dict[int, tuple[int, int, int, int]]  # nr -> (count, timed, wall ns, on-CPU ns of the timed)
    cpu: dict[str, int]  # _CPU_FIELDS, summed over CPUs
    syscall_time: bool = False  # the set times syscalls (else timed/ns are 0)
    ring: dict[int, int] | None = None  # io_uring submissions by opcode (non-zero only)


@dataclass
class ProbeDelta:
    """What the target tree did between two snapshots."""

    window_s: float  # b.t - a.t
    syscalls: dict[str, int]  # name -> count (non-zero only)
    # With syscall_time only (else empty):
    syscall_time_s: dict[str, float]  # name -> seconds between enter and exit (blocking included), estimated
    syscall_oncpu_s: dict[str, float]  # name -> seconds of that on a CPU (kernel time in the syscall), estimated
    ctx_voluntary: int  # switches out while blocking (prev_state != RUNNING and not preempted)
    ctx_involuntary: int  # preempted (or yielded while runnable)
    migrations: int  # sched_migrate_task events of the tree's threads
    oncpu_s: float  # BPF-measured on-CPU time of the tree (user + kernel)
    forks: int = 0  # processes that joined the tree (track_children)
    exits: int = 0  # processes of the tree that exited
    syscall_time: bool = False  # syscalls were timed: syscall_time_s, syscall_oncpu_s, cpu_split() are filled
    ring: dict[str, int] | None = None  # io_uring submissions by operation name (non-zero only; ring_op_name)
    ring_completions: int = 0  # io_uring completions posted by the tree's tasks
    ring_oncpu_s: float = 0.0  # on-CPU time of the tree's io_uring threads (iou-wrk-*, iou-sqp-*), in oncpu_s too

    @property
    def total_syscalls(self) -> int:
        return sum(self.syscalls.values())

    @property
    def in_syscalls_s(self) -> float | None:
        """On-CPU time inside syscalls (enter→exit minus the time switched out; sampled, see module doc);
        None without syscall_time."""
        return sum(self.syscall_oncpu_s.values()) if self.syscall_time else None

    @property
    def outside_syscalls_s(self) -> float | None:
        """On-CPU time outside syscalls: user code plus page faults and interrupts in user mode; None
        without syscall_time."""
        inside = self.in_syscalls_s
        return None if inside is None else max(0.0, self.oncpu_s - inside)

    def cpu_split(self, proc_sys_s: float | None = None) -> dict[str, float | None]:
        """On-CPU time as {'syscall_s', 'other_kernel_s', 'user_s'} (all None without syscall_time).

        `syscall_s` comes from the probes. Without `proc_sys_s`, everything outside syscalls is reported as
        user (an upper bound). With the /proc system time of the same window (proc_cpu_times delta,
        tick-sampled), other kernel time ≈ proc_sys_s − syscall_s, clamped to [0, outside].
        """
        if not self.syscall_time:
            return {"syscall_s": None, "other_kernel_s": None, "user_s": None}
        inside, outside = self.in_syscalls_s, self.outside_syscalls_s
        assert inside is not None and outside is not None  # both set with syscall_time
        other = 0.0 if proc_sys_s is None else min(outside, max(0.0, proc_sys_s - inside))
        return {"syscall_s": inside, "other_kernel_s": other, "user_s": outside - other}


def delta(a: Snapshot, b: Snapshot) -> ProbeDelta:
    if a.pid != b.pid:
        raise ValueError(f"snapshots of different targets ({a.pid} vs {b.pid})")
    calls: dict[str, int] = {}
    wall: dict[str, float] = {}
    oncpu: dict[str, float] = {}
    for nr, (n1, t1, w1, c1) in b.syscalls.items():
        n0, t0, w0, c0 = a.syscalls.get(nr, (0, 0, 0, 0))
        name = syscall_name(nr)
        if n1 - n0:
            calls[name] = n1 - n0
        if t1 - t0:  # scale the timed sample up to every call of this name in the window
            scale = max(n1 - n0, t1 - t0) / (t1 - t0) * NS
            wall[name] = (w1 - w0) * scale
            oncpu[name] = (c1 - c0) * scale
    d = {k: b.cpu.get(k, 0) - a.cpu.get(k, 0) for k in _CPU_FIELDS}
    ring = {ring_op_name(op): n - (a.ring or {}).get(op, 0) for op, n in (b.ring or {}).items()}
    return ProbeDelta(
        window_s=b.t - a.t, syscalls=calls, syscall_time_s=wall,
        syscall_oncpu_s=oncpu, ctx_voluntary=d["vol"], ctx_involuntary=d["invol"],
        migrations=d["migrations"], oncpu_s=d["oncpu_ns"] * NS, forks=d["forks"], exits=d["exits"],
        syscall_time=a.syscall_time and b.syscall_time,
        ring={k: v for k, v in ring.items() if v}, ring_completions=d["ring_done"],
        ring_oncpu_s=d["ring_oncpu_ns"] * NS,
    )


SOURCE = "counting/counting.bpf.c"
TIME_EVERY = 16  # --syscall-time times 1 syscall in 16 (CountingProbes)


def _cflags(track_children: bool, syscall_time: bool, time_every: int) -> list[str]:
    return [f"-DTRACK_CHILDREN={int(track_children)}", f"-DTIME_EVERY={time_every if syscall_time else 0}",
            f"-DNR_RING_OPS={NR_RING_OPS}"]


def prefetch(syscall_time: bool = False) -> None:
    """Start compiling the set check_available(syscall_time) compiles, in a thread (base.prefetch)."""
    base_prefetch(SOURCE, _cflags(True, syscall_time, TIME_EVERY))


class CountingProbes(LoadedProgram):
    """Compile once (~1 s), then target() a backend tree and snapshot() around each window.

    `with CountingProbes() as p:` detaches everything on exit, also on errors and Ctrl-C.
    `attached=False`: start detached; attach()/detach() around the windows that need counting.
    `syscall_time`: also time syscalls (adds the sys_exit program); `time_every`: then time 1 in N
    syscalls (a power of two; 1 = all, exact but ~2x the cost of sampling).
    """

    def __init__(self, track_children: bool = True, syscall_time: bool = False, time_every: int = TIME_EVERY,
                 attached: bool = True) -> None:
        if time_every < 1 or time_every & (time_every - 1):
            raise ValueError("time_every must be a power of two")
        self.track_children = track_children
        self.syscall_time = syscall_time
        self.time_every = time_every
        self.pid = 0
        self._gen = 0
        # Before the compile is joined (a prefetched one runs meanwhile): the kernel's io_kiocb.opcode offset,
        # ~15-30 ms of reading its BTF, once per process (ring_ops.opcode_offset).
        off = opcode_offset()
        self._ring_opcode_off = -1 if off is None else off
        # Why io_uring submissions are counted as `unknown` rather than by operation (None: they are not).
        self.ring_opcodes_unknown: str | None = UNKNOWN_WHY if off is None else None
        self._load(SOURCE, _cflags(track_children, syscall_time, time_every), attached=False)
        try:
            assert self.bpf is not None  # _load() succeeded
            self._cfg, self._sc, self._cpu = self.bpf[b"cfg"], self.bpf[b"sc"], self.bpf[b"cpu"]
            self._children, self._tids = self.bpf[b"children"], self.bpf[b"tids"]
            self._ring = self.bpf[b"ring"]
            self._keys = [self._sc.Key(i) for i in range(NR_SLOTS)]
            self._ring_keys = [self._ring.Key(i) for i in range(RING_SLOTS)]
            read_array(self._sc)  # now, not at a window's first mark: numpy's import (~40 ms), and a kernel refusal
            self._set_window(0, active=0)
            self._set_cfg(0, 0)  # untargeted (a set taken over from park() may have had a target)
            if attached:
                self.attach()
        except BaseException:
            self.close()
            raise

    # Tree bookkeeping and migrations: rare events whose tracepoints stay attached from load to
    # close (detaching one takes ~60 ms); they count only while attached (counting.bpf.c). Only rare
    # events belong here: every program named tracepoint__ is resident, and costs the whole machine its
    # price per event from load to close. What fires per operation (syscalls, switches, io_uring
    # submissions and completions) is a raw tracepoint, attached only with the set.
    resident = (_TP,)

    def attach(self) -> None:
        """Start counting (idempotent). Takes ~0.1 ms, or ~14 ms when nothing else on the machine
        hooks the syscall tracepoints (the kernel then flags every thread for its slow syscall path):
        attach before the window opens rather than at its start. Raises ProbeError."""
        if self.bpf is None:
            raise ProbeError("probes are closed")
        if not self.attached:
            # Per-thread/CPU state recorded before now is stale (same clock as bpf_ktime_get_ns).
            self._set_window(time.monotonic_ns(), active=1)
        super().attach()

    def detach(self) -> None:
        """Stop counting (idempotent, ~0.25 ms; nothing is counted once it returns); counters keep
        their values."""
        super().detach()
        if self.bpf is not None:
            self._set_window(self._window.attach_ns, active=0)

    def _set_window(self, attach_ns: int, active: int) -> None:
        assert self.bpf is not None  # callers check that the set is open
        w = self._window = self.bpf[b"window"].Leaf()
        w.attach_ns, w.active = attach_ns, active
        self.bpf[b"window"][self.bpf[b"window"].Key(0)] = w

    def _set_cfg(self, tgid: int, nchildren: int) -> None:
        v = self._cfg.Leaf()
        v.tgid, v.nchildren, v.gen, v.ring_opcode_off = tgid, nchildren, self._gen, self._ring_opcode_off
        self._cfg[self._cfg.Key(0)] = v

    def target(self, pid: int) -> None:
        """Watch `pid` and (track_children) its descendants, existing ones included; zeroes counters.
        Attached or not."""
        if self.bpf is None:
            raise ProbeError("probes are closed")
        self._set_cfg(0, 0)  # stop counting while the maps are reset
        self._tids.clear()
        for k in self._keys:
            self._sc[k] = self._sc.Leaf()
        for k in self._ring_keys:
            self._ring[k] = self._ring.Leaf()
        leaf = self._cpu.Leaf()
        now = time.monotonic_ns()  # same clock as bpf_ktime_get_ns
        for c in leaf:
            c.mark_ns = now
        self._cpu[self._cpu.Key(0)] = leaf
        kids = tree.seed(self._children, pid, self.track_children)
        self._gen += 1
        self.pid = pid
        self._set_cfg(pid, len(kids))
        tree.catch_late(self._children, pid, kids, self.track_children, lambda n: self._set_cfg(pid, n))

    def snapshot(self) -> Snapshot:
        if self.bpf is None:
            raise ProbeError("probes are closed")
        # [slot, (count, timed, ns, oncpu_ns)] summed over the CPUs; then the ring's operations, [slot]
        sc = read_array(self._sc).reshape(NR_SLOTS, -1, 4).sum(axis=1)
        calls = {int(i): (int(sc[i, 0]), int(sc[i, 1]), int(sc[i, 2]), int(sc[i, 3])) for i in sc[:, 0].nonzero()[0]}
        ops = read_array(self._ring).sum(axis=1)
        per_cpu = self._cpu.getvalue(self._cpu.Key(0))
        cpu = {f: sum(getattr(v, f) for v in per_cpu) for f in _CPU_FIELDS}
        ring = {int(i): int(ops[i]) for i in ops.nonzero()[0]}
        return Snapshot(t=time.monotonic(), pid=self.pid, syscalls=calls, cpu=cpu, syscall_time=self.syscall_time,
                        ring=ring)


def per_message_notation(per_msg: dict[str, float], ring: dict[str, float] | None = None) -> str:
    """The seed's notation: {'sendto': 1.0, 'recvfrom': 1.0, 'epoll_wait': 0.01} →
    "sendto + recvfrom + 0.01 × epoll_wait". Terms below 0.005 are dropped, coefficients that round
    to 1 are printed bare, larger (rounded) values first, ties in the input order. `ring`: io_uring
    operations per message, marked as such: "6 × epoll_ctl + 0.9 × epoll_ctl (ring) + ..."."""
    def coef(v: float) -> float:
        return round(v, 2) if v < 10 else round(v, 1) if v < 100 else float(round(v))

    ops = [*per_msg.items(), *((f"{n} (ring)", v) for n, v in (ring or {}).items())]
    terms = []
    for name, c in sorted(((n, coef(v)) for n, v in ops if v >= 0.005), key=lambda t: -t[1]):
        text = f"{c:.2f}".rstrip("0").rstrip(".")
        terms.append(name if text == "1" else f"{text} × {name}")
    return " + ".join(terms)


_checked: dict[bool, str | None] = {}


def check_available(syscall_time: bool = False) -> str | None:
    """None if the probes can run here, else one line: what is missing and the fix.

    Checks the prerequisites, mounts tracefs if needed, then really compiles, attaches and detaches
    the run's counting set once per process, so header, verifier or attach trouble shows up here.
    The compiled set is kept: the run's own `CountingProbes(syscall_time=...)` with the other
    compile options at their defaults (`attached` may differ) takes it over instead of compiling.
    """
    why = prerequisites()
    if why:
        return why
    if syscall_time not in _checked:
        try:
            CountingProbes(syscall_time=syscall_time).park()
            _checked[syscall_time] = None
        except ProbeError as e:
            _checked[syscall_time] = str(e)
    return _checked[syscall_time]
