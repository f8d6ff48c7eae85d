"""The request breakdown: where each request's time went, in parts measured by the kernel that add up to
the round trip (probes/breakdown/breakdown.bpf.h, compiled into the socket-wait set with -DBREAKDOWN=1).

    with BreakdownProbes() as bd:          # the socket-wait set and the breakdown's programs
        bd.target(backend_pid)
        a = bd.snapshot(); ...; b = bd.snapshot()
        d = breakdown_delta(a.breakdown, b.breakdown)   # d.mean_us["loop_wait"], d.p99_us, d.tail_us, ...
        w = sockwait_delta(a.sockwait, b.sockwait)      # the socket-wait figures, as --sockwait gives them

The parts (PARTS) partition a measured request's time, from the loader's send to the loader's read of
the answer (docs/breakdown.md has the rule): transit (both ways), queue_wait, runqueue, on_cpu,
loop_wait, off_cpu_{futex,sleep,io,other}, send, loader_wait. Each is measured, none is a remainder,
so "the parts add up to the loader's round trip" is a check, not an identity (`unattributed_us`).
Requests the breakdown cannot follow are counted by reason (SKIPPED), not guessed.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any

from ..base import ProbeError
from ..btf import BTF_PATH, Btf
from ..ring_ops import UNKNOWN_WHY, opcode_offset
from ..sockwait.sockwait import NSLOTS, SUB, SockWaitProbes, SockWaitSnapshot, WaitDist, slot_bounds
from ..sockwait.sockwait import Totals as SockWaitTotals
from ..sockwait.sockwait import prefetch as sockwait_prefetch
from . import iowait
from .gil import runtime_range

# Same order as breakdown.bpf.h's P_* (tests/test_breakdown.py checks).
PARTS = ("queue_wait", "loop_wait", "runqueue", "on_cpu", "off_cpu_futex", "off_cpu_sleep", "off_cpu_io",
         "off_cpu_other", "send", "transit", "loader_wait")
# Sums only (D_*): on_cpu and transit split; the CPU of the answer's send syscall (with on_cpu, the
# serving thread's CPU for the request: `cpu_us`); the part of off_cpu_futex spent on the GIL (gil.py); the part
# of off_cpu_io spent in readiness waits that ended on their timeout (an event loop asleep until a timer).
TIMER = "off_cpu_timer"  # that last one (D_OFF_TIMER)
TIMER_WORTH = 0.1  # ... a tenth of off_cpu_io or more: worth a word (the tail's finding, the tables' largest parts)
TIMER_MOSTLY = 0.5  # ... half or more: the timers are the cause (tail_cause's title, watch's live view)
DETAIL = ("on_cpu_user", "on_cpu_sys", "transit_in", "transit_out", "send_cpu", "off_cpu_gil", TIMER)
# Why a request was not measured (K_*).
SKIPPED = ("busy", "no_reader", "other_thread", "no_send_edge", "clock")
TAIL_QUANTILE = 0.99
# The syscalls each off-CPU part's waits are made in (breakdown.bpf.h's bd_cause): with --stacks beside
# --breakdown the evidence round walks their stacks too, and the tail_cause rule shows where the tail's
# kind of wait was made (every call of the syscall, not only those that blocked).
WAIT_SYSCALLS = {"off_cpu_futex": ("futex",), "off_cpu_sleep": ("clock_nanosleep", "nanosleep"),
                 "off_cpu_io": ("recvfrom", "read", "recvmsg", "poll", "select")}


@functools.cache
def task_offsets(path: str = BTF_PATH) -> dict[str, int]:
    """struct task_struct's pid and tgid offsets in the running kernel (its raw sched tracepoints pass tasks)."""
    try:
        btf = Btf(path)
        return {"OFF_TASK_PID": btf.offset("task_struct", "pid", 4),
                "OFF_TASK_TGID": btf.offset("task_struct", "tgid", 4)}
    except OSError as e:
        raise ProbeError(f"the breakdown needs the kernel's BTF ({path}): {e}") from e
    except (KeyError, ValueError) as e:
        raise ProbeError(f"unexpected task_struct in the kernel's BTF ({path}): {e}") from e


@dataclass
class BreakdownSnapshot:
    """The breakdown's cumulative figures since target()."""

    hist: list[list[int]]          # per PARTS: NSLOTS counts
    sum_ns: list[int]              # per PARTS
    count: list[int]               # per PARTS
    detail_ns: list[int]           # per DETAIL
    tail_n: list[int]              # requests by the slot of their total (all parts but loader_wait)
    tail_ns: list[list[int]]       # per PARTS: per slot, the part's sum over those requests
    skipped: dict[str, int]
    requests: int
    transit_in_unseen: int = 0     # requests followed whose loader send was not seen (transit: the way out)
    io_wait: dict[iowait.Key, int] = field(default_factory=dict)  # ns blocked in fd syscalls (iowait.py)
    fd_names: dict[tuple[int, int], iowait.FdName] = field(default_factory=dict)  # their fds, as then
    # The figures as read when the gate (SockWaitProbes.gate) was set, before its window opened: while it holds,
    # the window's figures are this snapshot's less those, whenever the first mark was heard.
    gate_base: BreakdownSnapshot | None = None


@dataclass
class Snapshot:
    """What BreakdownProbes.snapshot() gives: the socket-wait set's snapshot and the breakdown's."""

    sockwait: SockWaitSnapshot
    breakdown: BreakdownSnapshot


@dataclass
class Totals:
    """The figures over every request (BreakdownProbes.totals()): the breakdown's struct and the socket-wait
    set's, as read at one instant."""

    sockwait: SockWaitTotals
    breakdown: Any


@dataclass
class BreakdownDelta:
    """The window between two snapshots, in µs per measured request."""

    requests: int
    mean_us: dict[str, float | None]
    p50_us: dict[str, float | None]
    p99_us: dict[str, float | None]
    detail_us: dict[str, float | None]  # means of on_cpu_user/sys, transit_in/out
    # The composition of the slowest requests (those whose total is at or above the p99 total's slot):
    # each part's mean over them, and how many there were.
    tail_us: dict[str, float | None]
    tail_requests: int
    total_p99_us: float | None
    skipped: dict[str, int] = field(default_factory=dict)
    transit_in_unseen: int = 0
    io_waits: list[iowait.IoWait] = field(default_factory=list)  # what off_cpu_io waited on, largest first

    @property
    def total_mean_us(self) -> float | None:
        """The sum of the parts' means (loader_wait has its own count: the loader's reads we saw)."""
        vals = [self.mean_us.get(p) for p in PARTS]
        return sum(v for v in vals if v is not None) if any(v is not None for v in vals) else None


def _read(v) -> BreakdownSnapshot:
    """The snapshot of the breakdown's struct `v` (as read from its one-entry array)."""
    n = len(PARTS)
    hist = [list(v.hist[k * NSLOTS:(k + 1) * NSLOTS]) for k in range(n)]
    tail_ns = [list(v.tail_ns[k * NSLOTS:(k + 1) * NSLOTS]) for k in range(n)]
    return BreakdownSnapshot(hist=hist, sum_ns=list(v.sum_ns), count=list(v.count), detail_ns=list(v.detail_ns),
                             tail_n=list(v.tail_n), tail_ns=tail_ns,
                             skipped={k: v.skipped[i] for i, k in enumerate(SKIPPED)}, requests=v.requests,
                             transit_in_unseen=v.transit_in_unseen)


def _tail_slot(counts: list[int], q: float) -> int | None:
    """The slot where the slowest (1 − q) of a histogram's requests begin: the one holding the request
    ranked just above the q·n fastest (None when empty)."""
    n = sum(counts)
    if n <= 0:
        return None
    rank, seen = min(n, math.floor(q * n) + 1), 0
    for i, c in enumerate(counts):
        seen += c
        if seen >= rank:
            return i
    return len(counts) - 1


def _mid_us(i: int) -> float:
    lo, hi = slot_bounds(i)
    return (lo + hi - 1) / 2 / 1e3 if i >= SUB else lo / 1e3


def breakdown_delta(a: BreakdownSnapshot, b: BreakdownSnapshot) -> BreakdownDelta:
    mean, p50, p99 = {}, {}, {}
    for k, part in enumerate(PARTS):
        hist = [y - x for x, y in zip(a.hist[k], b.hist[k])]
        d = WaitDist.from_hist(hist, b.sum_ns[k] - a.sum_ns[k], None)
        mean[part], p50[part], p99[part] = d.mean_us, d.p50_us, d.p99_us
    requests = b.requests - a.requests
    detail = {name: (b.detail_ns[i] - a.detail_ns[i]) / requests / 1e3 if requests else None
              for i, name in enumerate(DETAIL)}
    tail_n = [y - x for x, y in zip(a.tail_n, b.tail_n)]
    top = _tail_slot(tail_n, TAIL_QUANTILE)
    tail: dict[str, float | None] = dict.fromkeys(PARTS[:-1])
    tail_requests = 0
    if top is not None:
        tail_requests = sum(tail_n[top:])
        for k, part in enumerate(PARTS[:-1]):
            tail[part] = sum(b.tail_ns[k][i] - a.tail_ns[k][i] for i in range(top, NSLOTS)) / tail_requests / 1e3
    return BreakdownDelta(requests=requests, mean_us=mean, p50_us=p50, p99_us=p99, detail_us=detail, tail_us=tail,
                          tail_requests=tail_requests, total_p99_us=_mid_us(top) if top is not None else None,
                          skipped={k: b.skipped[k] - a.skipped[k] for k in SKIPPED},
                          transit_in_unseen=b.transit_in_unseen - a.transit_in_unseen,
                          io_waits=iowait.name_waits(a.io_wait, b.io_wait, a.fd_names | b.fd_names))


def breakdown_cflags(cflags: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What BreakdownProbes(cflags=cflags) adds to the socket-wait set's flags (raises ProbeError without BTF)."""
    return ("-DBREAKDOWN=1", *(f"-D{k}={v}" for k, v in sorted(task_offsets().items())), *cflags)


def prefetch(cflags: tuple[str, ...] = ()) -> None:
    """Begin compiling the set BreakdownProbes(cflags=cflags) loads (sockwait.prefetch); best effort."""
    try:
        flags = breakdown_cflags(cflags)
    except ProbeError:
        return
    sockwait_prefetch(flags)


class BreakdownProbes(SockWaitProbes):
    """The socket-wait set compiled with the breakdown (same life cycle: SockWaitProbes); snapshot()
    returns both sets of figures."""

    def __init__(self, attached: bool = True, cflags: tuple[str, ...] = (), **kw) -> None:
        self._bd: Any = None  # BCC's tables (untyped), bound at the first target()
        self._bd_gate_base: BreakdownSnapshot | None = None  # gate()
        self._names: dict[tuple[int, int], iowait.FdName] = {}  # the descriptors named since the gate (_name)
        # io_uring sends (a SEND's submission is its send's entry) need the kernel's io_kiocb.opcode offset,
        # written into the set's cfg (ring_op.bpf.h); without it their requests are skipped as no_send_edge.
        off = opcode_offset()
        self._ring_opcode_off = -1 if off is None else off
        self.ring_opcodes_unknown: str | None = UNKNOWN_WHY if off is None else None
        super().__init__(attached=attached, cflags=breakdown_cflags(cflags), **kw)
        try:
            self._install_commit()
        except BaseException:
            self.close()
            raise

    def _install_commit(self) -> None:
        """bd_commit into the program array sock_send_length tail-calls (breakdown.bpf.h says why)."""
        self._install_tail(b"bd_commit", b"bd_progs")

    def _install_tail(self, fn_name: bytes, array: bytes) -> None:
        """A program the set tail-calls, loaded into slot 0 of its program array."""
        import ctypes as ct

        from bcc import BPF

        b = self.bpf
        assert b is not None
        try:
            fn = b.load_func(fn_name, BPF.RAW_TRACEPOINT)
            progs = b[array]
            progs[ct.c_int(0)] = ct.c_int(fn.fd)
        except Exception as e:  # BCC raises plain Exception
            raise ProbeError(f"cannot load {fn_name.decode()}: {e}") from e

    def _reset_more(self, pid: int) -> None:
        b = self.bpf
        assert b is not None  # called from target() on an open set
        if self._bd is None:
            self._bd, self._thr, self._peer, self._peer_bits = b[b"bd_stats"], b[b"bd_thr"], b[b"bd_peer"], \
                b[b"bd_peer_bits"]
            self._gil, self._iowait = b[b"bd_gil"], b[b"bd_iowait"]
        self._thr.clear()
        self._iowait.clear()
        gil = self._gil.Leaf()
        if pid and (rng := runtime_range(pid)) is not None:
            gil.lo, gil.hi = rng
        self._gil[self._gil.Key(0)] = gil
        self._peer.clear()
        self._peer_bits[self._peer_bits.Key(0)] = self._peer_bits.Leaf()
        self._bd[self._bd.Key(0)] = self._bd.Leaf()

    def _set_gate(self, lo_ns: int, hi_ns: int) -> None:
        super()._set_gate(lo_ns, hi_ns)
        self._bd_gate_base = None
        self._names = {}

    def gate(self, t_start: float, t_stop: float) -> bool:
        """SockWaitProbes.gate, and the descriptors waited on so far named now, before the window opens (_name)."""
        gated = super().gate(t_start, t_stop)
        if gated and self._bd_gate_base is not None:
            self._names = iowait.describe(self._bd_gate_base.io_wait)
        return gated

    def _gate_read_more(self) -> None:
        """The parts' sums and the descriptor waits as the gate is set (SockWaitProbes.gate): the gated window's
        start. The programs count a request by its answer's arrival at the loader (breakdown.bpf.h, bd_in_window),
        a descriptor wait by its part inside the window (bd_gated_span)."""
        base = _read(self._bd[self._bd.Key(0)])
        base.io_wait = iowait.read(self._iowait)  # the descriptor waits too (their part inside the gate)
        self._bd_gate_base = base

    def totals(self) -> Totals:  # type: ignore[override]
        """The parts' sums (what the loader's round trip is set against) first, then the socket-wait set's."""
        bd = self._bd[self._bd.Key(0)]
        return Totals(sockwait=super().totals(), breakdown=bd)

    def snapshot(self, describe: bool = True, totals: Totals | None = None) -> Snapshot:  # type: ignore[override]
        """`describe`: name the descriptors off_cpu_io waited on (now, while the server runs: its sockets from
        /proc, ~0.3 s per process with tens of thousands of TIME_WAIT connections); a snapshot whose names are
        not read can skip it. `totals`: those read a moment ago (totals()), else read now."""
        tot = totals or self.totals()
        sw = super().snapshot(tot.sockwait)
        bd = _read(tot.breakdown)
        bd.gate_base = self._bd_gate_base
        bd.io_wait = iowait.read(self._iowait)
        bd.fd_names = self._name(bd.io_wait) if describe else {}
        return Snapshot(sockwait=sw, breakdown=bd)

    def _name(self, waits: dict[iowait.Key, int]) -> dict[tuple[int, int], iowait.FdName]:
        """The descriptors behind `waits`, named from /proc. Inside the gated window only those not named since the
        gate are read: netprof's /proc reads at the window's first mark are CPU the server shares with it (the
        sockets of a process: ~5 ms of CPU for selector at 100 connections here, ~0.3 s with tens of thousands of
        TIME_WAIT connections), and the descriptors a server waits on are mostly there before the load (named as the
        gate is set, outside the window). After the window every one is read again (a number reused since names its
        new descriptor)."""
        if self._hi_ns and time.monotonic_ns() < self._hi_ns:
            waits = {k: v for k, v in waits.items() if (k[0], k[2]) not in self._names}
        self._names = self._names | iowait.describe(waits)
        return dict(self._names)
