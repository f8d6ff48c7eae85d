"""The latency distribution: one message in a thousand waiting far longer than the median one."""

from __future__ import annotations

from netprof.profiler.analysis.rules.fairness import eager_reads
from netprof.profiler.core import units
from netprof.profiler.kit.rule_common import PAUSE_REF, r2, unanswered, where
from netprof.profiler.kit.rule_registry import Anomaly, Context, Thresholds, rule
from netprof.profiler.model.stats import num, threads_waiting


@rule("latency_tail", consolidate=True, plots=("latency",))
def latency_tail(ctx: Context) -> list[Anomaly]:
    """p999 far above p50 (> 20×): some messages wait much longer than the typical one."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        p50, p999 = num(r, "lat_us.p50"), num(r, "lat_us.p999")
        if not p50 or p999 is None or p999 / p50 <= t.tail_ratio:
            continue
        ratio = p999 / p50
        ev = {f"latency {p} (µs)": r2(num(r, f"lat_us.{p}"), 0) for p in ("p50", "p90", "p99", "p999", "max")}
        ev["p999 / p50"] = r2(ratio, 1)
        text = (f"For {where(r)}, one {units.exchange(r.get('protocol'))} in a thousand took {ratio:.0f}× the median "
                f"({units.duration_us(p999)} vs {units.duration_us(p50)}). ")
        waiting_ev, waiting = unanswered(r)
        ev.update(waiting_ev)
        text += waiting
        causes = _tail_causes(r, t)
        bursts = _served_in_bursts(ctx, r, ev)
        if bursts:  # it is why a message waited behind others, so it replaces that cause
            causes = [bursts] + [c for c in causes if not c.endswith(_BEHIND)]
        if causes:
            text += "Likely cause here: " + "; ".join(causes) + ". "
        elif p999 <= 1e3 * PAUSE_REF.longest_ms_top:
            # as long as the host's own pauses of a busy CPU: every request in flight or arriving then waits it out
            text += ("Nothing else in this cell explains it, and a thousandth of the requests is what the host's own "
                     "pauses of a busy CPU can hold this long: on netprof's reference host a busy CPU stops for 1 ms "
                     f"or more {PAUSE_REF.per_s} times a second, for up to {PAUSE_REF.longest_ms} ms, when both "
                     f"its CPUs are busy ({PAUSE_REF.source}), and every request in flight or arriving meanwhile "
                     "waits it out. Else suspect pauses of the server's own (GC, allocator, a slow handler): compare "
                     "with the flamegraph's off-CPU view, or run it again (the host's pauses fall at random). ")
            ev["reference host: a busy CPU's pauses of 1 ms or more per second, the longest (ms)"] = (
                f"{PAUSE_REF.per_s}, {PAUSE_REF.longest_ms}")
        else:
            text += ("Nothing else in this cell explains it: suspect pauses (GC, allocator, a slow handler) or the "
                     "noisy machine; compare with the flamegraph's off-CPU view. ")
        sev = "warning" if ratio > t.tail_warning_factor * t.tail_ratio or causes else "info"
        found.append(Anomaly.at(r, "latency_tail", sev, f"Latency tail {ratio:.0f}× the median: {where(r)}", text, ev))
    return found


_BEHIND = "queue behind others in flight on the same connection"


def _served_in_bursts(ctx: Context, r, ev: dict) -> str:
    """With several in flight and the eager read (fairness.eager_reads), the loop serves a connection's waiting messages
    in one run and the others wait it out: a tail of many runs' length, even where the runs rotate fairly over the
    window (asyncio_sock at 100 connections, 8 in flight, 2026-12-06: Jain 0.92, p50 42 µs, p99 79 ms)."""
    eager = eager_reads(ctx, r) if (r.get("pipeline") or 1) > 1 else None
    if eager is None:
        return ""
    reads, ec, _ = eager
    ev["read syscalls and epoll_ctl per message"] = f"{reads:.2f}, {ec:.3f}"
    many, per = units.exchanges(r.get("protocol")), units.per_unit(r.get("protocol"))
    text = (f"the loop serves one connection's waiting {many} in a run before it turns to another (its reads took "
            f"the eager path, {reads:.2f} reads and {ec:.3f} epoll_ctl {per}: a read that finds data does not yield), "
            "and a connection waits out the other connections' runs")
    jain = num(r, "per_conn.jain")
    if jain is not None and jain >= ctx.t.starvation_jain:
        text += f"; over the window the runs rotated (Jain {jain:.2f}), so it shows in the tail, not in fairness"
    return text


def _tail_causes(r, t: Thresholds) -> list[str]:
    """What else in the cell explains a long tail: starved or idle connections, threads queued for the CPU (each turn
    waited for at least a median request's time), preemption, pipelining, requests that waited in the loader at a
    set rate."""
    causes = []
    many = units.exchanges(r.get("protocol"))
    jain = num(r, "per_conn.jain")
    idle = num(r, "per_conn.idle") or 0
    if jain is not None and jain < t.starvation_jain:
        causes.append(f"connections are starved (Jain {jain:.2f}): the waiting ones make the tail")
    elif r["connections"] and idle / r["connections"] >= t.starvation_idle_share:  # (a watched row may have none)
        causes.append(f"{int(idle)} connections got no service in the window: their {many} make the tail")
    queued = num(r, "accept_queue_at_start") or 0
    if queued:  # rloop_sock at 1000 connections (bench/reports/modern, 2026-12-06): 284 queued, p999 682 ms
        causes.append(f"{queued:.0f} connections were still in the server's listen queue when the window opened: "
                      f"their first {many} waited for the accept")
    waiting = threads_waiting(r, t.starvation_runq_mean)
    wait, p50 = num(r, "sched.wait_per_turn_us"), num(r, "lat_us.p50")
    if waiting is not None and wait and p50 and wait >= p50:
        runq, threads = waiting
        causes.append(f"its threads queued for the CPU: on average {runq:.0f} of its {threads:.0f} were runnable and "
                      f"waiting, {units.duration_us(wait)} for each turn on it (/proc schedstat), and a "
                      f"{units.exchange(r.get('protocol'))} whose thread is in that queue waits with it")
    inv = num(r, "ctx.involuntary_per_msg")
    if inv is not None and inv >= t.involuntary_per_msg:
        causes.append(f"the backend is preempted {inv:.2f}× {units.per_unit(r.get('protocol'))}")
    if (r.get("pipeline") or 1) > 1:
        causes.append(f"{many} {_BEHIND}")
    waited = num(r, "open_loop.waited_share")  # at a set rate: the queue formed in the loader (PROTOCOL.md)
    if waited is not None and waited >= t.overload_behind_share:
        causes.append(f"{units.share(waited)} of the {many} waited in the loader for a free connection, the answers "
                      "coming slower than the requests came due (their wait counts: latency is from the intended "
                      "send)")
    return causes
