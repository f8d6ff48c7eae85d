"""--sockwait rules: the kernel's view of where each message waited (probes/sockwait.py). Figures are
the cell's means over rounds of the probed sub-window (docs/results-format.md, `sockwait.*`)."""

from __future__ import annotations

from netprof.profiler.core import units
from netprof.profiler.kit.rule_common import r2, where
from netprof.profiler.kit.rule_registry import Anomaly, Context, rule
from netprof.profiler.model import schema
from netprof.profiler.model.stats import CONN_WAIT_SHARE, num

# Where these findings are listed among the others of one severity (analysis/rules/__init__): after the
# failed cells' and lost connections', before the open loop's.
LISTED_AFTER = "failures"


def _waits(r) -> dict:
    return {k: num(r, f"sockwait.{k}") for k in (
        "wait_p50_us", "wait_p99_us", "wait_max_us", "wait_mean_us", "handler_p50_us", "handler_p99_us",
        "handler_mean_us", "conn_wait_least_us", "conn_wait_most_us", "conn_wait_ratio")}


def _wait_evidence(w: dict) -> dict:
    f = lambda v: "–" if v is None else f"{v:,.0f}"
    return {"queue wait p50 / p99 / max (µs)": f"{f(w['wait_p50_us'])} / {f(w['wait_p99_us'])} / {f(w['wait_max_us'])}",
            "handler time p50 / p99 (µs)": f"{f(w['handler_p50_us'])} / {f(w['handler_p99_us'])}"}


def _served(r) -> str | None:
    least, most = num(r, "sockwait.conn_bytes_least"), num(r, "sockwait.conn_bytes_most")
    return None if least is None or most is None else f"{least:,.0f} / {most:,.0f}"


def _most_n(r) -> str:
    """Who the most-served group was: a tenth of the connections, or the few that carried the load
    (rows written before `conn_most_n` existed: the tenth)."""
    n, tenth = num(r, "sockwait.conn_most_n"), max(1, round(int(r["connections"]) * CONN_WAIT_SHARE))
    if n is None or n >= tenth:
        return "most-served tenth"
    return "one connection that carried the load" if n == 1 else f"{n:.0f} connections that carried the load"


def _in_flight(r) -> int:
    return int(r["connections"]) * int(r.get("pipeline") or 1)


@rule("wait_starvation", plots=("per_conn", "fairness"), section="sockwait")
def wait_starvation(ctx: Context) -> list[Anomaly]:
    """Long queue waits concentrated on few connections: the least-served tenth of the connections
    waited ≥ 100× (median of their p90 waits) what the most-served waited (those that carried half the
    bytes, a tenth of the connections at most: stats.conn_wait_split) — their data sat unread."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        w = _waits(r)
        ratio, least, most = w["conn_wait_ratio"], w["conn_wait_least_us"], w["conn_wait_most_us"]
        if ratio is None or least is None or most is None or ratio < t.wait_starvation_ratio \
                or r["connections"] < t.starvation_min_connections:
            continue
        n = _most_n(r)
        ev = {"p90 wait, least-served 10% of connections (µs)": r2(least, 0),
              f"p90 wait, {'most-served 10% of connections' if n == 'most-served tenth' else n} (µs)": r2(most, 1),
              "ratio": r2(ratio, 0), **_wait_evidence(w),
              "bytes read in the window, least-served 10% / most-served (median)": _served(r),
              "Jain index (1 = fair)": r2(num(r, "per_conn.jain"))}
        text = (f"In {where(r)} the kernel saw the queue waits fall on a few connections: the data of the least-served "
                f"tenth of the connections waited {least / 1e3:,.1f} ms unread in their socket queues (the slowest "
                f"tenth of each connection's reads), {ratio:,.0f}× the {most:,.1f} µs of the {n}. "
                f"Their {units.exchanges(r.get('protocol'))} had arrived; the server did not read them while it kept "
                "serving others. ")
        if w["handler_p50_us"] is not None:
            text += (f"Handlers took {w['handler_p50_us']:,.0f} µs (median), so the starved connections' time went to "
                     "other connections, not to their own work. ")
        text += (f"See the per-connection wait plot beside the {units.exchange(r.get('protocol'))} counts: the starved "
                 "are the ones whose data waits.")
        title = f"Waits concentrated on few connections: {where(r)}"
        found.append(Anomaly.at(r, "wait_starvation", "critical", title, text, ev))
    return found


def _work_of(ctx: Context, r) -> str | None:
    rows = schema.select(schema.normalize(ctx.df), r)
    if "work" not in rows or rows.empty:
        return None
    work = str(rows["work"].iloc[0] or "none")
    return None if work == "none" else work


@rule("head_of_line", plots=("latency",), section="sockwait")
def head_of_line(ctx: Context) -> list[Anomaly]:
    """Head-of-line blocking: each message waits unread for several handler times — one loop runs the
    slow handlers of the messages ahead of it one after another (`--work sleep:` on a single loop)."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        w = _waits(r)
        wait, handler = w["wait_p50_us"], w["handler_p50_us"]
        if wait is None or handler is None or handler < t.hol_min_handler_us \
                or wait < t.hol_wait_handler_ratio * handler or _in_flight(r) < t.hol_min_in_flight:
            continue
        n = _in_flight(r)
        h_mean = w["handler_mean_us"] or handler
        overlap = (num(r, "mps_mean") or 0) * h_mean / 1e6
        if overlap > t.hol_max_overlap:
            continue
        ahead = (n - 1) * h_mean
        work = _work_of(ctx, r)
        ev = {**_wait_evidence(w), "median wait ÷ median handler": r2(wait / handler, 1),
              "messages in flight": n, "handlers ahead of a message if run one at a time (µs)": r2(ahead, 0),
              "requests in a handler at once (msgs/s × mean handler time)": r2(overlap, 2),
              "handler work per message (--work)": work}
        one, many = units.exchange(r.get("protocol")), units.exchanges(r.get("protocol"))
        text = (f"In {where(r)} each {one} waited {wait / 1e3:,.1f} ms (median) unread in its socket queue while its "
                f"own handler took {handler / 1e3:,.2f} ms: {wait / handler:.0f} handler times. With {n} {many} in "
                f"flight and handlers run one at a time, a {one} waits for the handlers of those ahead of it "
                f"(up to {n - 1} × {h_mean / 1e3:,.2f} ms ≈ {ahead / 1e3:,.1f} ms): head-of-line blocking — one slow "
                "handler holds up every other connection. ")
        text += _hol_remedy(work)
        title = f"Head-of-line blocking behind slow handlers: {where(r)}"
        found.append(Anomaly.at(r, "head_of_line", "warning", title, text, ev))
    return found


def _hol_remedy(work: str | None) -> str:
    if work and work.startswith(("sleep", "poisson-sleep")):
        return (f"The handler's work here (`--work {work}`) waits rather than computes: a handler that awaits "
                "(`await asyncio.sleep`, I/O) or runs in a thread lets the loop serve the others meanwhile.")
    return "Make the handlers shorter, or let them yield or run elsewhere (threads, processes)."


@rule("loop_busy_elsewhere", plots=("latency",), section="sockwait")
def loop_busy_elsewhere(ctx: Context) -> list[Anomaly]:
    """Long queue waits with short handlers: the time a message waited was not its handlers' — the loop
    was busy with the other connections (info) or stalled beyond that (warning)."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        w = _waits(r)
        wait, handler, mean = w["wait_p50_us"], w["handler_p50_us"], w["wait_mean_us"]
        if wait is None or handler is None or mean is None or wait < t.busy_wait_p50_us \
                or handler >= t.hol_min_handler_us or wait < t.busy_wait_handler_ratio * handler:
            continue
        if (w["conn_wait_ratio"] or 0) >= t.wait_starvation_ratio:
            continue  # wait_starvation explains these waits
        n, rate = _in_flight(r), num(r, "mps_mean")
        loop_us = 1e6 / rate if rate else None
        round_us = (n - 1) * loop_us if loop_us else None
        ev = {**_wait_evidence(w), "mean queue wait (µs)": r2(mean, 0), "messages in flight": n,
              "server time per message at the measured rate (µs)": r2(loop_us, 1),
              "one round of the other messages (µs)": r2(round_us, 0)}
        text = (f"In {where(r)} {units.exchanges(r.get('protocol'))} waited {wait / 1e3:,.1f} ms (median) unread in "
                "their socket queues while a "
                f"handler took only {handler:,.0f} µs: the waiting was not spent on their own work. ")
        stalled = round_us is not None and mean >= t.busy_beyond_round * round_us
        if round_us is not None and loop_us is not None:
            ev["mean wait ÷ one round"] = r2(mean / round_us, 1)
            text += _round_story(n, loop_us, round_us, mean, stalled, r.get("protocol"))
        title = f"Long waits with short handlers (loop busy elsewhere): {where(r)}"
        found.append(Anomaly.at(r, "loop_busy_elsewhere", "warning" if stalled else "info", title, text, ev))
    return found


def _round_story(n: int, loop_us: float, round_us: float, mean: float, stalled: bool, protocol=None) -> str:
    """The mean wait against one round of the loop over the other messages in flight (`protocol`: units' words)."""
    one, many = units.exchange(protocol), units.exchanges(protocol)
    if stalled:
        return (f"One round of the other {n - 1} {many} at {loop_us:,.1f} µs each takes "
                f"≈ {round_us / 1e3:,.2f} ms, yet the mean wait was {mean / round_us:.0f}× that: the loop "
                "was busy elsewhere, beyond serving the others — blocking work outside the handlers, "
                "pauses (garbage collection), or connections served out of turn. Look at the off-CPU "
                "flamegraph and the latency tail.")
    return (f"It is the loop's round over the other connections: {n - 1} other {many} in flight at "
            f"{loop_us:,.1f} µs of server time each ≈ {round_us / 1e3:,.2f} ms, what a {one} waited "
            f"(mean {mean / 1e3:,.2f} ms). The loop is saturated: its per-{one} overhead, not handler "
            "work, sets the latency — cut that overhead or spread connections over more processes.")
