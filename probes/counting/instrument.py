"""The counting set as an instrument: every syscall, context switch and migration of the server's tree,
attached only around each cell's probed sub-window (the headline comes from the rest), and what it
costs per syscall on this host."""

from __future__ import annotations

from typing import Any

from netprof.profiler.model import stats

from .. import selfcost
from ..instrument import Counted, ProbeInstrument
from .counting import CountingProbes, Snapshot, check_available, delta


class Counting(ProbeInstrument):
    name = "counting"
    sub_window = True

    @classmethod
    def wanted(cls, cfg: Any) -> bool:
        return bool(cfg.probes)  # on unless --no-probes

    @classmethod
    def missing(cls, cfg: Any) -> str | None:
        why = check_available(syscall_time=cfg.syscall_time)  # compiles the run's set once and parks it
        return f"probes cannot attach: {why}; or pass --no-probes to measure without BPF" if why else None

    @classmethod
    def open(cls, cfg: Any) -> Counting:
        return cls(CountingProbes(track_children=True, syscall_time=cfg.syscall_time, attached=False))

    def row(self, row: dict, first: Snapshot, last: Snapshot, counted: Counted) -> list[dict]:
        """Syscalls, io_uring operations, switches and migrations per message of the counted window (the
        contract's syscalls_per_msg and ctx_switches_per_msg, and ring_per_msg); with --syscall-time the BPF
        split of on-CPU time."""
        d = delta(first, last)
        n = counted.messages
        row["syscalls"] = dict(d.syscalls)
        row["syscalls_per_msg"] = stats.per_message(d.syscalls, n)
        # io_uring: the operations the tree submitted through a ring instead of a syscall, by opcode (empty
        # for a server that does none), and the CPU of io_uring's own threads (part of the tree's too)
        row["ring"] = dict(d.ring or {})
        row["ring_per_msg"] = stats.per_message(d.ring or {}, n)
        row["ring_cpu_us_per_msg"] = stats.ratio(d.ring_oncpu_s * 1e6, n)
        row["ctx_switches_per_msg"] = stats.ratio(d.ctx_voluntary + d.ctx_involuntary, n)
        row["ctx"] = {"voluntary_per_msg": stats.ratio(d.ctx_voluntary, n),
                      "involuntary_per_msg": stats.ratio(d.ctx_involuntary, n),
                      "migrations_per_msg": stats.ratio(d.migrations, n)}
        if d.syscall_time:  # --syscall-time: the BPF-side split of on-CPU time
            row["syscall_time_s"] = dict(d.syscall_time_s)
            proc_sys = counted.proc["sys_s"] if counted.proc else None
            row["cpu_bpf"] = {"oncpu_s": d.oncpu_s, **d.cpu_split(proc_sys_s=proc_sys)}
        return []

    def cost(self) -> dict:
        # This host's price per syscall (it varies between hosts): ~1 s to measure, so measured once per
        # boot and cached (the figure says when, and that it came from the cache).
        cost: dict = {"probe_cost_per_syscall": selfcost.cached(self.probes)}
        if self.probes.ring_opcodes_unknown:  # the rows' io_uring submissions are all `unknown`: why
            cost["ring_opcodes_unknown"] = self.probes.ring_opcodes_unknown
        return cost
