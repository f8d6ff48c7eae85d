"""The report's "Where the round trip went" section (`netprof run --sockwait`): per cell, the loader's
mean round trip split into transit, queue wait and handler time; per connection, its queue
wait (p90 of its reads) beside the messages the connection got; the wait/handler table; and what the probes cost.

Everything here takes explicit inputs (the per-cell aggregate, the per-connection rows, meta, the
results directory) and returns a template context; report.py finds this module by the instrument's
name (probes/registry.parts), reads `read()` before anything is written, calls `section()` and renders
report.{md,html}.j2 beside it. The figures are computed in stats.py and probes/sockwait.py.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from netprof.profiler.core import atomic, units
from netprof.profiler.kit import edges
from netprof.profiler.model import metrics, results, schema
from netprof.profiler.model.stats import num

MAX_CONN_PANELS = 6  # per-connection panels (one per cell, its first round); the table has every cell
# The round trip's parts, in the stacked bar's order: (label, colour).
PARTS = (("socket queue wait", "C3"), ("handler", "C0"), ("other server time", "C7"), ("transit", "C2"))


@dataclass
class Figure:
    name: str
    title: str
    caption: str
    path: str  # relative to the results directory
    png_b64: str


# The section in the page: its anchor, its word in the navigation, an anomaly's link to it, its heading (report.py)
SECTION = {"anchor": "sockwait", "nav": "round trip", "link": "where the round trip went",
           "heading": "Where the round trip went"}
# A watched server's (netprof watch --out): no loader, so no round trip; the server time is the whole
WATCHED_SECTION = {"nav": "server time", "link": "where the server time went", "heading": "Where the server time went"}


def read(src: Path) -> pd.DataFrame | None:
    """What the section reads from the results directory: the per-connection waits."""
    return results.load_sockwait_conns(src)


def probe_note(cells: pd.DataFrame) -> str:
    """The headline's probe sentence, continued: this set stays attached for the whole window."""
    def any_on(column: str) -> bool:
        return column in cells and bool(cells[column].fillna(False).astype(bool).any())

    if not any_on("sockwait.attached"):
        return ""
    # --breakdown carries this set with its own programs (scheduler and syscall tracepoints)
    who = ("The breakdown's probes (--breakdown: the socket-wait set with scheduler and syscall programs)"
           if any_on("breakdown.attached") else "The socket-wait probes (--sockwait)")
    return f" {who} were attached for the whole of each cell, so their cost is in every figure, the headline included."


def has_sockwait(df: pd.DataFrame) -> bool:
    """Some row of the run carries socket-wait figures."""
    return "sockwait.wait_count" in df and df["sockwait.wait_count"].notna().any()


def _us(v: float | None) -> str:
    if v is None:
        return "–"
    if v >= 1000:
        return f"{v / 1e3:,.1f} ms" if v >= 10_000 else f"{v / 1e3:.2f} ms"
    return f"{v:.0f} µs" if v >= 10 else f"{v:.1f} µs"


def _label(r, cells: pd.DataFrame) -> str:
    return f"{schema.series_label(r, cells)} {schema.column_label(r, cells)}"


def parts(r) -> dict[str, float] | None:
    """The mean round trip of a cell split into PARTS (µs): queue wait and handler (per read / per
    answer), the rest of the server time (reads of split requests, sends), and the transit
    (metrics.SOCKWAIT_TRANSIT: round trip − server time; none in a watched cell, whose whole is the server time).
    None without the figures."""
    rtt, server = num(r, "sockwait.rtt_mean_us"), num(r, "sockwait.server_mean_us")
    wait, handler = num(r, "sockwait.wait_mean_us"), num(r, "sockwait.handler_mean_us")
    if None in (rtt, server, wait, handler):
        return None
    assert rtt is not None and server is not None and wait is not None and handler is not None
    split = {"socket queue wait": wait, "handler": handler, "other server time": server - wait - handler}
    return split if schema.watched(r) else {**split, "transit": rtt - server}


def round_trip_plot(cells: pd.DataFrame):
    """One bar per cell: the loader's mean round trip as 100%, split into PARTS (negative parts —
    the figures are means of different events — drawn as 0 and said in the label)."""
    rows = [(r, p) for _, r in cells.iterrows() if (p := parts(r)) is not None]
    if not rows:
        return None
    bars = []
    for r, p in rows:
        # means of different events (per read, per answer, per message): a part a hair below 0 is noise
        neg = [k for k, v in p.items() if v < -0.01 * (num(r, "sockwait.rtt_mean_us") or 0)]
        whole = (f"server time {_us(num(r, 'sockwait.server_mean_us'))}" if schema.watched(r)
                 else f"round trip {_us(num(r, 'sockwait.rtt_mean_us'))}")
        bars.append((f"{_label(r, cells)}\n{whole}" + (f" ({', '.join(neg)} < 0)" if neg else ""), p))
    from netprof.profiler.kit.bars import share_bars  # deferred: matplotlib, only --sockwait runs draw these

    if schema.watched_frame(cells):
        return share_bars(bars, list(PARTS), "share of the mean server time, %",
                          "Where the server time went (the watched window)")
    return share_bars(bars, list(PARTS), "share of the loader's mean round trip, %",
                      "Where the round trip went (counted window)")


def conn_plot(cells: pd.DataFrame, conns: pd.DataFrame | None):
    """Per cell (its first round): connections ranked by the messages the server answered on them
    (bars), and each one's own queue wait, the p90 of its reads' (dots, log scale; hollow:
    never read in the window, the age of its unread data)."""
    if conns is None or conns.empty:
        return None
    conns = schema.normalize(conns)
    picked = []
    for _, r in cells.iterrows():
        sub = schema.select(conns, r)
        if sub.empty:
            continue
        sub = sub[sub["round"] == sub["round"].min()]
        picked.append((r, sub))
        if len(picked) == MAX_CONN_PANELS:
            break
    if not picked:
        return None
    ncols = min(2, len(picked))
    nrows = -(-len(picked) // ncols)
    from netprof.profiler.kit.mpl import plt  # deferred: see round_trip_plot

    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.0 * nrows), squeeze=False)
    for ax, (r, sub) in zip(axes.flat, picked):
        sub = sub.sort_values("answers", ascending=False, kind="stable")
        x = np.arange(1, len(sub) + 1)
        ax.bar(x, sub["answers"].to_numpy(dtype=float), color="C0", alpha=0.5, width=1.0)
        ax.set_ylabel(f"{units.exchanges(r.get('protocol'))} answered", fontsize=7, color="C0")
        ax.set_xlabel("connections, most-served first", fontsize=7)
        ax2 = ax.twinx()
        wait = sub["wait_us"].to_numpy(dtype=float)
        read = sub["wait_mean_us"].notna().to_numpy()
        ax2.scatter(x[read], wait[read], s=8, color="C3", label="queue wait (p90 of its reads)")
        if (~read).any():
            ax2.scatter(x[~read], wait[~read], s=10, facecolors="none", edgecolors="C3", label="never read: unread age")
        pos = wait[wait > 0]
        if pos.size and pos.max() > 20 * pos.min():  # waits that span decades (starvation): log scale
            ax2.set_yscale("log")
        else:
            ax2.set_ylim(bottom=0)
        ax2.set_ylabel("queue wait, µs", fontsize=7, color="C3")
        ax2.grid(False)
        ax.set_title(_label(r, cells), fontsize=8)
        if (~read).any():
            ax2.legend(fontsize=6, loc="upper left")
    for ax in list(axes.flat)[len(picked) :]:
        ax.axis("off")
    fig.suptitle(f"Per connection: {units.exchanges(cells.get('protocol'))} answered (bars) and socket queue wait "
                 "(dots: p90 of its reads)",
                 fontsize=9)
    fig.tight_layout()
    return fig


def table(cells: pd.DataFrame) -> dict:
    """Per cell: queue wait p50/p99/max, handler p50/p99, server p50, transit, the least/most-served
    wait ratio, and whether every wait was exact."""
    header = [
        "cell",
        "wait p50",
        "wait p99",
        "wait max",
        "handler p50",
        "handler p99",
        "server p50",
        "transit (mean)",
        "least/most-served wait",
        "exact",
    ]
    watched = schema.watched_frame(cells)  # no loader: no transit
    if watched:
        header.remove("transit (mean)")
    rows = []
    for _, r in cells.iterrows():
        if num(r, "sockwait.wait_count") is None:
            continue
        ratio = num(r, "sockwait.conn_wait_ratio")
        exact = num(r, "sockwait.exact")
        over = [
            f"{k.split('_', 1)[1]} {v:.0f}"
            for k in ("overflow_evicted", "overflow_fifo_merged", "overflow_insert_failed")
            if (v := num(r, f"sockwait.{k}"))
        ]
        rows.append(
            [_label(r, cells)]
            + [
                _us(num(r, f"sockwait.{k}"))
                for k in (
                    "wait_p50_us",
                    "wait_p99_us",
                    "wait_max_us",
                    "handler_p50_us",
                    "handler_p99_us",
                    "server_p50_us",
                )
            ]
            + ([] if watched else [_us(num(r, metrics.SOCKWAIT_TRANSIT))])
            + [
                "–" if ratio is None else f"×{ratio:,.1f}",
                ("yes" if exact == 1 else "bounds") + (f" ({', '.join(over)})" if over else ""),
            ]
        )
    return {"title": "Socket queue wait and handler time per cell (counted window)", "header": header, "rows": rows}


def cost_text(cells: pd.DataFrame, meta: dict) -> str:
    """The probe set's cost, as measured on this host during the run (meta), and what it is per
    message of these cells' servers."""
    text = (
        "Socket-wait probes attached for the whole cell; their cost is included in the headline "
        "(throughput, latency, fairness and CPU figures of every cell of this run)."
    )
    # --breakdown carries the set with its own programs: its measured cost is the one that applies
    c = meta.get("breakdown_cost_per_message") or meta.get("sockwait_cost_per_message") or {}
    if "breakdown_cost_per_message" in meta:
        text = text.replace("Socket-wait probes", "Socket-wait and breakdown probes")
    watched = c.get("added_watched_ns")
    if watched is None:
        return text + " Their cost was not measured in this run."
    if c.get("source") == "cache":  # sockwait.cached_cost: measured earlier in this boot by a run like this one
        when = f"Measured on this host {units.seconds(float(c.get('age_s') or 0))} earlier in this boot (cached)"
    else:
        when = "Measured on this host during the run"
    text += (
        f" {when}: {watched:+,.0f} ns of CPU per loopback message with both "
        f"of its ends watched (about half of it on the server's side), {c.get('added_bystander_ns', 0):+,.0f} ns "
        f"for every other process's socket messages (a bare echo costs {c.get('bare_ns', 0):,.0f} ns here)."
    )
    cpu = [
        (num(r, "cpu_us_per_msg.user") or 0) + (num(r, "cpu_us_per_msg.sys") or 0)
        for _, r in cells.iterrows()
        if num(r, "cpu_us_per_msg.user") is not None
    ]
    cpu = [v for v in cpu if v > 0]
    if cpu:
        shares = [100 * watched / 2 / 1e3 / v for v in cpu]
        lo, hi = min(shares), max(shares)
        span = f"{lo:.1f}%" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}–{hi:.1f}%"
        text += (
            f" Against these servers' CPU {units.per_unit(cells.get('protocol'))} ({min(cpu):,.1f}–{max(cpu):,.1f} µs) "
            "that is about "
            f"{span} of their time (a server that saturates its CPU loses that much throughput)."
        )
    return text


def watched_cost_text(cells: pd.DataFrame) -> str:
    """What `netprof watch`'s probes cost the server it watched, as the watch measured it (the kernel's run time of
    their programs, and the followed requests' server time against every request's)."""
    r = cells.iloc[0]
    us, share = num(r, "watch.probe_cpu_us_per_request"), num(r, "watch.probe_cpu_share")
    ratio = num(r, "watch.followed_time_ratio")
    if us is None:
        return "The watch's probes were attached to the server; their cost was not measured."
    text = (f"The watch's probes (socket waits, the breakdown and the routes) ran {_us(us)} of CPU per request "
            "(the kernel's count of their programs' run time)")
    if share is not None:
        text += f", {100 * share:.1f}% of one CPU over the watch"
    if ratio is not None:
        text += (f"; the requests they followed took {ratio:.2f}× the server time of every request (their effect "
                 "on what they watch)")
    return text + "."


def _save(fig, name: str, title: str, caption: str, out_dir: Path) -> Figure:
    from netprof.profiler.kit.mpl import plt  # deferred: see round_trip_plot

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    rel = f"plots/{name}.png"
    atomic.make_subdir(out_dir, "plots")
    atomic.write_bytes(out_dir / rel, buf.getvalue())
    return Figure(name, title, caption, rel, base64.b64encode(buf.getvalue()).decode())


def section(
    out_dir: Path, df: pd.DataFrame, cells: pd.DataFrame, conns: pd.DataFrame | None, meta: dict
) -> dict | None:
    """The section's template context, or None when no row of the run has socket-wait figures.
    `df`: the raw rows; `cells`: stats.aggregate(df); `conns`: results.load_sockwait_conns."""
    if cells.empty or not has_sockwait(df):
        return None
    watched = schema.watched_frame(cells)
    words = {**SECTION, **(WATCHED_SECTION if watched else {})}
    figures = []
    fig = round_trip_plot(cells)
    if fig is not None:
        figures.append(
            _save(
                fig,
                "sockwait_round_trip",
                words["heading"],
                "the mean server time: time unread in the socket queue, in the handler, and the rest"
                if watched
                else "the loader's mean round trip per cell: transit (round trip − server time), time "
                "unread in the socket queue, in the handler, and the rest of the server time",
                out_dir,
            )
        )
    fig = conn_plot(cells, conns)
    if fig is not None:
        figures.append(
            _save(
                fig,
                "sockwait_connections",
                "Queue wait per connection",
                f"connections ranked by {units.exchanges(cells.get('protocol'))} answered, with each one's socket "
                "queue wait (p90 of its reads): "
                "starved connections are the ones whose data waits",
                out_dir,
            )
        )
    from netprof.probes.breakdown import report as breakdown_report  # --breakdown carries this set: its parts follow

    method = (
        "Times from the kernel (probes/sockwait.py): a read's queue wait is from the arrival of the "
        "oldest byte it took to the read; a request's handler time from the read that completed it to "
        "the first send after; server time from its first byte's arrival to that send"
    )
    return {
        **words,
        "cost": watched_cost_text(cells) if watched else cost_text(cells, meta),
        "table": table(cells),
        "plots": figures,
        "breakdown": breakdown_report.section(out_dir, cells, _save),
        "method": method
        + (
            ", over the watched window"
            if watched
            else "; transit is the loader's mean round trip minus the mean server time, over the same window: "
            "the counting probes' probed sub-window (the whole window with `--probe-share 1` or `--no-probes`)"
        )
        + "."
        + ("" if watched else edges.edges_text(cells, "sockwait.edges", "the server's reads and answers"))
        + " Percentiles are histogram bucket midpoints (≤ 3.2%).",
    }
