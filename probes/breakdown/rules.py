"""--breakdown rules: what the slowest requests' time was made of (probes/breakdown/, docs/breakdown.md).
Figures are the cell's means over rounds of the counted window (`breakdown.*`)."""

from __future__ import annotations

from netprof.probes.breakdown.breakdown import TIMER, TIMER_MOSTLY, TIMER_WORTH, WAIT_SYSCALLS
from netprof.profiler.kit.rule_common import r2, where
from netprof.profiler.kit.rule_registry import Anomaly, Context, rule
from netprof.profiler.model import schema
from netprof.profiler.model.stats import num

# Where these findings are listed among the others of one severity (analysis/rules/__init__): last,
# after the open loop's.
LISTED_AFTER = "open_loop"

# What each part means for a reader, and what to look at next.
CAUSES = {
    "queue_wait": ("the request sat unread in its socket queue while the server served other connections",
                   "a loop that keeps serving a few connections (see the per-connection waits), or handlers that "
                   "block the only thread"),
    "loop_wait": ("after its read, the serving thread ran other requests before this one's handler: the event "
                  "loop's turn", "fewer connections per loop, more loops (workers), or cheaper callbacks"),
    "runqueue": ("the serving thread was runnable but had no CPU", "what shares its CPU: pinning, other "
                 "processes, more threads than cores"),
    "on_cpu": ("the serving thread computed this request", "the handler's own cost: a flamegraph (--flamegraph)"),
    "off_cpu_futex": ("the serving thread waited on a lock (futex): in CPython threads, usually the GIL",
                      "fewer threads, or processes instead of threads"),
    "off_cpu_sleep": ("the handler slept", "a blocking sleep in the handler"),
    "off_cpu_io": ("the handler waited on another descriptor (a socket, a file: a database or another service)",
                   "the service it waits on"),
    # off_cpu_io, when most of it was readiness waits that ended on their timeout (detail_us.off_cpu_timer)
    "timers": ("the event loop slept until a timer: its readiness wait (epoll_wait, poll, select) ended on its "
               "timeout with no descriptor ready", "the timers the handler awaits (an asyncio.sleep, a call_later, a "
               "timeout)"),
    "off_cpu_other": ("the serving thread was blocked in something else (page faults, other syscalls)",
                      "--syscall-time and the off-CPU stacks (--stacks)"),
    "send": ("sending the answer", "a full send buffer: a slow reader"),
    "transit": ("the network between loader and server", "the link (--remote netns, --netem)"),
}


WAITS = ("queue_wait", "loop_wait", "runqueue", "off_cpu_futex", "off_cpu_futex, the GIL")


def _pinned_twin(ctx: Context, r) -> str:
    """The same cell with the other pinning (`--pin both`), where the GIL wait shows as something else: on one
    CPU the threads queue for the CPU (runqueue) rather than for the GIL, which the running thread holds."""
    if "pinned" not in ctx.cells:
        return ""
    twin = schema.select(ctx.cells, r, pinned=not bool(r["pinned"]))
    if twin.empty:
        return ("Pinned to one CPU (the default) the same threads would queue for the CPU instead: the wait would "
                "show as runqueue, not futex (`--pin both` measures both). ")
    t = twin.iloc[0]
    rq, fu = num(t, "breakdown.mean_us.runqueue"), num(t, "breakdown.mean_us.off_cpu_futex")
    if rq is None or fu is None:
        return ""
    return (f"The {'pinned' if bool(t['pinned']) else 'unpinned'} run of the same server shows it as runqueue "
            f"instead ({rq:,.0f} µs runnable against {fu:,.0f} µs in futex): on one CPU the threads queue for the "
            "CPU, and the thread that runs holds the GIL. ")


def io_wait(r) -> str | None:
    """What a cell's handlers waited on most, with its share: "recvfrom on 10 descriptors, TCP to ... (98%)"."""
    what, share = r.get("breakdown.io_wait"), num(r, "breakdown.io_wait_share")
    if not isinstance(what, str) or not what:
        return None
    return what + (f" ({100 * share:.0f}%)" if share is not None else "")


def _python(stack: dict) -> list[str]:
    """A --stacks entry's Python frames (innermost first): its frames up to the native ones."""
    return [f for f in stack.get("frames", []) if "(" in f and ".py:" in f]


def _by_python(stacks: list[dict]) -> list[tuple[tuple[str, ...], int]]:
    """Stacks of the first syscall merged by their three innermost Python frames (a futex wait and a futex
    wake from the same line are one place in the code), most calls first."""
    merged: dict[tuple[str, ...], int] = {}
    for st in stacks:
        if st["syscall"] == stacks[0]["syscall"]:
            key = tuple(_python(st)[:3])
            merged[key] = merged.get(key, 0) + int(st.get("count") or 0)
    return sorted(merged.items(), key=lambda kv: -kv[1])


def _wait_syscalls(part: str, waited: str | None) -> tuple[str, ...]:
    """The syscalls whose --stacks show where a part's waits were made: the one the handlers waited on most
    (io_wait) first, then the part's others."""
    calls = WAIT_SYSCALLS.get(part, ())
    first = waited.split()[0] if waited else None
    return ((first,) if first in calls else ()) + tuple(c for c in calls if c != first)


@rule("tail_cause", section="sockwait")
def tail_cause(ctx: Context) -> list[Anomaly]:
    """The slowest 1% of requests (at or above the p99 of their total) spent most of their time in one part
    of the breakdown: name it, with its share, the mean request's and the other parts as evidence."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        tail = {p: v for p, v in ((p, num(r, f"breakdown.tail_us.{p}")) for p in CAUSES) if v is not None}
        total = sum(max(0.0, v) for v in tail.values())
        if not tail or total < t.tail_cause_min_us:
            continue
        part, value = max(tail.items(), key=lambda kv: kv[1])
        share = value / total
        if share < t.tail_cause_share:
            continue
        mean = num(r, f"breakdown.mean_us.{part}")
        timer = num(r, f"breakdown.detail_us.{TIMER}") if part == "off_cpu_io" else None
        timers = timer is not None and bool(mean) and timer >= TIMER_MOSTLY * (mean or 0)
        what, next_look = CAUSES["timers" if timers else part]
        inflight = int(r["connections"]) * int(r.get("pipeline") or 1)
        behind = f", behind up to {inflight - 1} other requests in flight" if part in ("queue_wait", "loop_wait") \
            and inflight > 1 else ""
        p99 = num(r, "breakdown.total_p99_us")
        text = (f"In {where(r)} the slowest 1% of requests"
                + (f" ({p99 / 1e3:,.2f} ms and longer)" if p99 is not None else "")
                + f" took {total / 1e3:,.2f} ms on average, and "
                f"{100 * share:.0f}% of that was {part}{behind}: {what}. The mean request spent "
                f"{(mean or 0) / 1e3:,.2f} ms there. ")
        gil = num(r, "breakdown.detail_us.off_cpu_gil")
        if part == "off_cpu_futex" and gil is not None and mean:
            text += (f"Of the mean request's futex waits, {100 * gil / mean:.0f}% were on the interpreter's GIL (a "
                     "futex inside its _PyRuntime). ")
            text += _pinned_twin(ctx, r)
        if timer is not None and mean and timer >= TIMER_WORTH * mean:
            text += (f"Of the mean request's off_cpu_io, {100 * timer / mean:.0f}% was in readiness waits that ended "
                     "on their timeout (the loop woke for a timer, not for a descriptor). ")
        waited = io_wait(r) if part == "off_cpu_io" else None
        if waited:
            text += f"The handlers' waits on descriptors were mostly {waited}. "
        # only stacks with Python frames say where: a bare libc wrapper (a futex wake) would mislead
        stacks = [st for st in ctx.stacks(r, _wait_syscalls(part, waited), top=5) if _python(st)]
        if stacks:  # every call of the syscall is walked, not only those that blocked: the top two, with counts
            text += (f"Where the serving threads made that kind of call (--stacks, {stacks[0]['syscall']}): "
                     + "; ".join(f"{' ← '.join(frames)} ({count:,} calls)" for frames, count in _by_python(stacks)[:2])
                     + ". ")
        text += f"Look at {next_look}."
        others = sorted(((p, v) for p, v in tail.items() if p != part and v > 0), key=lambda kv: -kv[1])[:3]
        ev = {f"slowest 1%: {part}, mean (µs)": r2(value, 0), "slowest 1%: total, mean (µs)": r2(total, 0),
              "p99 of the total (µs)": r2(num(r, "breakdown.total_p99_us"), 0),
              f"mean request: {part} (µs)": r2(mean, 1),
              "slowest 1%: next parts (µs)": ", ".join(f"{p} {v:,.0f}" for p, v in others) or None,
              "requests followed": f"{num(r, 'breakdown.requests') or 0:,.0f}",
              "descriptor waited on (share of the handlers' waits)": waited,
              "mean request: off_cpu_io until a timer (µs)": r2(timer, 1),
              "stacks": stacks or None,
              # netprof watch has no loader: its row's round trip is the server time
              ("server time, mean" if schema.watched(r) else "loader's mean round trip")
              + " vs parts' sum (µs)":
                  f"{num(r, 'breakdown.rtt_mean_us') or 0:,.0f} vs {num(r, 'breakdown.parts_mean_us') or 0:,.0f}"}
        if part == "off_cpu_futex" and gil is not None and mean and gil >= 0.5 * mean:
            part = "off_cpu_futex, the GIL"  # (the title's share follows in parentheses: none here)
        elif timers:
            part = "off_cpu_io, the loop's timers"
        title = f"The tail is {part} ({100 * share:.0f}% of the slowest 1%): {where(r)}"
        # waiting for others or for a lock is what to fix; the handler's own work or sleep is what it was asked to do
        severity = "warning" if part in WAITS else "info"
        found.append(Anomaly.at(r, "tail_cause", severity, title, text, ev))
    return found


@rule("loader_queue", section="sockwait")
def loader_queue(ctx: Context) -> list[Anomaly]:
    """A ZeroMQ server measured through libzmq (`--zmq-client libzmq`, the default): the parts fall short of the
    loader's round trip by the loader's own queue. libzmq's I/O thread reads each answer (where loader_wait
    ends) and hands it to the loader's thread, which completes the request later; no part of the server's
    time covers that. Name it, and the option that removes it."""
    t, found = ctx.t, []
    for _, r in ctx.cells.iterrows():
        if r.get("reads") != "frames" or (r.get("zmq_client") or schema.RUN_SETTINGS["zmq_client"]) != "libzmq":
            continue
        rtt, parts = num(r, "breakdown.rtt_mean_us"), num(r, "breakdown.parts_mean_us")
        if not rtt or parts is None or rtt - parts < t.loader_queue_share * rtt:
            continue
        gap = rtt - parts
        text = (f"In {where(r)} {gap:,.0f} µs of the loader's {rtt:,.0f} µs mean round trip "
                f"({100 * gap / rtt:.0f}%) is in no part of the breakdown. The loader drove this ZeroMQ server "
                "through libzmq, as the reference harness does: libzmq's I/O thread read each answer (loader_wait "
                "ends there) and queued it for the loader's thread, which completed the request later. That queue "
                "is the loader's time, not the server's. With --zmq-client native the loader speaks ZMTP itself and "
                "reads each answer on the thread that times it: the round trip then holds no such queue.")
        ev = {"loader's mean round trip (µs)": r2(rtt, 0), "parts' sum (µs)": r2(parts, 0),
              "not in any part (µs)": r2(gap, 0), "loader_wait, to libzmq's read (µs)":
                  r2(num(r, "breakdown.mean_us.loader_wait"), 1)}
        found.append(Anomaly.at(r, "loader_queue", "info",
                                f"{100 * gap / rtt:.0f}% of the round trip is the loader's libzmq queue: {where(r)}",
                                text, ev))
    return found
