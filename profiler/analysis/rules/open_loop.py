"""Open-loop load (--rate): a server that could not keep up with the rate asked, a loader that fell
behind its own schedule, and where the latency–throughput curve bends (the knee) across the rates."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from netprof.profiler.core import units
from netprof.profiler.kit.rule_common import PAUSE_REF, WAITS, of, r2, where
from netprof.profiler.kit.rule_registry import Anomaly, Context, Thresholds, also_at, rule
from netprof.profiler.model import files, results, schema, stats
from netprof.profiler.model.stats import num


def _open(cells: pd.DataFrame) -> pd.DataFrame:
    """The open-loop cells (rate > 0) of the per-cell table."""
    return cells[schema.at_rate(cells)]


def _pct(v: float | None) -> str:
    """'48%'; with one decimal near 0 and 1 ('0.6%', '99.4%'), where the rounded whole would mislead."""
    return units.share(v, 1 if v is not None and (0 < v < 0.01 or 0.99 < v < 1) else 0)


def _pool(r) -> tuple[int, int | None]:
    """(connections that could carry the requests, the cap when the loader opened connections as requests needed
    them): with connections as needed (--max-connections above -c) a request waits behind only with every one of
    them busy, else (older rows, the cap at -c) when its -c connections were."""
    conns, cap = int(r.get("connections") or 1), num(r, "open_loop.max_connections")
    if cap is None or cap <= conns:
        return conns, None
    return int(num(r, "open_loop.conns_max") or cap), int(cap)


def _busy_phrase(r) -> str:
    """What a request behind found: 'their connection still waited for its 1 in flight' (-c connections only) or
    'all 1,000 connections the loader may open (--max-connections 1,000) had their 1 in flight'."""
    pipe = int(r.get("pipeline") or 1)
    most, cap = _pool(r)
    if cap is None:
        return f"their connection still waited for its {pipe} in flight"
    return (f"all {units.number(most)} connections the loader had open (--max-connections {units.number(cap)}) had "
            f"their {pipe} in flight")


def _load_state(r, t: Thresholds) -> tuple[bool, bool, bool]:
    """(short, queued, flat) of an open-loop cell: it answered less than 95% of the rate; more than 1% of its
    requests found their connection still waiting and queued in the loader; its p99 did not grow through the
    window (last slice < 2× the first; False without a timeline: older results, several loader hosts)."""
    share, behind = num(r, "open_loop.achieved_share"), num(r, "open_loop.behind_share")
    growth = num(r, "open_loop.p99_growth")
    return (share is not None and share < 1 - t.overload_shortfall,
            behind is not None and behind > t.overload_behind_share,
            growth is not None and growth < t.overload_growth)


def _backlog_s(r) -> float | None:
    """The requests still queued in the loader at the window's end as time of the rate's schedule (s): how far
    behind the server was when the window closed."""
    queued, rate = num(r, "open_loop.queued_at_end"), float(r.get("rate") or 0)
    return queued / rate if queued is not None and rate > 0 else None


@rule("overloaded", plots=("latency_time", "latency_load", "throughput", "latency"))
def overloaded(ctx: Context) -> list[Anomaly]:
    """The server fell behind the rate asked: it answered less than 95% of it, or more than 1% of the
    requests found their connection still waiting and queued in the loader while latency grew through the
    window (queued with flat latency is `connections_busy`: the loader's connections, not the server), or the
    requests still queued in the loader at the window's end were more of the schedule than a pause of the host
    (a backlog formed before the window need not grow 2× through it)."""
    t, found = ctx.t, []
    for _, r in _judged(ctx).iterrows():
        rate = float(r["rate"])
        share, behind = num(r, "open_loop.achieved_share"), num(r, "open_loop.behind_share")
        short, queued, flat = _load_state(r, t)
        backlog = _backlog_s(r)
        backlogged = backlog is not None and backlog >= t.overload_backlog_s
        if not (short or (queued and not flat) or backlogged):
            continue
        mps = num(r, "mps_mean")
        p99, p99_sent = num(r, "lat_us.p99"), num(r, "lat_sent_us.p99")
        # Every request that came due with every connection busy, below the cap too (the knee's lines say the
        # same share); `behind` alone is those past the cap or still unsent at the window's end.
        waited = num(r, "open_loop.waited_share")
        waited = behind if waited is None else waited
        ev = {"asked (requests/s)": r2(rate, 0), "achieved (msgs/s)": r2(mps, 0), "achieved share": _pct(share)}
        if _pool(r)[1] is not None:  # connections as needed: some waited below the cap
            ev["requests that waited in the loader for a connection"] = _pct(waited)
        ev |= {"requests behind (past the cap or unsent at the window's end)": _pct(behind),
               "latency p99 from the intended send (µs)": r2(p99, 0),
               "latency p99 from the actual send (µs)": r2(p99_sent, 0),
               "wait behind the connection p99 (µs)": r2(num(r, "open_loop.behind_late_us.p99"), 0),
               "queued in the loader at the window's end": r2(num(r, "open_loop.queued_at_end"), 1)}
        first, last = num(r, "open_loop.p99_first_slice_us"), num(r, "open_loop.p99_last_slice_us")
        if first is not None and last is not None:
            ev["p99 in the window's first slice (µs)"] = r2(first, 0)
            ev["p99 in the window's last slice (µs)"] = r2(last, 0)
        text = (f"{where(r)}: asked for {units.number(rate)}/s, the server answered "
                f"{units.rate(mps)}/s ({_pct(share)} of it)")
        text += (f", and {_pct(waited)} of the requests came due while {_busy_phrase(r)}, so they queued in the "
                 "loader. " if waited else ". ")
        text += ("The server could not keep up with this rate: requests pile up and wait longer the longer the load "
                 "runs")
        growth = num(r, "open_loop.p99_growth")
        if first is not None and last is not None and growth is not None and growth > 1:
            width = num(r, "open_loop.slice_s")
            span = f"{units.seconds(width)} " if width else "slice "
            text += (f" (the p99 of the requests answered in the window's first {span}was "
                     f"{units.duration_us(first)}, in its last {units.duration_us(last)}: {r2(growth, 1)}× as long)")
        text += ". "
        if backlogged and backlog is not None:
            queued_end = units.number(r2(num(r, "open_loop.queued_at_end"), 0))
            text += (f"At the window's end {queued_end} requests were still queued in the loader, "
                     f"{units.duration_us(1e6 * backlog)} of this rate's schedule: the server had fallen that far "
                     f"behind, longer than this kind of host stops a busy CPU (up to {PAUSE_REF.longest_ms} ms, "
                     f"{PAUSE_REF.source}). ")
            ev["backlog in the loader at the window's end, as schedule time (µs)"] = r2(1e6 * backlog, 0)
        if p99 is not None and p99_sent is not None:
            text += (f"Latency from each request's intended send time has p99 {units.duration_us(p99)}; from its "
                     f"actual send, {units.duration_us(p99_sent)}: the difference is the queue a closed-loop load, "
                     "or a tool that times from the send, would not show. ")
        text += "Its capacity is below this rate: ask for less, or find what limits it at a lower rate."
        title = f"Overloaded, {units.rate(mps)}/s answered: {where(r)}"  # its rate asked is in where()
        found.append(Anomaly.at(r, "overloaded", "warning", title, text, _try_evidence(r, ev)))
    return found


@rule("connections_busy", plots=("latency_time", "latency_load"))
def connections_busy(ctx: Context) -> list[Anomaly]:
    """More than 1% of the requests found their connection busy (`--pipeline` in flight; with connections opened as
    needed, every connection up to --max-connections, the cap reached) and waited in the loader, yet the server
    kept up: it answered the rate and latency stayed flat through the window. The limit was the loader's
    connections: each carries a request every connections ÷ rate seconds, and an answer slower than that makes
    the next one wait."""
    t, found = ctx.t, []
    for _, r in _judged(ctx).iterrows():
        short, queued, flat = _load_state(r, t)
        backlog = _backlog_s(r)
        if short or not queued or not flat or (backlog is not None and backlog >= t.overload_backlog_s):
            continue  # the server fell behind (overloaded), or nothing waited
        rate, pipe = float(r["rate"]), int(r.get("pipeline") or 1)
        conns, cap = _pool(r)
        if cap is not None and conns < cap:
            # Opened as needed and the cap not reached: the loader chose not to open more (the server
            # queueing, PROTOCOL.md), and its "behind" are requests still unsent at the window's end, not
            # requests its connections could not carry (knee.py's limited_by says the same).
            continue
        behind, p99 = num(r, "open_loop.behind_share"), num(r, "lat_us.p99")
        first, last = num(r, "open_loop.p99_first_slice_us"), num(r, "open_loop.p99_last_slice_us")
        spacing = 1e6 * conns / rate  # µs between requests on one connection
        width = num(r, "open_loop.slice_s")
        ev = {"asked (requests/s)": r2(rate, 0), "achieved share": _pct(num(r, "open_loop.achieved_share")),
              "requests behind (past the cap or unsent at the window's end)": _pct(behind),
              "time between requests on one connection (µs)": r2(spacing, 0),
              "latency p99 from the intended send (µs)": r2(p99, 0),
              "p99 in the window's first slice (µs)": r2(first, 0), "p99 in the window's last slice (µs)": r2(last, 0),
              "wait behind the connection p99 (µs)": r2(num(r, "open_loop.behind_late_us.p99"), 0)}
        text = (f"{where(r)}: {_pct(behind)} of the requests came due while {_busy_phrase(r)}, and waited in the "
                f"loader; yet the server answered the rate and its latency did not grow "
                f"through the window (p99 {units.duration_us(first)} in the first {units.seconds(width)}, "
                f"{units.duration_us(last)} in the last): it kept up. At {units.number(rate)}/s over "
                f"{units.number(conns)} "
                f"connections, each connection carries a request every {units.duration_us(spacing)}, and an answer "
                "slower than that makes the next one wait. The wait is in the latency from the intended send (p99 "
                f"{units.duration_us(p99)}), so the figures stand, but the server never saw more than {conns * pipe} "
                "requests at once: " + ("more connections (-c, or --max-connections above it: the loader then opens "
                                        "them as requests need them)" if cap is None else "a higher --max-connections")
                + " or a deeper --pipeline offer it the load as it arrives.")
        title = f"The loader's connections were the limit, not the server: {where(r)}"
        found.append(Anomaly.at(r, "connections_busy", "info", title, text, _try_evidence(r, ev)))
    return found


# What a near timer costs the loader on netprof's reference host (bench/RESULTS.md, "Open loop: the loader's
# timers", bench/timer_cost.py, 2026-11-27): arming and disarming a timer due in 20 µs, and the loader's CPU per
# request at --rate 50k. Quoted in the finding so that a user can set this host's lateness beside it.
TIMER_REF = {"source": "bench/timer_cost.py on netprof's reference host, 2026-11-27",
             "near_timer_us": 11.1, "loader_cpu_us_at_50k": 15.5}


@rule("loader_late", plots=("latency_load",))
def loader_late(ctx: Context) -> list[Anomaly]:
    """The loader sent requests late on a free connection (past its lateness threshold): it, not the
    server, fell behind its schedule, so the cell's open-loop figures are suspect."""
    t, found = ctx.t, []
    brief: dict[tuple, list[tuple[float, Anomaly]]] = {}  # per server: the cells where it was few and brief
    for _, r in _judged(ctx).iterrows():
        late = num(r, "open_loop.loader_late")
        if late is None or late < t.loader_late_min:
            continue
        threshold = num(r, "open_loop.loader_late_threshold_us")
        p99, worst = num(r, "open_loop.schedule_late_us.p99"), num(r, "open_loop.schedule_late_us.max")
        ev = {"lateness threshold (µs)": r2(threshold, 1), "requests the loader sent late": r2(late, 1),
              "schedule lateness p50 (µs)": r2(num(r, "open_loop.schedule_late_us.p50"), 1),
              "schedule lateness p99 (µs)": r2(p99, 1), "schedule lateness max (µs)": r2(worst, 1),
              "loader CPU (share of its CPUs)": r2(num(r, "loader_cpu.cpu_frac"))}
        sent = num(r, "open_loop.sent")
        share = late / sent if sent else None
        ev["share of the requests sent"] = _pct(share) if share is not None else None
        text = (f"For {where(r)} the loader sent {late:.0f} requests"
                + (f" ({_pct(share)} of those it sent)" if share is not None else "")
                + f" more than {units.duration_us(threshold)} after their intended time although their connection "
                f"was free (schedule lateness p99 {units.duration_us(p99)}, worst {units.duration_us(worst)}): the "
                "load generator itself fell behind its schedule. ")
        serious = (share is None or share > t.loader_late_warning_share
                   or (p99 is not None and threshold is not None and p99 > threshold))
        rate = float(r["rate"])
        text += ("This cell's rate and latency describe the loader as much as the server: give the loader more "
                 "CPUs or threads (--loader-threads), ask for a lower rate, or run on a quieter machine."
                 if serious else "Few and brief: the cell's figures stand, but the loader was disturbed (a busy "
                 f"machine, or too few CPUs for it). {late:.0f} late sends are {units.duration_us(1e6 * late / rate)} "
                 "of this rate's schedule, what pauses of the loader's CPU adding up to that long leave behind: on "
                 f"netprof's reference host a busy CPU stops for 1 ms or more {PAUSE_REF.per_s} times a second, "
                 f"for up to {PAUSE_REF.longest_ms} ms, when both its CPUs are busy ({PAUSE_REF.source}).")
        ev["late sends as schedule time (µs)"] = r2(1e6 * late / rate, 0)
        p50 = num(r, "open_loop.schedule_late_us.p50")
        text += (f" For scale: on this host this cell's sends came {units.duration_us(p50)} after their intended "
                 f"time at the median; on netprof's reference host a timer due in 20 µs costs "
                 f"{units.duration_us(TIMER_REF['near_timer_us'])} to arm and disarm, and the loader spends "
                 f"{units.duration_us(TIMER_REF['loader_cpu_us_at_50k'])} of CPU per request at 50k/s "
                 f"({TIMER_REF['source']}).")
        ev["reference host: µs to arm and disarm a timer due in 20 µs"] = TIMER_REF["near_timer_us"]
        if serious:
            found.append(Anomaly.at(r, "loader_late", "warning", f"The loader fell behind its schedule: {where(r)}",
                                    text, _try_evidence(r, ev)))
            continue
        a = Anomaly.at(r, "loader_late", "info", f"The loader fell behind its schedule, briefly: {where(r)}", text,
                       _try_evidence(r, ev))
        brief.setdefault(tuple(a.cell[k] for k in schema.SERVER_KEYS), []).append((late, a))
    # Few and brief at several rates (this host's pauses reach every rate): one card per server, the cell with the
    # most late sends telling it, the others listed.
    for same in brief.values():
        rep = max(same, key=lambda la: la[0])[1]
        found.append(also_at(rep, [a for _, a in same if a is not rep]))
    return found


# Per-message figures that explain a bend: how each moved from the lowest rate to the knee. The labels are the
# evidence keys (summary.json keeps them); the text says them in the cell's words (units.reword: per request).
SYSCALLS = "syscalls"  # every counted syscall per message (stats.syscalls_of), when the cell ran with probes
RING = "ring"  # every io_uring operation per message (stats.ring_of): kernel work beside the syscalls (uvloop's)
KNEE_FIGURES = (("syscalls per message", SYSCALLS, units.per_message),
                ("io_uring operations per message", RING, units.per_message),
                ("user CPU per message", "cpu_us_per_msg.user", units.duration_us),
                ("kernel CPU per message", "cpu_us_per_msg.sys", units.duration_us),
                ("context switches per message", "ctx_switches_per_msg", units.per_message))


@rule("latency_knee", plots=("latency_load", "latency"))
def latency_knee(ctx: Context) -> list[Anomaly]:
    """Across the rates of one cell (all else equal): the first rate whose p99 is 3× the lowest rate's and whose
    achieved share fell, or whose requests waited in the loader (a loader that opens connections as requests need
    them opens none while the server queues them, PROTOCOL.md "Connections as needed": the queue then forms in the
    loader and the rate is still achieved): the latency–throughput curve bends between it and the rate before."""
    t, found = ctx.t, []
    if (decided := _knee_verdict(ctx)) is not None:  # a `netprof knee` run: its verdict is the bend
        g, i, verdict = decided
        if i > 0:
            return [_knee_anomaly(g, i, t, verdict)]
        top = _ceiling_anomaly(ctx, g, t, verdict) if i < 0 and not g.empty else None
        return [top] if top is not None else []
    cells = _open(ctx.cells)
    keys = [k for k in schema.CELL_KEYS if k in cells and k != "rate"]
    if cells.empty:
        return []
    for _, g in cells.groupby(keys, dropna=False, sort=False):
        g = g.sort_values("rate")
        if len(g) < 2:
            continue
        knee = _knee(g, t)
        if knee is not None:
            found.append(_knee_anomaly(g, knee, t))
    return found


def _knee(g: pd.DataFrame, t: Thresholds) -> int | None:
    """Position in `g` (sorted by rate) of the first rate past the knee, or None."""
    base = g.iloc[0]
    p99_0, share_0 = num(base, "lat_us.p99"), num(base, "open_loop.achieved_share")
    if not p99_0 or share_0 is None:
        return None
    for i in range(1, len(g)):
        r = g.iloc[i]
        p99, share = num(r, "lat_us.p99"), num(r, "open_loop.achieved_share")
        if p99 is None or share is None or p99 <= t.knee_factor * p99_0:
            continue
        if share < share_0 - t.knee_share_drop or _waited_rise(base, r) >= t.knee_waited_rise:
            return i
    return None


KNEE_TRIES = "the knee's tries these figures are from (rounds)"  # the evidence key
# knee_cells' columns: the rounds a rate's figures are from ("7, 8, 9"), and whether the rate passed
KNEE_ROUNDS, KNEE_MET = "knee_rounds", "knee_met"


def _knee_doc(df: pd.DataFrame, out_dir: Path | None) -> dict | None:
    """knee.json beside the rows (a `netprof knee` run) with its probes, or None."""
    if out_dir is None or "round" not in df:
        return None
    try:
        doc = results.read_json(out_dir, files.KNEE_JSON)
    except (OSError, ValueError):  # InputError (a link, another user's file) too: the rules read the cells
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("probes"), list) else None


def _decided(doc: dict) -> dict[float, tuple]:
    """rate -> (the round of the try that decided it, whether it passed): the last probe at the rate (a second look
    wins), its last attempt (the first that passed or the last that failed)."""
    decided = {}
    for probe in doc["probes"]:
        if probe.get("attempts"):
            decided[float(probe["rate"])] = (probe["attempts"][-1].get("round"), bool(probe.get("met")))
    return decided


def knee_cells(df: pd.DataFrame, out_dir: Path | None) -> pd.DataFrame | None:
    """A knee run's open-loop cells as its verdict reads them: a rate that passed is its passing try (the search
    tries a rate until one passes, and the tables' mean over a rate's tries mixes failed ones with it: a rate the
    knee passed read "could not keep up" at 102% of it achieved, and its p99 over the objective); a rate that
    failed is the mean of its tries, every one of which failed. Each cell says its rounds (KNEE_ROUNDS) and whether
    it passed (KNEE_MET). None outside a knee run."""
    if (doc := _knee_doc(df, out_dir)) is None:
        return None
    decided = _decided(doc)
    if not decided:  # a knee.json from before its probes kept their attempts: the cells over their rounds
        return None
    rounds: dict[float, list] = {}  # rate -> the rounds its figures are from
    for rate, n in zip(df["rate"].fillna(0).astype(float), df["round"]):
        if rate in decided and (not decided[rate][1] or n == decided[rate][0]):
            rounds.setdefault(rate, []).append(n)
    rows = df[[n in rounds.get(float(r), ()) for r, n in zip(df["rate"].fillna(0), df["round"])]]
    if rows.empty:
        return None
    g = _open(stats.aggregate(rows)).copy()
    g[KNEE_ROUNDS] = [", ".join(str(int(n)) for n in rounds[float(r)]) for r in g["rate"]]
    g[KNEE_MET] = [decided[float(r)][1] for r in g["rate"]]
    return g


def _knee_cells(ctx: Context) -> pd.DataFrame | None:
    """knee_cells of ctx's run, read once per detect (ctx.memo)."""
    if "knee_cells" not in ctx.memo:
        ctx.memo["knee_cells"] = knee_cells(ctx.df, ctx.out_dir)
    return ctx.memo["knee_cells"]


def _judged(ctx: Context) -> pd.DataFrame:
    """The open-loop cells the per-cell rules judge: a knee run's as its verdict reads them (knee_cells), else
    each cell over its rounds."""
    g = _knee_cells(ctx)
    return _open(ctx.cells) if g is None else g


def _try_evidence(r, ev: dict) -> dict:
    """ev with the knee's tries a card's figures are from (a knee run: not always the tables' mean over all the
    rate's tries)."""
    if KNEE_ROUNDS in r and isinstance(r[KNEE_ROUNDS], str):
        ev[KNEE_TRIES] = r[KNEE_ROUNDS] + (" (the one that passed)" if r[KNEE_MET] else " (each failed)")
    return ev


def _knee_verdict(ctx: Context) -> tuple[pd.DataFrame, int, str] | None:
    """In a `netprof knee` run (knee.json beside the rows), the bend is the knee's verdict, not the rule's reading
    of each rate's mean over its tries (2026-12-02: the mean of 36,590/s's tries bent at p99 128 ms where the
    knee, by its tries, passed up to 41,444/s). Returns the rates as the verdict read them (knee_cells), sorted by
    rate; the position of the lowest rate that failed above the knee (−1: every rate up to the closed-loop
    ceiling passed; 0: no bend to explain: no knee, the loader or the host ran out); and the verdict's sentence.
    None outside a knee run."""
    if (doc := _knee_doc(ctx.df, ctx.out_dir)) is None:
        return None
    g = _knee_cells(ctx)
    if g is None:  # its probes kept no attempts (older): nothing to read the verdict in
        return ctx.cells.iloc[0:0], 0, ""
    g = g.sort_values("rate").reset_index(drop=True)
    lo, hi = (doc.get("bounds") or [None, None])[:2]
    rates = [float(r) for r in g["rate"]]
    if doc.get("knee") is None or doc.get("stop") != "steps" or hi is None:
        return g, 0, ""
    slo = (doc.get("slo") or {}).get("text", "its objective")
    verdict = (f"This is netprof knee's verdict against {slo} ({files.KNEE_JSON}): each rate's figures here are its "
               "try that passed, or for a rate that failed the mean of its tries. ")
    if float(hi) not in rates or g.loc[rates.index(float(hi)), KNEE_MET]:
        return g, -1, verdict
    return g, rates.index(float(hi)), verdict


def _waited_rise(base, r) -> float:
    """How much the share of requests that waited in the loader (open_loop.waited_share) rose from `base` to `r`."""
    w0, w = num(base, "open_loop.waited_share"), num(r, "open_loop.waited_share")
    return w - (w0 or 0.0) if w is not None else 0.0


def _figure(r, col: str) -> float | None:
    if col == SYSCALLS:
        per = stats.syscalls_of(r)
        return sum(per.values()) if per else None
    if col == RING:
        return sum(stats.ring_of(r).values()) or None
    return num(r, col)


def _queue_share(r) -> tuple[float, str] | None:
    """How much of a rate's slowest requests was the socket queue: with --breakdown, queue_wait's share of the
    slowest 1% (their composition); with --sockwait, the socket-queue wait's p99 against the round trip's p99
    from the send (not a partition: two p99s). (share, how it was measured), or None without either."""
    tail = [num(r, k) for k in r.index if str(k).startswith("breakdown.tail_us.")]
    total = sum(max(0.0, v) for v in tail if v is not None)
    queue = num(r, "breakdown.tail_us.queue_wait")
    if queue is not None and total > 0:
        return queue / total, "of the slowest 1%'s time (--breakdown)"
    wait, p99 = num(r, "sockwait.wait_p99_us"), num(r, "lat_sent_us.p99") or num(r, "lat_us.p99")
    if wait is not None and p99:
        return min(1.0, wait / p99), "socket-queue wait p99 against the p99 from the send (--sockwait)"
    return None


# Calls a handler blocks its thread in (sleeping, a lock, another service, the disk): where a loop whose turns were
# all taken while its CPU idled spent them (a loop's own wait, WAITS, is not one: it ran out).
BLOCKING = ("clock_nanosleep", "nanosleep", "futex", "connect", "fsync", "fdatasync", "flock", "wait4")


def _waits(r) -> float | None:
    """The event loop's waits per message (epoll_wait and its kin), when the cell ran with probes."""
    per = stats.syscalls_of(r)
    return of(per, WAITS) if per else None


def _blocked_in(r) -> str:
    """', in clock_nanosleep (1.00 per message)': the blocking calls (BLOCKING) a cell made at least once every two
    messages, most first; else where to look (--breakdown)."""
    per = stats.syscalls_of(r) or {}
    calls = sorted(((v, k) for k, v in per.items() if k in BLOCKING and v >= 0.5), reverse=True)
    if not calls:
        return ", in a call its syscall counts do not name (--breakdown shows where the slowest requests waited)"
    return ", in " + ", ".join(f"{k} ({units.per_message(v)} per message)" for v, k in calls)


def _limit(base, at, t: Thresholds, there: str = "", above: tuple = ()) -> tuple[str, str] | None:
    """What ran out at the knee rate `at` (against the lowest rate `base`), checked in this order: the loader
    (then the knee is not the server's), the server's CPU, its run queue (a thread ready, no CPU for it: from the
    breakdown's slowest requests, else from its threads' schedstat, row `sched`), the
    loop's batching (no idle turn left: each wait returns more ready sockets), and last the server's CPU near its
    limit at `at` and at it at one of the rates tried `above` it. `there`: where `at` was measured ("at 1,000/s"
    by default). (name, sentence) or None."""
    def pct(r, col):
        return _pct(num(r, col))
    there = there or f"at {units.number(at['rate'])}/s"
    lf = num(at, "loader_cpu.cpu_frac")
    if lf is not None and lf >= t.knee_loader_cpu:
        return "the loader's CPU", (f"the loader's CPU: it used {_pct(lf)} of its CPUs {there}, so this bend is "
                                    "the load generator's as much as the server's (give it more CPUs or threads)")
    busy = num(at, "cpu.busy_frac")
    if busy is not None and busy >= t.knee_cpu_busy:
        return "the server's CPU", (f"the server's CPU: busy {_pct(busy)} of one CPU {there}, against "
                                    f"{pct(base, 'cpu.busy_frac')} at {units.number(base['rate'])}/s")
    tail = {str(k)[len("breakdown.tail_us."):]: num(at, k) for k in at.index if str(k).startswith("breakdown.tail_us.")}
    total = sum(max(0.0, v) for v in tail.values() if v is not None)
    runq = tail.get("runqueue") or 0.0
    if total > 0 and runq / total >= t.knee_runqueue_share:
        return "the run queue", (f"the run queue: the slowest 1% of requests spent {_pct(runq / total)} "
                                 "of their time ready to run with no CPU for them (another thread, or the loader, "
                                 "on the server's CPU)")
    queued = stats.threads_waiting(at, t.knee_runq_threads)
    if queued is not None:
        # without --breakdown: the server's own threads ready to run with no CPU for them (/proc schedstat, stats.sched)
        waiting, threads = queued
        before = num(base, "sched.runq_mean")
        return "the run queue", (f"the run queue: on average {waiting:.1f} of the server's {threads:.0f} threads "
                                 f"were ready to run with no CPU for them {there} (/proc schedstat)"
                                 + (f", against {before:.1f} at {units.number(base['rate'])}/s"
                                    if before is not None else ""))
    w0, w = _waits(base), _waits(at)
    if w0 and w is not None and w <= (1 - t.knee_batching_drop) * w0:
        idle = (f"its waits per message fell from {units.per_message(w0)} to {units.per_message(w)} (each wait "
                "returned more ready sockets: no idle turn was left)")
        if busy is not None and busy < t.knee_blocked_busy:  # no idle turn, yet the CPU idle: the turns blocked
            return "the loop's time, blocked off the CPU", (
                f"the loop's time, blocked off the CPU: {idle}, yet the server was busy only {_pct(busy)} of one "
                f"CPU {there}: its turns went waiting off the CPU{_blocked_in(at)}. A call that blocks holds the "
                "whole loop: while it blocks no other connection is served; an awaitable call, or more workers, "
                "lifts the limit")
        return "the loop's idle time", (f"the loop's idle time: {idle}"
                                        + (f"; busy {_pct(busy)} of one CPU" if busy is not None else ""))
    # A queue's tail grows as 1 / (1 − busy): latency bends before the CPU is wholly busy, and the rates tried above
    # the knee show where it was going (2026-12-04: 88% busy at the rate that failed, 97% at the next one up).
    busiest = max(((b, r) for r in above if (b := num(r, "cpu.busy_frac")) is not None), default=None,
                  key=lambda br: br[0])
    if busy is not None and busy >= t.knee_cpu_near and busiest is not None and busiest[0] >= t.knee_cpu_busy:
        return "the server's CPU", (f"the server's CPU, near its limit: busy {_pct(busy)} of one CPU {there} and "
                                    f"{_pct(busiest[0])} at {units.number(busiest[1]['rate'])}/s, against "
                                    f"{pct(base, 'cpu.busy_frac')} at {units.number(base['rate'])}/s")
    return None


def _ran_out(base, at, t: Thresholds, ev: dict, place: str, there: str = "", above: tuple = ()) -> str:
    """The sentence naming what ran out first `place` ("at the knee"), read in `at` against `base` and the rates
    tried `above` it (_limit), its name added to `ev`; or, when nothing netprof measures reached its limit, where to
    look."""
    limit = _limit(base, at, t, there, above)
    if limit is None:
        return (f"No resource netprof measures reached its limit {place} (the server's CPU, the loader's, the run "
                "queue, the loop's idle time): run with --breakdown for where the slowest requests waited. ")
    ev["what ran out first"] = limit[0]
    return f"What ran out first {place}: {limit[1]}. "


def _rates_evidence(g: pd.DataFrame) -> dict:
    """Each rate's achieved share and p99, its socket queue's share of the slowest requests, and the requests that
    waited in the loader: the evidence of a bend, rate by rate."""
    ev: dict = {}
    for _, r in g.iterrows():
        at = f"at {units.number(r['rate'])}/s"
        ev[f"{at}: achieved, p99 from the intended send"] = (
            f"{units.rate(num(r, 'mps_mean'))}/s ({_pct(num(r, 'open_loop.achieved_share'))}), "
            f"{units.duration_us(num(r, 'lat_us.p99'))}")
        if (q := _queue_share(r)) is not None:
            ev[f"{at}: the socket queue's share"] = f"{_pct(q[0])} {q[1]}"
        if (w := num(r, "open_loop.waited_share")) is not None:
            ev[f"{at}: waited in the loader for a connection, p99 from the actual send"] = (
                f"{_pct(w)}, {units.duration_us(num(r, 'lat_sent_us.p99'))}")
    return ev


def _ceiling_anomaly(ctx: Context, g: pd.DataFrame, t: Thresholds, verdict: str) -> Anomaly | None:
    """A knee run in which every rate up to the closed-loop ceiling passed: the curve did not bend below what the
    server answers flat out, so the resource that ran out is the one that sets that ceiling, read in the ceiling's
    best closed-loop cell (rate 0) against the lowest rate. None without a ceiling cell."""
    closed = ctx.df[(ctx.df["rate"].fillna(0) == 0) & (ctx.df["status"] == "ok")] if "status" in ctx.df else None
    if closed is None or closed.empty:
        return None
    best = stats.aggregate(closed.loc[[closed["msgs_per_sec"].astype(float).idxmax()]]).iloc[0]
    base, top = g.iloc[0], g.iloc[-1]
    ceiling, knee = num(best, "mps_mean"), float(top["rate"])
    ev = _rates_evidence(g)
    conns = units.number(best["connections"])
    ev["the closed-loop ceiling (best cell)"] = f"{units.rate(ceiling)}/s at {conns} connections"
    text = (f"{where(top)}: the latency–throughput curve did not bend below the server's closed-loop ceiling. Every "
            f"rate tried up to {units.number(knee)}/s met the objective (p99 from the intended send "
            f"{units.duration_us(num(base, 'lat_us.p99'))} at {units.number(base['rate'])}/s, "
            f"{units.duration_us(num(top, 'lat_us.p99'))} at {units.number(knee)}/s), and {units.number(knee)}/s is "
            f"{_pct(knee / ceiling if ceiling else None)} of the {units.rate(ceiling)}/s it answers flat out "
            f"(closed loop, {conns} connections, no wait between requests). " + verdict)
    text += _ran_out(base, best, t, ev, "at the ceiling",
                     there=f"in the closed-loop ceiling's cell ({units.rate(ceiling)}/s)")
    text += f"Its usable capacity at this latency is its ceiling, about {units.rate(ceiling)}/s."
    title = f"Latency knee at the closed-loop ceiling, {units.rate(ceiling)}/s: {top['backend']}"
    return Anomaly.at(top, "latency_knee", "info", title, text, ev)


def _knee_anomaly(g: pd.DataFrame, i: int, t: Thresholds, verdict: str = "") -> Anomaly:
    """The bend between g's rates i − 1 and i (sorted by rate), explained from the figures at every rate;
    `verdict`: what decided it, when not the rule (a knee run)."""
    base, before, at = g.iloc[0], g.iloc[i - 1], g.iloc[i]
    lo, hi = float(before["rate"]), float(at["rate"])
    ev = _rates_evidence(g)
    moved = []
    for label, col, fmt in KNEE_FIGURES:
        a, b = _figure(base, col), _figure(at, col)
        if a and b is not None and abs(b - a) / a >= t.knee_change:
            ev[f"{label} at {units.number(base['rate'])}/s → {units.number(hi)}/s"] = f"{fmt(a)} → {fmt(b)}"
            moved.append(f"{units.reword(label, at.get('protocol'))} {'rose' if b > a else 'fell'} from {fmt(a)} to "
                         f"{fmt(b)}")
    p99_0, p99 = num(base, "lat_us.p99"), num(at, "lat_us.p99")
    text = (f"{where(at)}: the latency–throughput curve bends between {units.number(lo)}/s and {units.number(hi)}/s. "
            f"At {units.number(hi)}/s the p99 from the intended send is {units.duration_us(p99)}, "
            f"{(p99 or 0) / (p99_0 or 1):.0f}× its {units.duration_us(p99_0)} at {units.number(base['rate'])}/s, and "
            f"the server answered {_pct(num(at, 'open_loop.achieved_share'))} of the rate asked "
            f"({_pct(num(base, 'open_loop.achieved_share'))} at the lowest rate): past the knee requests queue. ")
    text += verdict
    if _waited_rise(base, at) >= t.knee_waited_rise:
        text += (f"They queued in the loader: {_pct(num(at, 'open_loop.waited_share'))} of the requests at "
                 f"{units.number(hi)}/s came due with every connection busy and waited for one "
                 f"({_pct(num(base, 'open_loop.waited_share'))} at {units.number(base['rate'])}/s), as a user "
                 "arriving then would wait for a server that answers slower than they arrive (the loader opens no "
                 "connection while the round trip is over twice its unqueued one, the server queueing, nor beyond what "
                 "the rate needs at that round trip: more connections would only move the queue into its "
                 "sockets); from each request's actual send the p99 "
                 f"is {units.duration_us(num(at, 'lat_sent_us.p99'))}. ")
    per, one = units.per_unit(at.get("protocol")), units.exchange(at.get("protocol"))
    text += ((f"{per.capitalize()}, between the lowest rate and the knee: " + "; ".join(moved) + ". ") if moved else
             f"No per-{one} figure moved by a quarter on the way (run with probes for syscalls {per}). ")
    q0, q = _queue_share(base), _queue_share(at)
    if q0 is not None and q is not None:
        text += (f"The socket queue's share of the slowest requests went from {_pct(q0[0])} at "
                 f"{units.number(base['rate'])}/s to {_pct(q[0])} at {units.number(hi)}/s ({q[1]}): "
                 + ("the requests wait unread for a busy server. " if q[0] >= 0.5 else
                    "most of their time is not the socket queue. "))
    text += _ran_out(base, at, t, ev, "at the knee", above=tuple(r for _, r in g.iloc[i + 1:].iterrows()))
    text += f"Its usable capacity, at this latency, is below {units.number(hi)}/s."
    title = f"Latency knee between {units.number(lo)}/s and {units.number(hi)}/s: {at['backend']}"
    return Anomaly.at(at, "latency_knee", "info", title, text, ev)
