"""network_ping_test's tables and the report's headline table, built once from the per-cell aggregate,
rendered for the terminal and Markdown. Every number is written by `units` (one formatter)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from rich.table import Table

from netprof.profiler.analysis.rules import open_loop
from netprof.profiler.core import units
from netprof.profiler.model import metrics, schema, stats


def _get(row, key, scale: float = 1.0):
    v = row.get(key) if hasattr(row, "get") else None
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v * scale


def _kernel_ops_total(r) -> float | None:
    """Syscalls and io_uring operations per message (None without probes); a watched cell's, counted per request
    and not by name (watch/rundir.py)."""
    per = [v for k, v in r.items() if k.startswith("syscalls_per_msg.") and v == v and v is not None]
    ring = [v for k, v in r.items() if k.startswith(metrics.RING_PREFIX) and v == v and v is not None]
    if per:
        return float(sum(per) + sum(ring))
    watched = [_get(r, metrics.WATCH_SYSCALLS), _get(r, metrics.WATCH_RING)]
    return float(sum(v for v in watched if v is not None)) if watched[0] is not None else None


def headline_dims(agg: pd.DataFrame) -> list[str]:
    """The dimensions the headline table shows beside backend and connections: those that vary."""
    return [k for k in schema.varying(agg) if k not in ("backend", "connections")]


def headline_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """One line per cell: backend × connections × every other varying dimension (schema's labels),
    msgs/s ± interval, p99, CPU per message kernel / user, syscalls per message, Jain (in requests when
    the cells are HTTP: units' words for their protocols). Within each group of the other dimensions and
    connections, fastest first (at a set rate, the lowest p99 first)."""
    if agg.empty:
        return ["backend"], []
    dims = headline_dims(agg)
    order = dims + ["connections"]
    # fastest first; at a set rate (every server answers the rate asked) the lowest p99 first
    at_rate = schema.at_rate(agg)
    p99 = agg["lat_us.p99"] if "lat_us.p99" in agg else pd.Series(float("nan"), index=agg.index)
    agg = agg.assign(_key=p99.where(at_rate, -agg["mps_mean"])).sort_values(order + ["_key"], kind="stable")
    protocol = agg.get("protocol")
    per = units.per_abbrev(protocol)
    # one round in every cell: no interval anywhere, said once in the column's heading (and the table's note,
    # report.headline_note), not in every row
    one = "mps_n" in agg and bool((agg["mps_n"].fillna(1) <= 1).all())
    once = ", over the watch" if schema.watched_frame(agg) else ", 1 round" if one else ""
    header = ["backend", *dims, "connections", units.rate_unit(protocol) + once,
              "p99 latency", f"CPU µs{per} kernel / user", f"kernel ops{per}", "Jain"]
    rows = []
    for _, r in agg.iterrows():
        k, u = _get(r, "cpu_us_per_msg.sys"), _get(r, "cpu_us_per_msg.user")
        cpu = f"{k:.1f} / {u:.1f}" if k is not None and u is not None else units.DASH  # µs: the header says so
        rows.append([str(r["backend"]),
                     *[_dim_value(r, d) for d in dims],
                     units.count(r["connections"]),
                     f"{units.rate(r['mps_mean'])}{'' if one else ' ' + _interval(r)}"
                     f"{' (noisy)' if r.get('noisy') else ''}",
                     units.duration_us(_get(r, "lat_us.p99")), cpu,
                     units.per_message(_kernel_ops_total(r)) if _kernel_ops_total(r) is not None else "no probes",
                     f"{_get(r, 'per_conn.jain'):.2f}" if _get(r, "per_conn.jain") is not None else units.DASH])
    return header, rows


def _dim_value(r, dim: str) -> str:
    """A dimension's value under its own column heading: the bare value ('message', '4'), or
    schema's words for a flag ('not pinned')."""
    v = dict(zip(schema.CELL_KEYS, schema.key_of(r)))[dim]
    if isinstance(v, (bool, np.bool_)) or (dim == "rate" and not v):  # a rate of 0 is the closed loop's
        return schema.BY_NAME[dim].text(v)
    return units.count(v) if isinstance(v, (int, float, np.integer, np.floating)) else str(v)


def _interval(r) -> str:
    rounds = r.get(open_loop.KNEE_ROUNDS)
    if isinstance(rounds, str) and r.get(open_loop.KNEE_MET):  # a knee's rate as its verdict read it: one try
        return "(the try that passed)"
    if schema.watched(r):
        return f"({schema.ONE_WATCH})"
    text = units.interval(r.get("mps_ci_pct"), r.get("mps_n"))
    if isinstance(rounds, str):  # a rate that failed: the mean of its tries
        n = int(r.get("mps_n") or 1)
        return f"{text} ({n} tries, each failed)" if n > 1 else "(its one try, failed)"
    return text if text.startswith("±") else f"({text})"


def throughput_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """msgs/s (req/s for HTTP: the table's title says) ± 95% interval (noisy cells flagged), backends as
    rows, connection counts as columns."""
    return _pivot(agg, lambda r: f"{units.rate(r['mps_mean'])} {_interval(r)}{' (noisy)' if r.get('noisy') else ''}")


def relative_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]] | None:
    """Speed relative to the slowest backend of the same cell (slowest = 1), as in network_ping_test;
    None (not shown) when no cell has two backends to compare."""
    keys = [k for k in schema.CELL_KEYS if k in agg and k != "backend"]
    if agg.empty or agg.groupby(keys, dropna=False)["backend"].nunique().max() < 2:
        return None
    return _pivot(agg, lambda r: f"×{r['relative']:.2f}" if _get(r, "relative") is not None else units.DASH)


def latency_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    return _pivot(agg, lambda r: " / ".join(units.duration_us(_get(r, f"lat_us.{p}"))
                                            for p in ("p50", "p95", "p99", "p999")))


def fairness_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    def fmt(r) -> str:
        jain = _get(r, "per_conn.jain")
        return (f"Jain {units.DASH if jain is None else f'{jain:.2f}'}, "
                f"95% of {units.exchanges(r.get('protocol'))} by {units.share(_get(r, 'per_conn.active_share'))} "
                "of connections")
    return _pivot(agg, fmt)


def cpu_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """User share of backend CPU, how busy it was, (when known) CPU per message, and its threads waiting for a CPU when
    on average half of one or more was (row `sched`, unless threads exited in the window and took their figures
    along): two busy threads on one CPU, one waiting (prethread), or a thread per connection, most of them."""
    def fmt(r) -> str:
        s = f"user {units.share(_get(r, 'cpu.user_frac'))}, busy {units.share(_get(r, 'cpu.busy_frac'))}"
        u, k = _get(r, "cpu_us_per_msg.user"), _get(r, "cpu_us_per_msg.sys")
        s += (f", {units.duration_us(u + k)} {units.per_unit(r.get('protocol'))}"
              if u is not None and k is not None else "")
        if (waiting := stats.threads_waiting(r, 0.5)) is not None:
            runq, threads = waiting
            s += f", {runq:.1f}" if runq < 10 else f", {runq:.0f}"
            s += f" of {threads:.0f} threads waiting for a CPU"
        return s
    return _pivot(agg, fmt)


def _signed_pct(frac: float) -> str:
    """'+5%', '-3%', '+0%' (not '-0%', as f"{-0.003:+.0%}" gives)."""
    return f"{round(100 * frac):+d}%"


def probe_cost_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]] | None:
    """What the counting probes cost in each cell, measured there: the probed sub-window's msgs/s and the
    server's CPU per message against the unprobed rest (which gives every headline number); at a set rate the
    CPU alone (its msgs/s is the rate asked in every part). None when no cell has it."""
    if "probe_cost" not in agg or agg["probe_cost"].dropna().empty:
        return None

    def spread(r, col: str) -> str:
        ci = _get(r, f"{col}_ci")  # None below 2 rounds
        return f" ±{100 * ci:.0f}%" if ci is not None else ""

    def fmt(r) -> str:
        cost, cpu = _get(r, "probe_cost"), _get(r, "probe_cpu_cost")
        if cost is None:  # --no-probes, or --probe-share 1 (no unprobed part to compare with)
            return units.DASH
        per = units.per_abbrev(r.get("protocol"))
        cpu_text = (f"server CPU{per} {_signed_pct(cpu)}{spread(r, 'probe_cpu_cost')} "
                    f"({units.duration_us(_get(r, 'probed.cpu_us_per_msg'))} probed)") if cpu is not None else ""
        if (_get(r, "rate") or 0) > 0 and cpu_text:  # a set rate: every part answers it, the cost is CPU's
            return f"{cpu_text}; throughput: the rate asked"
        drift = _get(r, "unprobed_drift")  # the cell's own noise: its two unprobed parts, no probe attached
        apart = f"; unprobed parts {100 * drift:.0f}% apart" if drift is not None else ""
        probed = units.rate(_get(r, "probed.msgs_per_sec"))
        text = f"{_signed_pct(-cost)}{spread(r, 'probe_cost')} ({probed} probed{apart})"
        return text + (f"; {cpu_text}" if cpu_text else "")
    return _pivot(agg, fmt)


def _pivot(agg: pd.DataFrame, fmt) -> tuple[list[str], list[list[str]]]:
    """Rows: backend plus every other varying dimension; columns: connections (× pipeline)."""
    if agg.empty:
        return ["backend"], []
    agg = agg.sort_values(["connections", "pipeline"] if "pipeline" in agg else ["connections"])
    cols = list(dict.fromkeys(schema.column_label(r, agg) for _, r in agg.iterrows()))
    rows: dict[str, dict[str, str]] = {}
    for _, r in agg.sort_values([k for k in schema.SERIES_KEYS if k in agg and k != "pipeline"],
                                kind="stable").iterrows():
        rows.setdefault(schema.series_label(r, agg.drop(columns="pipeline", errors="ignore")), {})[
            schema.column_label(r, agg)] = fmt(r)
    header = ["backend"] + cols
    return header, [[name] + [cells.get(c, "FF") for c in cols] for name, cells in rows.items()]


def to_rich(title: str, header: list[str], rows: list[list[str]]) -> Table:
    t = Table(*header, title=title, title_justify="left", header_style="bold")
    for r in rows:
        t.add_row(*r)
    return t


def to_markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def syscalls_table(agg: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Syscalls per message in network_ping_test's compact notation (`sendto + recvfrom + 0.01 × epoll_wait`)."""
    from netprof.probes import per_message_notation

    def notation(r) -> str:
        per_msg = {k.split(".", 1)[1]: v for k, v in r.items()
                   if k.startswith("syscalls_per_msg.") and v == v and v}
        ring = {k.split(".", 1)[1]: v for k, v in r.items() if k.startswith(metrics.RING_PREFIX) and v == v and v}
        if per_msg:
            return per_message_notation(per_msg, ring)
        watched = _kernel_ops_total(r)  # a watched cell: a count per request, not by name
        return f"{watched:.1f} (watch counts them per request, not by name)" if watched is not None else "no probes"

    return _pivot(agg, notation)


def knee_tries_table(doc: dict) -> tuple[list[str], list[list[str]]] | None:
    """`netprof knee`'s tries from knee.json, each with its own verdict, in the order they ran: the report's
    other tables average a rate's tries as the rounds of one cell, so a rate that passed on its second try can
    show a mean over the objective there. None for a run that is not a knee's."""
    probes = doc.get("probes") or []
    if not probes:
        return None
    stat = doc["slo"]["stat"]
    last = {q["rate"]: i for i, q in enumerate(probes)}  # a rate looked at again: its second look decided it
    rows = []
    for i, q in enumerate(probes):
        attempts = q.get("attempts") or [q]
        decided = " (decided the rate)" if last[q["rate"]] == i else " (the rate looked at again below)"
        for k, a in enumerate(attempts, 1):
            conns, steal, slowed = a.get("conns_max"), a.get("steal"), a.get("slowed")
            rows.append([f"{units.number(a['rate'])}/s",
                         f"{k} of {len(attempts)}" + (", a second look" if q.get("recheck") else ""),
                         f"{units.rate(a.get('achieved'))}/s", units.duration_us(a.get(f"{stat}_us")),
                         units.DASH if conns is None else units.count(conns),
                         units.DASH if steal is None else f"{steal:.0%}",
                         units.DASH if slowed is None else f"{slowed:.2f}×",
                         ("pass" if a["met"] else "fail") + f": {a['why']}"
                         + (decided if k == len(attempts) else "")])
    # stolen: the share of the host's CPU the hypervisor took during the try; host slowed: the speed canary's
    # slowest 0.3 s on the backend's CPU against its usual (over knee.STOLEN or knee.SLOWED, a failure is the
    # host's and another try is measured in its place)
    return ["rate asked", "try", "achieved", stat, "connections open", "stolen", "host CPU slowed", "verdict"], rows

