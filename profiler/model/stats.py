"""Every metric netprof derives from raw counts, computed in one place (their names, labels and units: metrics.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from netprof.profiler.model import metrics, schema, tdist

NOISY_CV = 0.10  # a cell whose coefficient of variation across rounds exceeds this is "noisy"
ACTIVE_SHARE_OF_MESSAGES = 0.95


def jain_index(counts: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index: 1 = perfectly even, 1/n = one connection got everything."""
    x = np.asarray(counts, dtype=float)
    if x.size == 0 or not x.any():
        return float("nan")
    return float(x.sum() ** 2 / (x.size * (x * x).sum()))


def active_share(counts: Sequence[float] | np.ndarray, of_messages: float = ACTIVE_SHARE_OF_MESSAGES) -> float:
    """Smallest share of connections that together handled `of_messages` of all messages.

    Fair service gives ≈ of_messages (0.95); network_ping_test's "active vs stagnant" split gives a tiny value.
    """
    x = np.sort(np.asarray(counts, dtype=float))[::-1]
    total = x.sum()
    if x.size == 0 or total <= 0:
        return float("nan")
    needed = int(np.searchsorted(np.cumsum(x), of_messages * total - 1e-9) + 1)
    return min(needed, x.size) / x.size


def fairness(counts: Sequence[int]) -> dict:
    x = np.asarray(counts, dtype=float)
    if x.size == 0:
        return {}
    p = np.percentile(x, [5, 50, 95])
    return {
        "min": float(x.min()),
        "p5": float(p[0]),
        "p50": float(p[1]),
        "p95": float(p[2]),
        "max": float(x.max()),
        "jain": jain_index(x),
        "active_share": active_share(x),
        "idle": int((x == 0).sum()),  # connections that exchanged no message in the window
    }


def sched(delta: Mapping[str, float], duration_s: float | None, turns: Sequence[int] | None,
          waiting: int | None) -> dict:
    """The server's threads against its CPUs over a window (/proc schedstat; probes.proc.proc_delta and
    turns_between): `runq_mean` threads runnable but waiting for a CPU on average (their waits summed ÷ the time:
    Little's law), each turn on a CPU `turn_us` long and waited for `wait_per_turn_us`; the `threads` alive at both
    its ends, their turns each (`turns_p5`, `turns_p50`, `turns_max`), and `waiting_no_turn`: those that had none
    and were waiting for a CPU at its end. The kernel adds a wait to schedstat when it ends, so a window a few waits
    long takes in some that began before it (cpp_th at 1000 connections: waits of ~0.2 s, 1,036 "waiting" of 1,001
    threads over 3 s): `runq_mean` is capped at the threads. `threads_exited` in the window took their figures with
    them (a server that ends threads as it goes; the loader holds its connections past the window's last mark,
    RunRequest.hold, so a thread per connection is there when it is read)."""
    out: dict = {"threads_exited": delta.get("threads_exited")}
    n = delta.get("turns") or 0
    if duration_s:
        out["runq_mean"] = min(delta.get("runq_s", 0.0) / duration_s, len(turns) if turns else math.inf)
    if n > 0:
        out["turn_us"] = 1e6 * delta.get("oncpu_s", 0.0) / n
        out["wait_per_turn_us"] = 1e6 * delta.get("runq_s", 0.0) / n
    if turns:
        p = np.percentile(np.asarray(turns, dtype=float), [5, 50])
        out |= {"threads": len(turns), "turns_p5": float(p[0]), "turns_p50": float(p[1]),
                "turns_max": float(max(turns)), "waiting_no_turn": waiting}
    return out


def ratio(count: float, messages: int) -> float | None:
    """count per message, None without messages."""
    return count / messages if messages else None


def counted_span(messages: int, window: tuple[float, float] | None, read: tuple[float, float],
                 load_runs_on: bool) -> dict:
    """The loader's `messages` of a window [t_start, t_stop) (its clock) carried over to the span the probes'
    counters were really read over (`read`: netprof's clock, each edge when it heard the loader's mark: a few
    ms after it, over 100 ms when the host stalls one read and not the other). Counts ÷ messages compare
    counters and messages of the same span only so: `messages` × loaded read span ÷ window span, the window's
    own rate carried over the lag. The load runs before any window (warm-up, guards); after it only when
    `load_runs_on` (a probed sub-window: the guard and the unprobed part follow), else the read span is cut at
    t_stop (the loader stops there). The group `counted` of a row: {loader_messages, messages, span_s (the
    loaded read span), start_heard_ms, stop_heard_ms}. Without the window's bounds on this clock (a loader on
    another host) the messages are the window's, the rest None."""
    if window is not None and window[1] > window[0]:
        span = (read[1] if load_runs_on else min(read[1], window[1])) - read[0]
        if span > 0:
            return {"loader_messages": messages, "messages": round(messages * span / (window[1] - window[0])),
                    "span_s": span, "start_heard_ms": 1e3 * (read[0] - window[0]),
                    "stop_heard_ms": 1e3 * (read[1] - window[1])}
    return {"loader_messages": messages, "messages": messages, "span_s": None, "start_heard_ms": None,
            "stop_heard_ms": None}


def probe_cost(unprobed_rate: float | None, probed_rate: float | None) -> float | None:
    """The probes' cost in one cell: 1 − probed/unprobed msgs/s (negative = within noise, faster)."""
    if not unprobed_rate or probed_rate is None:
        return None
    return 1.0 - probed_rate / unprobed_rate


def probe_cpu_cost(unprobed_us: float | None, probed_us: float | None) -> float | None:
    """The probes' cost in one cell's server CPU: probed/unprobed on-CPU µs per message − 1 (positive: the
    messages cost more with the probes attached; negative = within noise). At a set rate (--rate) every part of
    the window answers the rate asked, so this, not probe_cost's msgs/s, is where the probes show."""
    if not unprobed_us or probed_us is None:
        return None
    return probed_us / unprobed_us - 1.0


def unprobed_drift(before_rate: float | None, after_rate: float | None) -> float | None:
    """How far one cell's rate moved with no probe attached: |after − before| over their mean, the
    unprobed parts before and after the probed sub-window. The cell's own noise floor for its
    probe_cost: with no probe at all, one window's probed-vs-unprobed figure moves about this much
    (bench/RESULTS.md, probe_window.py --edges). None when a part is empty."""
    if not before_rate or not after_rate:
        return None
    return abs(after_rate - before_rate) / ((before_rate + after_rate) / 2)


def open_loop(ol: Mapping, msgs_per_sec: float | None, rate: float | None,
              slices: Sequence[Mapping] = ()) -> dict:
    """An open-loop cell's `open_loop` group from the loader's stats of the same name (PROTOCOL.md,
    "Open loop"): its counts and lateness percentiles, flat ("behind_late_us.p99"), the connections it
    opened as requests needed them ("Connections as needed": `max_connections`, `conns_max`, `conns_opened`,
    `waited_connect`, `waited_slot`, `messages_on_opened`, `connect_us.p50/p99/max`; None from older loaders), plus two
    shares: `behind_share` = requests due in the window that waited for a connection with every one busy and
    the cap reached (without connections as needed: their `-c` connections busy), whether sent by the window's
    end (`behind`) or still waiting then (`intended` − `sent`: under a deep overload most of them), ÷ those due
    in the window; `waited_share` = those and the ones that waited below the cap (for a slot of a connection
    already open, or for a connection opened for them: `waited_slot`, `waited_connect`) ÷ those due: every
    request that came due with every connection busy and waited in the loader (the behind share alone from
    older loaders); and
    `achieved_share` = msgs/s achieved ÷ the rate asked (1: the server kept up).
    With the window's `slices` (timeline_rows) of `slice_s` seconds: the p99 of its first and of its last
    slice that answered anything (`p99_first_slice_us`, `p99_last_slice_us`) and their ratio `p99_growth`:
    far above 1 when requests queued longer the longer the load ran (overload), about 1 when the server
    kept up."""
    out: dict[str, Any] = {k: ol.get(k) for k in ("intended", "sent", "behind", "queued_at_end", "in_flight_at_end",
                                                 "loader_late", "loader_late_threshold_us", "max_connections",
                                                 "conns_max", "conns_opened", "waited_connect", "waited_slot",
                                                 "messages_on_opened")}
    for group in ("behind_late_us", "schedule_late_us", "connect_us"):
        late = ol.get(group) or {}
        out.update({f"{group}.{p}": late.get(p) for p in ("p50", "p99", "max")})
    intended, sent, behind = ol.get("intended"), ol.get("sent"), ol.get("behind")
    out["behind_share"] = ((behind + intended - sent) / intended
                           if intended and behind is not None and sent is not None else None)
    connect, slot = ol.get("waited_connect"), ol.get("waited_slot")
    out["waited_share"] = (out["behind_share"] + (connect + slot) / intended
                           if intended and out["behind_share"] is not None and connect is not None and slot is not None
                           else out["behind_share"])
    out["achieved_share"] = msgs_per_sec / rate if rate and msgs_per_sec is not None else None
    answered = [sl for sl in slices if sl.get("messages") and sl.get("p99_us") is not None]
    first, last = (answered[0]["p99_us"], answered[-1]["p99_us"]) if answered else (None, None)
    out.update({"slice_s": answered[0]["slice_s"] if answered else None,
                "p99_first_slice_us": first, "p99_last_slice_us": last,
                "p99_growth": last / first if first and last is not None else None})
    return out


def timeline_rows(timeline: Mapping | None) -> list[dict]:
    """The loader's `timeline` (PROTOCOL.md, "Timeline": the window in equal slices) as one row per slice:
    `slice`, `t_s` (its start, seconds into the window), `slice_s`, `messages` answered in it, their
    `msgs_per_sec` and latency `p50_us`, `p99_us`, `max_us` (None for a slice that answered nothing).
    [] when the loader gave none."""
    if not isinstance(timeline, Mapping):
        return []
    width = float(timeline.get("slice_s") or 0.0)
    rows = []
    for i, sl in enumerate(timeline.get("slices") or []):
        n = int(sl.get("messages") or 0)
        rows.append({"slice": i, "t_s": sl.get("t_s"), "slice_s": width, "messages": n,
                     "msgs_per_sec": n / width if width else None,
                     **{k: sl.get(k) if n else None for k in ("p50_us", "p99_us", "max_us")}})
    return rows


def per_message(counts: Mapping[str, float], messages: int) -> dict[str, float]:
    if messages <= 0:
        return {}
    return {k: v / messages for k, v in counts.items() if v}


def summarize(values: Sequence[float], confidence: float = 0.95) -> dict:
    """mean, std, Student-t half-interval, its share of the mean, CV, n."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    n = int(x.size)
    if n == 0:
        return {"mean": float("nan"), "std": float("nan"), "ci": float("nan"), "ci_pct": float("nan"),
                "cv": float("nan"), "n": 0}
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    ci = tdist.quantile(0.5 + confidence / 2, n - 1) * std / math.sqrt(n) if n > 1 else float("nan")
    return {
        "mean": mean,
        "std": std,
        "ci": ci,
        "ci_pct": 100 * ci / mean if mean else float("nan"),
        "cv": std / mean if mean else float("nan"),
        "n": n,
    }


def num(row, key: str) -> float | None:
    """A finite number from a row, or None (missing column, NaN, None)."""
    try:
        v = row[key]
    except (KeyError, IndexError):
        return None
    if v is None:
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def threads_waiting(row, at_least: float) -> tuple[float, float] | None:
    """(threads runnable but waiting for a CPU on average, the threads) of a row's `sched` when at least `at_least`
    waited; None below it, without the figures, or when threads exited in their window (the figures then short)."""
    runq, threads = num(row, "sched.runq_mean"), num(row, "sched.threads")
    if runq is None or runq < at_least or not threads or num(row, "sched.threads_exited"):
        return None
    return runq, threads


def syscalls_of(row) -> dict[str, float] | None:
    """{syscall: per-message count} of a cell, or None when it ran without probes."""
    raw = {k.split(".", 1)[1]: num(row, k) for k in row.index if k.startswith("syscalls_per_msg.")}
    per = {k: v for k, v in raw.items() if v is not None}
    return per or None


def ring_of(row) -> dict[str, float]:
    """{io_uring operation: per-message count} of a cell ({} without ring work or without probes)."""
    raw = {k[len(metrics.RING_PREFIX):]: num(row, k) for k in row.index if k.startswith(metrics.RING_PREFIX)}
    return {k: v for k, v in raw.items() if v}


def derive(df: pd.DataFrame) -> pd.DataFrame:
    """Per-row metrics derived from the raw columns: CPU µs per message, user and kernel (/proc);
    with --sockwait, the transit (metrics.SOCKWAIT_TRANSIT)."""
    df = schema.normalize(df).copy()
    msgs = df["messages"].where(df["messages"] > 0) if "messages" in df else np.nan
    for part, col in (("user", "cpu.user_s"), ("sys", "cpu.sys_s")):
        df[f"cpu_us_per_msg.{part}"] = df[col] * 1e6 / msgs if col in df else np.nan
    if "sockwait.rtt_mean_us" in df and "sockwait.server_mean_us" in df:
        transit = df["sockwait.rtt_mean_us"].astype(float) - df["sockwait.server_mean_us"].astype(float)
        df[metrics.SOCKWAIT_TRANSIT] = transit
        if "arrivals" in df:  # a watched row's "round trip" is the server time itself: no transit to speak of
            df.loc[df["arrivals"] == schema.WATCHED, metrics.SOCKWAIT_TRANSIT] = np.nan
    return df


CONN_WAIT_SHARE = 0.10  # the least-served tenth of the connections; the most-served tenth at most


def conn_wait_split(served: Sequence[float], waits: Sequence[float | None],
                    share: float = CONN_WAIT_SHARE) -> dict:
    """How queue wait is spread over connections ranked by service (bytes read in the window): the
    median per-connection wait (`waits`: each connection's own wait, the p90 of its reads' waits,
    probes/sockwait/instrument.conn_rows) of the least-served `share` of them, of the most-served, and
    their ratio (≥ 100: the long waits sit on the starved connections); and the median service of the
    same two groups (`conn_bytes_*`). The most-served are the top `share` too, or fewer when fewer
    carried the load: the fewest that read half the bytes (`conn_most_n` says how many). Under a
    monopoly the top tenth takes in starved connections (one carrier of 100 connections: the tenth's
    median wait 1.0 s, the carrier's 245 µs, and a ratio of ×3 where the starved waited ×12,000 the
    carrier). Not mean waits: with K messages in flight a connection's mean
    wait is about K over its rate (Little's law), so a ratio of means only repeats the service ratio,
    while a served connection's reads find fresh data and a starved one's, at each turn it gets,
    data that waited for the loop (why p90, not the median: probes/sockwait/sockwait.CONN_WAIT_QUANTILE).
    Medians of the groups, so one connection does not decide. {} below 2 connections with a wait."""
    pairs = sorted(((float(s), float(w)) for s, w in zip(served, waits) if w is not None and not math.isnan(w)),
                   key=lambda p: p[0])
    if len(pairs) < 2:
        return {}
    k = max(1, round(len(pairs) * share))
    half, carried, carriers = sum(s for s, _ in pairs) / 2, 0.0, 0
    for s, _ in reversed(pairs):
        if half <= 0 or carriers >= k:
            break
        carriers += 1
        carried += s
        if carried >= half:
            break
    top = pairs[-(carriers or k):]
    least = float(np.median([w for _, w in pairs[:k]]))
    most = float(np.median([w for _, w in top]))
    return {"conn_wait_least_us": least, "conn_wait_most_us": most,
            "conn_wait_ratio": least / most if most > 0 else None,
            "conn_bytes_least": float(np.median([s for s, _ in pairs[:k]])),
            "conn_bytes_most": float(np.median([s for s, _ in top])), "conn_most_n": len(top)}


# Columns averaged over a cell's rounds.
MEAN_PREFIXES = ("lat_us.", "per_conn.", "cpu.", "syscalls_per_msg.", "ring_per_msg.", "ctx.", "loader_cpu.", "faults.",
                 "cpu_us_per_msg.", "errors.", "probed.", "sockwait.", "unanswered.", "unprobed_parts.",
                 "lat_sent_us.", "open_loop.", "breakdown.", "watch.", "served_first.", "sched.")
MEAN_COLUMNS = ("ctx_switches_per_msg", "probe_cost", "probe_cpu_cost", "unprobed_drift", "ring_cpu_us_per_msg",
                "accept_queue_at_start")
# An instrument's row group: every row has "<group>.attached" for each registered instrument (cell.base_row), so
# its figures are averaged like the built-in ones with no name of it here.
ATTACHED = ".attached"
# Over a cell's rounds, the largest: the most connections the loader had open at once, in any round (a mean of
# 10, 10 and 38 is a count no round had).
MAX_COLUMNS = ("open_loop.conns_max",)
# Text over a cell's rounds: the most frequent (what the breakdown's handlers waited on; the edges of the window it
# counted over, which the rounds of a cell share).
MODE_COLUMNS = ("breakdown.io_wait", "breakdown.edges", "sockwait.edges")


def aggregate(df: pd.DataFrame) -> pd.DataFrame:
    """One line per cell (schema.CELL_KEYS) over its successful rounds: msgs/s mean ± interval,
    the mean of every per-message metric, and the speed relative to the slowest backend."""
    df = derive(df)
    ok = df[df["status"] == "ok"] if "status" in df else df
    keys = [k for k in schema.CELL_KEYS if k in df.columns]
    mean_prefixes = MEAN_PREFIXES + tuple(dict.fromkeys(c[:-len(ATTACHED)] + "." for c in df.columns
                                                        if isinstance(c, str) and c.endswith(ATTACHED)))
    rows = []
    for key, g in ok.groupby(keys, sort=False, dropna=False):
        s = summarize(g["msgs_per_sec"])
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        row.update({f"mps_{k}": v for k, v in s.items()})
        row["noisy"] = bool(s["n"] > 1 and s["cv"] > NOISY_CV)
        # what the server is and the run's settings: one value per cell, for the rules that depend on them
        for col in ("family", "reads", *schema.RUN_SETTINGS):
            if col in g:
                row[col] = g[col].iloc[0]
        for col in g.columns:
            if (col.startswith(mean_prefixes) or col in MEAN_COLUMNS) and pd.api.types.is_numeric_dtype(g[col]):
                row[col] = float(g[col].mean())
        for col in MAX_COLUMNS:
            if col in g and pd.api.types.is_numeric_dtype(g[col]) and g[col].notna().any():
                row[col] = float(g[col].max())
        for col in MODE_COLUMNS:
            if col in g and g[col].notna().any():
                row[col] = g[col].dropna().mode().iloc[0]
        for col in ("probe_cost", "probe_cpu_cost"):
            if col in g and pd.api.types.is_numeric_dtype(g[col]):
                # One window's figure moves by a few percent with no probe attached at all (bench/RESULTS.md,
                # --edges): over rounds, its interval says how much of it is the probes.
                row[f"{col}_ci"] = summarize(g[col])["ci"]
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    # Relative speed among the backends of the same other dimensions: slowest = 1, as in network_ping_test.
    group = [k for k in keys if k != "backend"]
    out["relative"] = out["mps_mean"] / out.groupby(group, dropna=False)["mps_mean"].transform("min")
    return out.sort_values([k for k in keys if k != "connections"] + ["connections"]).reset_index(drop=True)


def per_round(df: pd.DataFrame) -> pd.DataFrame:
    """`derive` plus the figures a comparison judges: CPU µs per message (user + kernel), syscalls
    per message (every counted syscall) and the spread across connections (metrics.CONN_CV). In a row
    measured with probes a syscall it never made reads 0 (the row leaves it out); without probes
    every syscall figure is NaN."""
    df = derive(df)
    df[metrics.CPU_TOTAL] = df["cpu_us_per_msg.user"] + df["cpu_us_per_msg.sys"]
    jain = df["per_conn.jain"].astype(float) if "per_conn.jain" in df else pd.Series(np.nan, index=df.index)
    df[metrics.CONN_CV] = np.sqrt((1 / jain - 1).clip(lower=0)).clip(lower=metrics.CV_FLOOR)
    for col, m in metrics.judged_metrics().items():  # e.g. a wait of 0 (nothing waited) would be -inf on the log scale
        if m.floor and col in df:
            df[col] = df[col].astype(float).clip(lower=m.floor)
    sc = [c for c in df.columns if c.startswith(metrics.SYSCALL_PREFIX)]
    probed = (df["probes"].fillna("").astype(str).str.len() > 0 if "probes" in df
              else pd.Series(bool(sc), index=df.index))
    ring = [c for c in df.columns if c.startswith(metrics.RING_PREFIX)]
    for c in sc + ring:
        df[c] = df[c].astype(float).fillna(0.0).where(probed)
    df[metrics.SYSCALLS_TOTAL] = (df[sc].sum(axis=1) if sc else pd.Series(np.nan, index=df.index)).where(probed)
    df[metrics.KERNEL_OPS_TOTAL] = (df[metrics.SYSCALLS_TOTAL] + (df[ring].sum(axis=1) if ring else 0.0)).where(probed)
    if metrics.WATCH_SYSCALLS in df:  # a watched row: its own count per request (none by name)
        watched = df["arrivals"] == schema.WATCHED if "arrivals" in df else pd.Series(False, index=df.index)
        calls = df[metrics.WATCH_SYSCALLS].astype(float)
        ring_ops = df[metrics.WATCH_RING].astype(float).fillna(0.0) if metrics.WATCH_RING in df else 0.0
        df[metrics.SYSCALLS_TOTAL] = df[metrics.SYSCALLS_TOTAL].where(~watched, calls)
        df[metrics.KERNEL_OPS_TOTAL] = df[metrics.KERNEL_OPS_TOTAL].where(~watched, calls + ring_ops)
    return df


def metric_columns(df: pd.DataFrame) -> list[str]:
    """The judged columns `df` has data for: CELL_METRICS in their order, then each syscall and io_uring
    operation."""
    have = [c for c in metrics.judged_metrics() if c in df.columns and df[c].notna().any()]
    return have + sorted(c for c in df.columns if c.startswith(metrics.KERNEL_OP_PREFIXES) and df[c].notna().any())


def cell_summaries(df: pd.DataFrame, confidence: float = 0.95) -> list[dict]:
    """summary.json's per-cell aggregates: for each cell (schema.CELL_KEYS) its key values, label,
    successful and failed rounds, and for every judged column over the successful rounds
    {mean, std, interval: [lo, hi] (Student t, `confidence`; null below 2 rounds), n}."""
    if df.empty:
        return []
    df = per_round(df)
    keys = [k for k in schema.CELL_KEYS if k in df.columns]
    ok_mask = df["status"] == "ok" if "status" in df else pd.Series(True, df.index)
    cols = metric_columns(df[ok_mask])
    out = []
    for key, g in df.groupby(keys, sort=False, dropna=False):
        ok = g[ok_mask.loc[g.index]]
        cell = {k: _plain(v) for k, v in zip(keys, key if isinstance(key, tuple) else (key,))}
        cell["label"] = schema.cell_label(g.iloc[0])
        cell["rounds"], cell["failed_rounds"] = int(len(ok)), int(len(g) - len(ok))
        figures = {}
        for col in cols:
            s = summarize(ok[col].tolist() if col in ok else [], confidence)
            if s["n"] == 0 or (col.startswith(metrics.SYSCALL_PREFIX) and s["mean"] == 0):
                continue
            half = s["ci"]
            figures[col] = {"mean": s["mean"], "std": s["std"],
                            "interval": None if math.isnan(half) else [s["mean"] - half, s["mean"] + half],
                            "n": s["n"]}
        cell["metrics"] = figures
        out.append(cell)
    return out


def _plain(v):
    """A JSON-ready scalar (numpy → Python)."""
    return v.item() if hasattr(v, "item") else v


def compare_samples(base: Sequence[float], new: Sequence[float], alpha: float = 0.05,
                    confidence: float = 0.95, log: bool = False) -> dict:
    """NEW against BASE from per-round values.

    ratio = mean(NEW) / mean(BASE) with its `confidence` interval by Fieller's theorem for two
    independent samples, with Welch's degrees of freedom, so that the interval excludes 1 exactly
    when Welch's t-test (scipy.stats.ttest_ind, equal_var=False) gives p < 1 − confidence; it is
    unbounded (None) when BASE's mean is not clearly away from 0. Significant when p < alpha. Rounds
    with identical values on both sides (a deterministic count) give p = 1 when the means agree, else 0.
    With `log` (positive values), the test runs on the logarithms, the means are geometric and the ratio is
    theirs, its interval exp(Welch interval of the difference of the mean logs).
    `direction` is +1 when NEW is larger (ratio > 1), −1 when smaller, 0 when equal.
    """
    b = np.asarray([v for v in base if v is not None and not math.isnan(v)], dtype=float)
    n = np.asarray([v for v in new if v is not None and not math.isnan(v)], dtype=float)
    out: dict[str, Any] = {"n_base": int(b.size), "n_new": int(n.size),
           "mean_base": float(b.mean()) if b.size else float("nan"),
           "mean_new": float(n.mean()) if n.size else float("nan"),
           "delta": float("nan"), "ratio": float("nan"), "ratio_lo": None, "ratio_hi": None,
           "p": float("nan"), "significant": False, "direction": 0, "scale": "log" if log else "linear"}
    if b.size == 0 or n.size == 0:
        return out
    if log:  # the means shown are geometric, so that NEW/BASE of the means shown is the ratio judged
        b, n = np.log(b), np.log(n)
        out["mean_base"], out["mean_new"] = float(math.exp(b.mean())), float(math.exp(n.mean()))
        out["ratio"] = float(math.exp(n.mean() - b.mean()))
    mb, mn = out["mean_base"], out["mean_new"]
    out["delta"] = mn - mb
    if not log:
        out["ratio"] = mn / mb if mb else float("nan")
    out["direction"] = int(np.sign(out["ratio"] - 1)) if out["ratio"] == out["ratio"] else int(np.sign(out["delta"]))
    if b.size < 2 or n.size < 2:
        return out
    vb, vn = b.var(ddof=1) / b.size, n.var(ddof=1) / n.size  # squared standard errors of the means
    if vb == 0 and vn == 0:
        out["p"] = 1.0 if n.mean() == b.mean() else 0.0
    else:
        # Welch's t-test (scipy.stats.ttest_ind(n, b, equal_var=False)), on tdist's t: no scipy import (~0.9 s)
        t = (float(n.mean()) - float(b.mean())) / math.sqrt(vb + vn)
        out["p"] = min(1.0, 2 * tdist.sf(abs(t), _welch_dof(vb, b.size, vn, n.size)))
    out["significant"] = bool(out["p"] < alpha)
    if log:
        half = _t(vb, b.size, vn, n.size, confidence) * math.sqrt(vb + vn) if vb or vn else 0.0
        d = float(n.mean() - b.mean())
        out["ratio_lo"], out["ratio_hi"] = math.exp(d - half), math.exp(d + half)
    elif mb:
        out["ratio_lo"], out["ratio_hi"] = _fieller(mb, vb, b.size, mn, vn, n.size, confidence)
    return out


def compare_metric(col: str, base: pd.DataFrame, new: pd.DataFrame, alpha: float = 0.05,
                   confidence: float = 0.95) -> dict:
    """compare_samples for one judged column of two per_round frames (one cell's rounds each), on the
    metric's own scale; a metric judged through another column keeps its own means and delta, and
    takes p, ratio, interval and direction from that column (`judged_by` says which)."""
    m = metrics.metric_info(col)
    src = m.judged_by or col
    c = compare_samples(base[src].tolist() if src in base else [], new[src].tolist() if src in new else [],
                        alpha, confidence, log=metrics.metric_info(src).log)
    if m.judged_by:
        own = compare_samples(base[col].tolist() if col in base else [], new[col].tolist() if col in new else [])
        c.update({k: own[k] for k in ("n_base", "n_new", "mean_base", "mean_new", "delta")})
        c["judged_by"] = m.judged_by
        # a monotone function: J falls as the spread grows
        if m.higher_is_better != metrics.metric_info(src).higher_is_better:
            c["direction"] = -c["direction"]
    return c


def _welch_dof(vb: float, nb: int, vn: float, nn: int) -> float:
    """Welch–Satterthwaite degrees of freedom of two means' difference (vb, vn: their squared standard errors)."""
    return (vn + vb) ** 2 / (vn * vn / (nn - 1) + vb * vb / (nb - 1))


def _t(vb: float, nb: int, vn: float, nn: int, confidence: float) -> float:
    """Student's t quantile at Welch's degrees of freedom (those of the t-test)."""
    return tdist.quantile(0.5 + confidence / 2, _welch_dof(vb, nb, vn, nn))


def _fieller(mb: float, vb: float, nb: int, mn: float, vn: float, nn: int,
             confidence: float) -> tuple[float | None, float | None]:
    """Fieller interval of mn/mb: the ρ with (mn − ρ·mb)² ≤ t²·(vn + ρ²·vb), t at Welch's degrees
    of freedom (those of the t-test, so both agree at ρ = 1)."""
    if vb == 0 and vn == 0:
        return mn / mb, mn / mb
    t2 = _t(vb, nb, vn, nn, confidence) ** 2
    a = mb * mb - t2 * vb
    if a <= 0:  # BASE's mean is within its own interval of 0: the ratio is unbounded
        return None, None
    bq, c = -2 * mn * mb, mn * mn - t2 * vn
    disc = bq * bq - 4 * a * c
    if disc < 0:
        return None, None
    root = math.sqrt(disc)
    return float((-bq - root) / (2 * a)), float((-bq + root) / (2 * a))
