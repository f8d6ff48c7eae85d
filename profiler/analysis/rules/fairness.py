"""Fairness: did every connection get served? `starvation` fires when a few connections got most of the
messages, and tells why where it can: from epoll_ctl per message, whether the reads skipped the event loop (the
eager-read path of asyncio's `sock_recv`); from the server's threads against its CPU (/proc schedstat), whether the
kernel's scheduler or the GIL chose whom to serve; from the listen queue, whether connections were not yet in."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from netprof.profiler.analysis.rules.sources import source_line
from netprof.profiler.core import units
from netprof.profiler.kit.rule_common import QUEUED_AT_OPEN, READ_SYSCALLS, WAITS, of, r2, unanswered, where
from netprof.profiler.kit.rule_registry import Anomaly, Context, rule
from netprof.profiler.model.stats import num, syscalls_of, threads_waiting

_SOCK = re.compile(r"(?:^|[_\s-])sock(?:$|[_\s-])")


@rule("starvation", plots=("per_conn", "fairness"))
def starvation(ctx: Context) -> list[Anomaly]:
    """A few connections got most of the messages (Jain index or active share far below fair).

    When epoll_ctl per message is far below what register-per-read implies, the reads took the
    eager path: `sock_recv` returned data that was already there without yielding to the loop."""
    found = []
    for _, r in ctx.cells.iterrows():
        starved = _starved(ctx.t, r)
        if starved is None:
            continue
        skewed, idle_share = starved
        jain, share, idle = num(r, "per_conn.jain"), num(r, "per_conn.active_share"), num(r, "per_conn.idle")
        ev = _starvation_evidence(ctx, r, jain, share, idle)
        text = f"{where(r)} served its connections very unevenly: {_how_uneven(ctx, r, ev, skewed, idle_share)}"
        text += f" (Jain {jain:.2f}; fair is ≈1). " if jain is not None else ". "
        text += eager_read_explanation(ctx, r, ev) or _inline_stream_read(r, ev)
        text += _run_queue(ctx, r, ev)
        text += _still_accepting(ctx, r, ev)
        waiting_ev, waiting = unanswered(r)
        ev.update(waiting_ev)
        text += waiting
        text += ("Its throughput figure therefore measures the favoured connections, not fair service: "
                 f"judge this cell by its per-connection distribution, not its {units.rate_unit(r.get('protocol'))}.")
        found.append(Anomaly.at(r, "starvation", "critical" if skewed else "warning",
                                f"Connection starvation: {where(r)}", text, ev))
    return found


def _starved(t, r) -> tuple[bool, float] | None:
    """(skewed, the idle connections' share) when a cell starved some of its connections (Jain index or active share
    far below fair: skewed; or a share of them that got nothing), else None."""
    jain, share = num(r, "per_conn.jain"), num(r, "per_conn.active_share")
    if r["connections"] < t.starvation_min_connections or (jain is None and share is None):
        return None
    skewed = ((jain is not None and jain < t.starvation_jain)
              or (share is not None and share < t.starvation_active_share))
    idle_share = (num(r, "per_conn.idle") or 0) / r["connections"]
    return (skewed, idle_share) if skewed or idle_share >= t.starvation_idle_share else None


@rule("accept_backlog", plots=("latency",))
def accept_backlog(ctx: Context) -> list[Anomaly]:
    """The window opened with connections the server had not accepted yet (its listen queue, read from /proc when
    the window opens), though none of them was starved for it: their first requests waited for the accept, inside
    the window's latency. A cell that starved connections says it in `starvation` instead."""
    found = []
    for _, r in ctx.cells.iterrows():
        queued = num(r, "accept_queue_at_start")
        if not queued or _starved(ctx.t, r) is not None:
            continue
        ev: dict = {}
        text = (_still_accepting(ctx, r, ev) + "Its latency figures hold the first request of each of "
                "them, which waited for the accept: not the server's steady state. ")
        share = queued / r["connections"]
        found.append(Anomaly.at(r, "accept_backlog", "warning" if share >= ctx.t.starvation_idle_share else "info",
                                f"Connections not yet accepted when the window opened: {where(r)}", text, ev))
    return found


def _starvation_evidence(ctx: Context, r, jain: float | None, share: float | None, idle: float | None) -> dict:
    n = int(r["connections"])
    ev = {"Jain index (1 = fair)": r2(jain), "share of connections that handled 95% of messages": r2(share),
          "connections serving 95% of messages": None if share is None else f"{round(share * n)} of {n}",
          "messages per connection min / p5 / p50 / p95 / max": " / ".join(
              f"{num(r, 'per_conn.' + k) or 0:.0f}" for k in ("min", "p5", "p50", "p95", "max")),
          "idle connections": None if idle is None else round(idle)}
    counts = ctx.conn_counts(r)
    if counts is not None and counts.sum() > 0:
        ranked = np.sort(counts)[::-1]
        k = max(1, len(ranked) // 100)
        ev["top 1% of connections got"] = (f"{100 * ranked[:k].sum() / ranked.sum():.0f}% of "
                                           f"{units.exchanges(r.get('protocol'))}")
    return ev


def _how_uneven(ctx: Context, r, ev: dict, skewed: bool, idle_share: float) -> str:
    """The clause that says how unevenly: by active share, idle connections, or busiest against median."""
    share, idle = num(r, "per_conn.active_share"), num(r, "per_conn.idle")
    p50, top = num(r, "per_conn.p50"), num(r, "per_conn.max")
    one, many = units.exchange(r.get("protocol")), units.exchanges(r.get("protocol"))
    if share is not None and share < ctx.t.starvation_active_share:
        return f"{ev['connections serving 95% of messages']} connections handled 95% of the {many}"
    top_vs_median = top / p50 if p50 and top else 0.0
    lopsided = top_vs_median >= 2
    if not skewed or (idle_share >= ctx.t.starvation_idle_share and not lopsided):
        # Connections that got nothing, beside a top no busier than the median: the unfairness is theirs.
        others = f"the median connection exchanged {p50:.0f}" if skewed and p50 else "the others were served"
        return (f"{idle or 0:.0f} of {int(r['connections'])} connections ({100 * idle_share:.0f}%) exchanged no "
                f"{one} at all in the measurement window while {others}")
    if lopsided:
        return (f"its busiest connection exchanged {top_vs_median:.0f}× the {many} of the median one "
                f"({top:.0f} vs {p50:.0f})")
    low = num(r, "per_conn.min")
    if p50 and low is not None:
        return f"its least-served connection exchanged {low:.0f} {many} against the median one's {p50:.0f}"
    return "a few connections got most of the service"


def _still_accepting(ctx: Context, r, ev: dict) -> str:
    """Connections the server had not accepted yet: its listen queue when the window opened
    (`accept_queue_at_start`, read from /proc), and accept4 calls in the probed part of the window. The loader opens
    every connection before the warm-up, so a connection accepted in the window waited in that queue, and its
    requests with it (uvicorn_httptools at 1000 connections: one accept per loop turn, ~35 a second under load,
    bench/reports/http)."""
    idle = num(r, "per_conn.idle") or 0.0
    queued = num(r, "accept_queue_at_start") or 0.0
    per = syscalls_of(r) or {}
    each = per.get("accept4", 0.0)
    # Under --rate the loader may open connections in the window (their accepts are theirs); a server that accepts a
    # connection per request (gunicorn_sync) accepts by design.
    accepting = 0 < each < ctx.t.accept_per_msg and not num(r, "open_loop.conns_opened")
    if not queued and not (idle and accepting):  # the queue seen, or connections unserved while it accepted
        return ""
    text = ""
    if queued:
        ev[QUEUED_AT_OPEN] = round(queued)
        text += (f"When the window opened, {queued:.0f} of the loader's connections were still in its listen queue "
                 "(the kernel's accept queue of its port, /proc/net/tcp): connected on the loader's side, they get "
                 "no answer until the server accepts them. ")
    if not accepting:
        return text + _get_them_in(r, "")
    # The counts of the probed part: per message times its messages (a merged cell keeps the per-message means).
    accepts, span = each * (num(r, "probed.messages") or 0.0), num(r, "probed.duration_s")
    secs = f"{span:.1f} s" if span else ""
    ev["accept4 in the probed part of the window"] = f"{accepts:.0f}" + (f" in {secs}" if secs else "")
    text += (f"It was still accepting the loader's connections while it was measured: {accepts:.0f} accept4 calls in "
             f"the probed part{f' of {secs}' if secs else ''}, though the loader had opened every connection before "
             "the warm-up. ")
    if not queued:
        text += ("A connection still in the listen queue is open on the loader's side and gets no answer until the "
                 "server accepts it. ")
    waits = of(per, WAITS)
    if waits and abs(each / waits - 1) <= 0.2:
        ev["accept4 per event-loop wait"] = r2(each / waits)
        # libuv waits in epoll_pwait; Python's selectors, trio and socketserver's poll() loop in other calls, and
        # accept one per turn too (bench/reports/modern, 2026-12-06: trio, socketserver)
        libuv = per.get("epoll_pwait", 0.0) >= 0.5 * waits
        text += (f"It accepted one connection per turn of its event loop ({each / waits:.2f} accept4 per wait"
                 + ("), as libuv (uvloop's loop) has done since its pull request 3696 (2022; uvloop 0.23 carries libuv "
                    "1.52)" if libuv else ")")
                 + ": under load the listen queue drains only as fast as the loop turns. ")
    pace = ""
    if span and accepts:
        # The queued (else idle) connections: at the pace it accepted them, how long they needed.
        waiting = queued or idle
        pace = (f"At {accepts / span:.0f} accepts a second its {waiting:.0f} {'queued' if queued else 'idle'} "
                f"connections needed ~{units.seconds(waiting / (accepts / span))} more to get in")
    return text + _get_them_in(r, pace)


def _get_them_in(r, pace: str) -> str:
    """What measures the server with every connection accepted (after `pace`, the sentence of how long they needed,
    if any): a longer warm-up, or one after every connection's first answer (--warmup-after served); a cell that had
    the latter began without some answers when the loader's connect timeout ran out."""
    if r.get("warmup_after") == "served":
        unserved = num(r, "served_first.unserved") or 0.0
        text = (f"{pace}. " if pace else "") + ("The loader waited for every connection's first answer before the "
                                                "warm-up (--warmup-after served)")
        if unserved:
            return text + f", but began with {unserved:.0f} unanswered when its connect timeout ran out. "
        return text + (" and had them all: these connections were opened since (the loader reopens a connection the "
                       "server closed). ")
    how = f"{pace}: a warm-up that much longer (--warmup)" if pace else "A longer warm-up (--warmup)"
    return (f"{how}, or one that begins once every connection has been answered (--warmup-after served), measures "
            "it with every connection served. ")


def eager_read_explanation(ctx: Context, r, ev: dict) -> str:
    """Why reads did not yield, when epoll_ctl/msg says they registered far less than the model implies:
    the numbers, the code path, the contrast with the same backend under strict ping-pong and under
    stream framing, and the stacks (or which view would show them)."""
    per = syscalls_of(r)
    if per is None:
        return "(No syscall counts for this cell: run with probes to see whether reads skipped the event loop.) "
    ev["epoll_ctl per message"] = r2(per.get("epoll_ctl", 0.0), 3)
    ev["read syscalls per message"] = r2(of(per, READ_SYSCALLS), 2)
    eager = eager_reads(ctx, r)
    if eager is None:
        return ""
    reads, ec, implied = eager
    ev["epoll_ctl per message the register-per-read model implies"] = r2(implied, 1)
    ev["source"] = source_line("asyncio.selector_events:BaseSelectorEventLoop.sock_recv", "return sock.recv(")
    # asyncio's own loop, or another that does what its source line shows (rloop: the Rust loop's sock_recv)
    whose = "asyncio's `sock_recv`" if r.get("family") in ("asyncio", None) else "its loop's `sock_recv`, as asyncio's,"
    ev["mechanism"] = (f"{r['backend']}'s reads found their data already waiting and returned without yielding to the "
                       f"event loop ({whose} tries `sock.recv()` first), so the coroutine that has data keeps the loop "
                       "while the other connections wait.")
    text = (f"Its reads almost never went through the event loop: {reads:.2f} read calls and {ec:.2f} epoll_ctl "
            f"{units.per_unit(r.get('protocol'))}, where registering for readiness around each read implies "
            f"{implied:.1f} epoll_ctl. This is the eager-read path of {whose} (asyncio/selector_events.py): it first "
            "calls `sock.recv(n)` and, when data is already there, returns it at once — the coroutine continues "
            "without yielding to the event loop, so the connection that has data keeps the loop and the others "
            "wait. ")
    text += _pipeline_trigger(ctx, r, ev) + _framing_trigger(ctx, r, ev)
    _stack_evidence(ctx, r, ev)
    return text


def _inline_stream_read(r, ev: dict) -> str:
    """tornado's IOStream reads several messages at once (reads per message well below 1, so the counts look like
    asyncio's streams, which stay fair), but a read it cannot answer from its buffer first tries the socket inline
    (`IOStream._try_inline_read`, tornado/iostream.py) before it waits on the loop: the eager path with a buffer. Named
    from the source, by family, where the counts cannot tell (bench/reports/modern, 2026-12-06: Jain 0.61 at 100
    connections, 8 in flight; 0.21 in its making of that morning)."""
    if r.get("family") != "tornado" or not (r.get("pipeline") or 1) > 1:
        return ""
    ev["source"] = source_line("tornado.iostream:BaseIOStream._try_inline_read", "self._read_to_buffer_loop()")
    ev["mechanism"] = (f"{r['backend']}'s IOStream answered each read from its buffer, and a read it could not "
                       "answer read the socket inline before waiting on the loop, so a connection whose data kept "
                       "coming kept the loop while the other connections waited.")
    return ("Its reads took the eager path through a buffer: tornado's IOStream answers a read from what it buffered "
            "(an awaited result that is ready does not yield to the event loop), and when the buffer is empty it "
            "first reads the socket inline (`_try_inline_read` → `_read_to_buffer_loop`) and waits on the loop only "
            "when nothing came. With several messages in flight a connection's next one has usually arrived, so it "
            "keeps the loop and the others wait. ")


def _run_queue(ctx: Context, r, ev: dict) -> str:
    """More of its threads runnable than its CPU could run (row `sched`, each thread's /proc schedstat): with a thread
    per connection the kernel's scheduler decides which connection is served (named when the turns themselves were
    uneven), and in Python the GIL on top of it (named where futex calls show its waits); with even turns and no such
    waits, the counts do not say what chose (bench/RESULTS.md, "A thread per connection at 1000 connections": cpp_th
    evened out over a longer window, socketserver less)."""
    waiting = threads_waiting(r, ctx.t.starvation_runq_mean)
    if waiting is None:
        return ""
    runq, threads = waiting
    turn, wait = num(r, "sched.turn_us"), num(r, "sched.wait_per_turn_us")
    p5, p50, top = (num(r, f"sched.turns_{k}") or 0.0 for k in ("p5", "p50", "max"))
    no_turn = num(r, "sched.waiting_no_turn") or 0.0
    ev["threads runnable but waiting for a CPU, on average (/proc schedstat)"] = f"{runq:.0f} of {threads:.0f}"
    ev["a turn on a CPU / the wait for it"] = f"{units.duration_us(turn)} / {units.duration_us(wait)}"
    span = "the window's probed part" if num(r, "probed.share") else "the window"  # where `sched` was read
    ev[f"turns per thread in {span} p5 / p50 / max"] = f"{p5:.0f} / {p50:.0f} / {top:.0f}"
    ev["threads waiting for a CPU without a turn in it"] = round(no_turn)
    how_many = f"all {threads:.0f} of its" if runq >= threads - 0.5 else f"{runq:.0f} of its {threads:.0f}"
    text = (f"More of its threads wanted the CPU than it could run: on average {how_many} "
            f"threads were runnable and waiting for it (their /proc schedstat), each turn on it lasted "
            f"{units.duration_us(turn)} and came after {units.duration_us(wait)} of waiting; over {span} "
            f"a thread had {p5:.0f} turn{'' if round(p5) == 1 else 's'} (p5) to {top:.0f}")
    text += (f", and {no_turn:.0f} were still waiting for their first when it ended. " if no_turn else ". ")
    # the scheduler's turns themselves uneven: a tail of threads with far fewer than the median, or none
    uneven = bool(no_turn) or p5 < ctx.t.sched_even_turns * p50
    if threads >= r["connections"] and uneven:
        ev.setdefault("mechanism", f"{r['backend']} had more runnable threads than its CPU could run, a thread per "
                                   "connection: a connection was served only while the kernel's scheduler ran its "
                                   "thread, and over a short window its turns did not even out.")
        text += ("With a thread per connection a connection is served only while its thread runs, so the kernel's "
                 "scheduler chose which connections were served, and its choices even out only over many turns: a "
                 "window several times the wait for a turn measures fair service, if the server gives it (a C++ "
                 "thread per connection, cpp_th, at 1000 connections and 8 in flight: Jain 0.55-0.61 over 2 s, "
                 "0.95-0.96 over 10 s; bench/RESULTS.md, \"A thread per connection at 1000 connections\"). ")
    futex, per = (syscalls_of(r) or {}).get("futex") or 0.0, units.per_unit(r.get("protocol"))
    even = f"Its threads had their turns on the CPU evenly ({p5:.0f} to {top:.0f})"
    if r.get("family") == "threads" and futex >= ctx.t.gil_futex_per_msg:
        ev["source"] = ("CPython's Python/ceval_gil.c (ceval_gil.h before 3.12), \"Notes about the implementation\": "
                        "the GIL is a flag behind a condition variable")
        if not uneven:
            ev.setdefault("mechanism", f"{r['backend']}'s threads took turns on the CPU evenly but waited for the GIL, "
                                       "which CPython gives to whichever thread finds it free, not in turn.")
        text += ((even + ", so what chose was the GIL: a Python thread must hold it to run" if not uneven
                  else "A Python thread must also hold the GIL to run")
                 + f", and {futex:.2f} futex calls {per} say its threads waited for it: CPython's GIL is a flag "
                 "behind a condition variable, not a queue, so a thread that finds it free takes it however long "
                 "others have waited, and a waiter asks the holder to let go only after the switch interval (5 ms) "
                 "(socketserver at 1000 connections, 8 in flight, 0.74-1.06 futex calls per message: Jain 0.30-0.37 "
                 "over 2 s, 0.68-0.76 over 10 s, where cpp_th evened out; same bench). ")
    elif not uneven:
        # With connections still in the listen queue the finding names them next: these counts only rule out the
        # scheduler and a lock (bench/reports/modern, socketserver at 1000 connections: 853 queued).
        text += (f"{even} and seldom waited on a lock ({futex:.2f} futex calls {per}): "
                 + ("neither the scheduler nor a lock chose which connections were served. "
                    if num(r, "accept_queue_at_start") else
                    "what favoured some connections over the others is not in these counts. "))
    return text


def eager_reads(ctx: Context, r) -> tuple[float, float, float] | None:
    """(reads, epoll_ctl, the epoll_ctl register-per-read implies) per message when a cell's reads took the eager
    path: one read per message and epoll_ctl far below what registering around each read implies; else None."""
    per = syscalls_of(r)
    if per is None:
        return None
    ec, reads, implied = per.get("epoll_ctl", 0.0), of(per, READ_SYSCALLS), _implied_epoll_ctl(ctx, r)
    if not implied or ec >= implied * ctx.t.eager_read_fraction or reads < ctx.t.eager_read_reads:
        return None
    return reads, ec, implied


def _implied_epoll_ctl(ctx: Context, r) -> float:
    """epoll_ctl per message if every read registered: the backend's own highest figure in another cell,
    else the `sock_recv` model's for a *sock* backend (0: no model to hold it to)."""
    same_backend = ctx.cells[(ctx.cells["backend"] == r["backend"])]
    elsewhere = [v for v in same_backend.get("syscalls_per_msg.epoll_ctl", pd.Series(dtype=float)).dropna()]
    implied = max(elsewhere, default=0.0)
    if implied < ctx.t.readiness_churn_epoll_ctl:
        family = str(r.get("family", "") or "")
        # a raw-socket loop's name (asyncio_sock, uvloop_sock): not "socketserver", a thread per connection
        implied = ctx.t.sock_recv_model_epoll_ctl if _SOCK.search(f"{r['backend']} {family}") else 0.0
    return implied


def _pipeline_trigger(ctx: Context, r, ev: dict) -> str:
    """Several messages in flight keep data waiting; the same backend at pipeline 1, when measured."""
    if not (r.get("pipeline") or 1) > 1:
        return ""
    one, many = units.exchange(r.get("protocol")), units.exchanges(r.get("protocol"))
    text = (f"With {int(r['pipeline'])} {many} in flight per connection the next {one} is almost always "
            "already waiting: that is the trigger. ")
    fair = ctx.same_cell(r, pipeline=1)
    if not fair.empty and (j := num(fair.iloc[0], "per_conn.jain")) is not None:
        ev["Jain index of the same backend at pipeline 1"] = r2(j)
        if j >= ctx.t.starvation_jain:
            text += f"Under strict ping-pong (pipeline 1) the same backend was fair (Jain {j:.2f}). "
    return text


def _framing_trigger(ctx: Context, r, ev: dict) -> str:
    """One message per receive leaves the rest queued; the same cell with stream framing, when measured."""
    if r.get("framing") != "message":
        return ""
    text = ("Each receive asks for one message (`--framing message`, as network_ping_test does), so a "
            "connection with several queued messages stays readable after every read. ")
    stream = ctx.same_cell(r, framing="stream")
    if not stream.empty and (j := num(stream.iloc[0], "per_conn.jain")) is not None:
        ev["Jain index of the same cell with stream framing"] = r2(j)
        text += (f"With `--framing stream` (one 64 KiB read drains every queued message) the same cell had "
                 f"Jain {j:.2f}. ")
    return text


def _stack_evidence(ctx: Context, r, ev: dict) -> None:
    """The read and epoll_ctl stacks when they name frames, else which view would show them."""
    stacks = ctx.stacks(r, READ_SYSCALLS + ("epoll_ctl",))
    if stacks and any(f not in ("[unknown]", "") for s in stacks for f in s["frames"]):
        ev["stacks"] = stacks
        return
    ev["where to see the Python frames"] = (
        "this interpreter's stacks have no frame pointers, so the evidence set cannot name Python callers"
        if stacks else "no stacks were collected (`--stacks`)") + (
        "; `--python 3.13 --flamegraph` adds the mixed Python→kernel view, which shows "
        "`sock_recv` → `__libc_recv` → `__x64_sys_recvfrom`")
