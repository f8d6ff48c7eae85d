"""The request breakdown as an instrument: the socket-wait set compiled with the breakdown, in its place
(`--breakdown` implies `--sockwait`). Attached for the whole cell, as the socket-wait set is; it fills
both row groups, `sockwait` as --sockwait would and `breakdown` (results-format.md)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..instrument import Counted, ProbeInstrument
from ..sockwait.instrument import fill_row
from ..sockwait.sockwait import cached_cost, check_available
from .breakdown import BreakdownProbes, Snapshot, breakdown_delta

NAME = "breakdown"


class Breakdown(ProbeInstrument):
    name = NAME
    group = NAME
    conn_file = "sockwait"  # its per-connection rows are the socket-wait set's

    @classmethod
    def wanted(cls, cfg: Any) -> bool:
        return NAME in getattr(cfg, "instruments", ())  # --breakdown

    @classmethod
    def missing(cls, cfg: Any) -> str | None:
        why = check_available(BreakdownProbes)  # compiles the set once and parks it for open()
        return f"--breakdown cannot work here: {why}; run without --breakdown" if why else None

    @classmethod
    def open(cls, cfg: Any) -> Breakdown:
        return cls(BreakdownProbes(attached=False))

    def gate(self, t_start: float, t_stop: float) -> None:
        self.probes.gate(t_start, t_stop)

    def totals(self) -> Any:
        return self.probes.totals()

    def row(self, row: dict, first: Snapshot, last: Snapshot, counted: Counted) -> list[dict]:
        conns = fill_row(row, first.sockwait, last.sockwait, counted)
        start, base = first.breakdown, last.breakdown.gate_base
        if base is not None:  # gated on the window: its start is what was read before it opened
            start = replace(base, fd_names=start.fd_names)  # (the descriptors' names as the first mark read them)
        row[NAME].update(row_fields(breakdown_delta(start, last.breakdown), counted, exact=base is not None))
        return conns

    def cost(self) -> dict:
        # Its price per loopback message on this host, as the socket-wait set's (the report states it).
        cost: dict = {"breakdown_cost_per_message": cached_cost(self.probes, "breakdown")}
        if self.probes.ring_opcodes_unknown:  # io_uring sends are not seen as sends: why
            cost["ring_opcodes_unknown"] = self.probes.ring_opcodes_unknown
        return cost


def row_fields(d, counted: Counted, exact: bool = False) -> dict:
    """The row's `breakdown` group: per-part means, medians and p99s (µs), the composition of the slowest
    1%, the loader's mean round trip over the same window and what the parts leave of it. `exact`: the kernel
    counted over the loader's window itself (gated on its bounds), so `messages` is the loader's count of it;
    else the window is the span between the reads at its marks, and `messages` the loader's carried over to it."""
    rtt = counted.latency_us.get("mean")
    messages = counted.window_messages if exact and counted.window_messages is not None else counted.messages
    total = d.total_mean_us
    return {"requests": d.requests, "mean_us": d.mean_us, "p50_us": d.p50_us, "p99_us": d.p99_us,
            "detail_us": d.detail_us, "tail_us": d.tail_us, "tail_requests": d.tail_requests,
            "total_p99_us": d.total_p99_us, "skipped": d.skipped, "messages": messages,
            "edges": "exact" if exact else "marks",
            "transit_in_unseen": d.transit_in_unseen,
            # the serving thread's CPU per request: on_cpu and its answer's send syscall (comparable with
            # /proc's CPU per message, but for the loop's own overhead between requests)
            "cpu_us": (d.mean_us["on_cpu"] + d.detail_us["send_cpu"]) if d.requests else None,
            # /proc's CPU per message of the server over the same window, to set it against
            "proc_cpu_us": (1e6 * (p["user_s"] + p["sys_s"]) / counted.messages
                            if (p := counted.proc) and counted.messages else None),
            # what off_cpu_io waited on most (iowait.py): its share of the handlers' descriptor waits
            **_io_wait(d.io_waits),
            "rtt_mean_us": rtt, "parts_mean_us": total,
            "unattributed_us": rtt - total if rtt is not None and total is not None else None}


def _io_wait(waits: list) -> dict:
    top = waits[0] if waits else None
    return {"io_wait": top.text() if top else None, "io_wait_share": top.share if top else None,
            "io_wait_ms": top.ms if top else None}
