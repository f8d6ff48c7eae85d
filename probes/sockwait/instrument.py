"""Socket waits as an instrument: attached for the whole cell (every connection timed from its first
byte; its cost is in the headline, and the report says so), gated on the loader's counted window when it is
announced in time (else read at the window's marks), shaped into the row's `sockwait` group (beside the loader's
round trip of the same window, for the transit) and one row per connection."""

from __future__ import annotations

from typing import Any

from netprof.profiler.model import stats

from ..instrument import Counted, ProbeInstrument
from .sockwait import KINDS, SockWaitDelta, SockWaitProbes, SockWaitSnapshot, WaitDist, cached_cost, check_available
from .sockwait import sockwait_delta as sw_delta


class SockWait(ProbeInstrument):
    name = "sockwait"
    group = "sockwait"

    @classmethod
    def wanted(cls, cfg: Any) -> bool:
        # --sockwait, unless the breakdown (which carries this set) is wanted
        return bool(cfg.sockwait) and "breakdown" not in getattr(cfg, "instruments", ())

    @classmethod
    def missing(cls, cfg: Any) -> str | None:
        why = check_available()  # compiles the set once and parks it for open()
        return f"--sockwait cannot work here: {why}; run without --sockwait" if why else None

    @classmethod
    def open(cls, cfg: Any) -> SockWait:
        return cls(SockWaitProbes(attached=False))

    def gate(self, t_start: float, t_stop: float) -> None:
        self.probes.gate(t_start, t_stop)

    def totals(self) -> Any:
        return self.probes.totals()

    def row(self, row: dict, first: SockWaitSnapshot, last: SockWaitSnapshot, counted: Counted) -> list[dict]:
        return fill_row(row, first, last, counted)

    def cost(self) -> dict:
        # Its price per loopback message on this host (~3 s, once per boot): the report states it beside the headline.
        return {"sockwait_cost_per_message": cached_cost(self.probes, "sockwait")}



def fill_row(row: dict, first: SockWaitSnapshot, last: SockWaitSnapshot, counted: Counted) -> list[dict]:
    """The row's `sockwait` group from two snapshots (beside the loader's round trip of the same window);
    returns the per-connection rows. Gated on the loader's window (last.gate), from the gate's base, and
    `messages` is the loader's count of that window; else the span between the reads at the marks, with the
    loader's count carried over to it (stats.counted_span). The breakdown, which carries this set, fills it the
    same way."""
    gated = last.gate is not None
    d = sw_delta(last.gate.base if last.gate else first, last)
    conns = conn_rows(d)
    messages = counted.window_messages if gated and counted.window_messages is not None else counted.messages
    row["sockwait"].update(row_fields(d), attached=True, rtt_mean_us=counted.latency_us.get("mean"),
                           rtt_p50_us=counted.latency_us.get("p50"), messages=messages,
                           edges="exact" if gated else "marks",
                           **stats.conn_wait_split([c["bytes"] for c in conns], [c["wait_us"] for c in conns]))
    return conns


def row_fields(d: SockWaitDelta) -> dict:
    """Flat figures of a window: {wait,handler,server}_{p50,p99,max,mean}_us and _count, max_exact,
    overflow_*, unmeasured_*, exact, sockets, reused, window_s."""
    out: dict = {"window_s": d.window_s, "sockets": d.sockets, "exact": d.exact, "reused": d.reused}
    for kind in KINDS:
        dist: WaitDist = getattr(d, kind)
        out[f"{kind}_count"] = dist.count
        for q in ("p50", "p99", "max", "mean"):
            out[f"{kind}_{q}_us"] = getattr(dist, f"{q}_us")
    out["max_exact"] = d.wait.max_exact
    out.update({f"overflow_{k}": v for k, v in d.overflow.items()})
    out.update({f"unmeasured_{k}": v for k, v in d.unmeasured.items()})
    return out


def conn_rows(d: SockWaitDelta) -> list[dict]:
    """One dict per connection of the window, ordered by the loader's port: the server process that
    served it (tgid), reads, bytes, answers, mean, median and p90 wait, mean handler time, unread age,
    and `wait_us` — its own wait (p90, CONN_WAIT_QUANTILE), or, for a connection never read in the
    window, how long its oldest unread data had waited at the end (a lower bound)."""
    rows = []
    for i, c in enumerate(sorted(d.per_conn, key=lambda c: (c.dport, c.sock))):
        wait = c.wait_p90_us if c.wait_p90_us is not None else c.unread_age_us
        rows.append({"conn": i, "dport": c.dport, "tgid": c.tgid, "reads": c.reads, "bytes": c.bytes, "waits": c.waits,
                     "wait_mean_us": c.wait_mean_us, "wait_p50_us": c.wait_p50_us,
                     "wait_p90_us": c.wait_p90_us, "answers": c.answers, "handler_mean_us": c.handler_mean_us,
                     "unread_age_us": c.unread_age_us, "wait_us": wait})
    return rows
