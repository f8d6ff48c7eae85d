"""The report's request breakdown (`netprof run --breakdown`, docs/breakdown.md), part of "Where the round
trip went": per cell, two stacked bars — the mean request and the slowest 1% — split into the parts the
kernel measured; a table of the parts with what they leave of the loader's round trip; the method.

Explicit inputs (the per-cell aggregate, the results directory) in, a template context out; the figures
are computed in probes/breakdown/ and the rule that names the tail's cause is probes/breakdown/rules.py.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from netprof.probes.breakdown.breakdown import PARTS, TIMER, TIMER_WORTH
from netprof.probes.breakdown.rules import io_wait
from netprof.profiler.core import units
from netprof.profiler.core.units import duration_us as _us
from netprof.profiler.kit import edges
from netprof.profiler.model import schema
from netprof.profiler.model.stats import num

# Stacked bars' colours, one per part (PARTS order): matplotlib's tab10 and one light blue, so neighbours differ.
COLOURS = dict(zip(PARTS, ("#d62728", "#ff7f0e", "#bcbd22", "#1f77b4", "#9467bd", "#8c564b", "#e377c2",
                           "#7f7f7f", "#17becf", "#2ca02c", "#aec7e8")))
METHOD = (
    "Request breakdown (--breakdown, docs/breakdown.md): each measured request's time, from the loader's send "
    "to its read of the answer, split by the serving thread's state as the scheduler and syscall tracepoints "
    "saw it: unread while the thread served others (queue_wait), runnable (runqueue), on CPU for this request "
    "(on_cpu, its connection's syscalls as markers), on CPU for others after its read (loop_wait), blocked "
    "after its read by cause (off_cpu_*), its send, the network both ways (transit) and the loader's own wait "
    "(loader_wait). Each part is measured, none is a remainder: 'unattributed' is the loader's mean round trip "
    "minus the parts' sum, over the same window. The slowest 1% are the requests at or above the p99 of the "
    "parts' total."
)
# A watched server's (netprof watch --out, docs/watch.md): no loader, the server's parts of the server time
WATCHED_METHOD = (
    "Request breakdown (netprof watch, docs/watch.md): each followed request's server time, from its first byte's "
    "arrival to its answer's send, split by the serving thread's state as the scheduler and syscall tracepoints saw "
    "it: unread while the thread served others (queue_wait), runnable (runqueue), on CPU for this request (on_cpu), "
    "on CPU for others after its read (loop_wait), blocked after its read by cause (off_cpu_*) and its send. Each "
    "part is measured, none is a remainder: 'unattributed' is the followed requests' mean server time minus the "
    "parts' sum. The slowest 1% are the requests at or above the p99 of the parts' total."
)


def has_breakdown(cells: pd.DataFrame) -> bool:
    return "breakdown.requests" in cells and bool((cells["breakdown.requests"].fillna(0) > 0).any())


def means(r, which: str = "mean_us") -> dict[str, float] | None:
    """A cell's parts (µs): `mean_us` or `tail_us` (the slowest 1%; no loader_wait); None without them."""
    vals = {p: num(r, f"breakdown.{which}.{p}") for p in PARTS}
    got = {p: v for p, v in vals.items() if v is not None}
    return got or None


def timer_within(io_us: float | None, timer_us: float | None) -> dict[str, str]:
    """units.largest_parts' words on off_cpu_io: its share in readiness waits that ended on their timeout (the loop
    asleep until a timer, docs/breakdown.md), when worth a word."""
    if not io_us or timer_us is None or timer_us < TIMER_WORTH * io_us:
        return {}
    return {"off_cpu_io": f", {100 * min(timer_us, io_us) / io_us:.0f}% of it until a timer"}


def edges_text(cells: pd.DataFrame) -> str:
    """Which window the kernel counted over (the rows' breakdown.edges; docs/breakdown.md, "The window it counts
    over")."""
    return edges.edges_text(cells, "breakdown.edges", "the requests whose answers reached the loader")


def table(cells: pd.DataFrame) -> dict:
    whole = "server time" if schema.watched_frame(cells) else "round trip (loader)"
    header = ["cell", "requests", whole, "parts' sum", "unattributed", "mean request: largest parts",
              "p99 (where the slowest 1% begin)", "slowest 1%: their mean parts"]
    # what off_cpu_io waited on (probes/breakdown/iowait.py), where any cell's handlers waited on a descriptor
    waited = "breakdown.io_wait" in cells and bool(cells["breakdown.io_wait"].notna().any())
    if waited:
        header.append("off_cpu_io waited on (share of the handlers' descriptor waits)")
    rows = []
    for _, r in cells.iterrows():
        mean, tail = means(r), means(r, "tail_us")
        if not mean:
            continue
        rows.append([
            f"{schema.series_label(r, cells)} {schema.column_label(r, cells)}",
            f"{num(r, 'breakdown.requests') or 0:,.0f}",
            _us(num(r, "breakdown.rtt_mean_us")), _us(num(r, "breakdown.parts_mean_us")),
            _us(num(r, "breakdown.unattributed_us")),
            units.largest_parts(mean, within=timer_within(mean.get("off_cpu_io"),
                                                          num(r, f"breakdown.detail_us.{TIMER}"))),
            _us(num(r, "breakdown.total_p99_us")),
            units.largest_parts(tail) if tail else "–",
        ] + ([io_wait(r) or "–"] if waited else []))
    return {"title": "Request breakdown per cell (counted window)", "header": header, "rows": rows}


def plot(cells: pd.DataFrame):
    """Per cell two bars, the mean request and the mean of the slowest 1%, each as 100%, split into PARTS."""
    bars = []
    for _, r in cells.iterrows():
        label = f"{schema.series_label(r, cells)} {schema.column_label(r, cells)}"
        if (p := means(r)) is not None:
            bars.append((f"{label}\nmean request: {_us(num(r, 'breakdown.parts_mean_us'))}", p))
        if (p := means(r, "tail_us")) is not None:
            bars.append((f"{label}\nslowest 1% (from {_us(num(r, 'breakdown.total_p99_us'))})", p))
    if not bars:
        return None
    from netprof.profiler.kit.bars import share_bars  # deferred: matplotlib, only --breakdown runs draw this

    return share_bars(bars, list(COLOURS.items()), "share of the request's time, %",
                      "Where each request's time went: the mean and the slowest 1%")


def section(out_dir: Path, cells: pd.DataFrame, save) -> dict | None:
    """{method, table, plots} for the report, or None without breakdown figures (the probes' cost is in the
    section's opening: probes/sockwait/report.py cost_text). `save(fig, name, title, caption, out_dir)` stores a
    figure (probes/sockwait/report.py _save)."""
    if cells.empty or not has_breakdown(cells):
        return None
    plots = []
    fig = plot(cells)
    if fig is not None:
        plots.append(save(fig, "breakdown", "Where each request's time went",
                          "per cell, the mean request and the slowest 1% as 100%, split into the parts the kernel "
                          "measured (docs/breakdown.md)", out_dir))
    method = WATCHED_METHOD if schema.watched_frame(cells) else METHOD + edges_text(cells)
    return {"method": method, "table": table(cells), "plots": plots}
