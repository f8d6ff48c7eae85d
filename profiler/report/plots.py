"""The report's plots (matplotlib, Agg): each function draws one figure from the per-cell table (or the
per-connection counts); `draw` makes one as SVG, which plotset.py saves under plots/ and embeds as a data
URI in the self-contained HTML. SVG: sharp at any width, text stays text (svg.fonttype none).

Axis labels go through `units`, the report's one formatter: plain ticks (10, 100, 1,000; 92k; 2.1 ms),
never a 1e5 offset.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from netprof.profiler.core import units
from netprof.profiler.kit.mpl import FixedLocator, FuncFormatter, Line2D, NullLocator, matplotlib, plt
from netprof.profiler.model import schema

MAX_STACKED_SYSCALLS = 7  # the rest are summed as "other" so the legend stays readable
MAX_ERROR_BARS = 8  # lines in the throughput plot up to which each point carries its interval
MIN_VISIBLE = 0.03  # share of the longest bar below which a syscall's segment is too thin to see
MAX_CURVE_POINTS = 400  # per-connection curves are resampled: 20k connections need no 20k-point path
WIDTH = 10.0  # inches: the page shows plots at full width (~1000 px), so 1 pt of font ≈ 1.1 px
FIRST_WIDTH = 7.0  # the throughput plot shares the first screen with the headline table
PERCENTILES = (("p50", "-"), ("p95", "-."), ("p99", "--"), ("p999", ":"))
STYLE: Any = {"figure.dpi": 100, "font.size": 12, "axes.titlesize": 13, "axes.labelsize": 12, "legend.fontsize": 10,
         "xtick.labelsize": 11, "ytick.labelsize": 11, "axes.grid": True, "grid.alpha": 0.3,
         "axes.spines.top": False, "axes.spines.right": False, "svg.fonttype": "none",
         "axes.formatter.useoffset": False,  # Any: matplotlib types rc_context with a Literal per key
         # matplotlib names an SVG's clip paths from uuid4 unless salted: a fixed salt makes the same figure the
         # same bytes, so a committed report re-made from its parquet changes only where its figures did
         "svg.hashsalt": "netprof"}


# ---------------------------------------------------------------------------------------------
# What goes on the x axis, and what makes a line.

def x_dim(cells: pd.DataFrame) -> str | None:
    """The numeric dimension the line plots run along: connections when it varies, else pipeline
    when that varies, else None (one point per line: drawn as bars)."""
    for k in ("connections", "pipeline"):
        if k in cells and cells[k].nunique() > 1:
            return k
    return None


def _label(row, dims: list[str]) -> str:
    """'uvloop_sock (message framing, pipeline 4)': the backend and the other varying dimensions,
    in schema's words."""
    key = dict(zip(schema.CELL_KEYS, schema.key_of(row)))
    extra = ", ".join(t for t in (schema.BY_NAME[k].text(key[k]) for k in dims) if t)
    return f"{row['backend']} ({extra})" if extra else str(row["backend"])


def _series(cells: pd.DataFrame, x: str | None):
    """(label, sub-frame sorted along x) per line: one per value of every varying dimension but x."""
    keys = [k for k in schema.CELL_KEYS if k in cells and k != x]
    dims = [k for k in schema.varying(cells, keys) if k != "backend"]
    for _, g in cells.groupby(keys, dropna=False, sort=True):
        yield _label(g.iloc[0], dims), (g.sort_values(x) if x else g)


def cell_labels(cells: pd.DataFrame) -> list[str]:
    """One label per cell: the backend and every other varying dimension (connections as c=N)."""
    dims = [k for k in schema.varying(cells) if k != "backend"]
    return [_label(r, dims) for _, r in cells.iterrows()]


def _x_axis(ax, cells: pd.DataFrame, x: str) -> None:
    """Log scale along connections or pipeline, ticks at the measured values, written plainly."""
    values = sorted(int(v) for v in cells[x].dropna().unique())
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(values))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: units.count(v)))
    ax.set_xlabel("connections" if x == "connections"
                  else f"{units.exchanges(cells.get('protocol'))} in flight per connection (pipeline)")
    if len(values) > 1:
        ax.set_xlim(values[0] / 1.4, values[-1] * 1.4)


def palette(n: int) -> list:
    """n distinct colours: matplotlib's 10 up to 10 lines, tab20 beyond (never two lines alike)."""
    if n <= 10:
        return [f"C{i}" for i in range(n)]
    cmap = matplotlib.colormaps["tab20"]
    return [cmap(i % 20) for i in range(n)]


def _legend(ax, n: int, **kw) -> None:
    if n:
        ax.legend(ncol=1 if n <= 6 else 2, frameon=False, **kw)


# ---------------------------------------------------------------------------------------------
# The figures.

def throughput(cells: pd.DataFrame):
    x = x_dim(cells)
    per_second = f"{units.exchanges(cells.get('protocol'))} / s"  # 'requests / s' for HTTP cells
    if x is None:
        return _bars(cells, "mps_mean", per_second, units.rate, "Throughput (bars: 95% interval)",
                     err="mps_ci")
    # Drawn for the first screen's column (~650 px): narrower than the others, legend inside or below.
    lines = list(_series(cells, x))
    fig, ax = plt.subplots(figsize=(FIRST_WIDTH, 4.4 + 0.25 * math.ceil(len(lines) / 2) * (len(lines) > 4)))
    colors = palette(len(lines))
    bars = len(lines) <= MAX_ERROR_BARS  # beyond, the bars hide the lines: the headline table has the intervals
    for (label, g), color in zip(lines, colors):
        err = g["mps_ci"].fillna(0).to_numpy() if "mps_ci" in g and bars else None
        ax.errorbar(g[x], g["mps_mean"], yerr=err, marker="o", capsize=4, lw=2, color=color, label=label)
    n = len(lines)
    _x_axis(ax, cells, x)
    ax.set_ylabel(per_second)
    ci = cells["mps_ci"].fillna(0) if "mps_ci" in cells and bars else 0
    ax.set_ylim(bottom=0, top=float((cells["mps_mean"] + ci).max()) * 1.1)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: units.rate(v)))
    if n <= 4:
        ax.legend(frameon=False, loc="best")
    else:
        ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=9)
    ax.set_title(f"Throughput by {'connections' if x == 'connections' else 'pipeline depth'} "
                 + ("(bars: 95% interval)" if bars else "(intervals: headline table)"))
    fig.tight_layout()
    return fig


def latency(cells: pd.DataFrame):
    """p50 / p95 / p99 / p999 per line (lat_us.* of the rows), log scale in readable units."""
    have = [(p, ls) for p, ls in PERCENTILES if f"lat_us.{p}" in cells and cells[f"lat_us.{p}"].notna().any()]
    if not have:
        return None
    x = x_dim(cells)
    fig, ax = plt.subplots(figsize=(WIDTH, 5.0))
    if x is None:  # one point per line: the percentiles side by side per cell
        labels = cell_labels(cells)
        pos = np.arange(len(cells))
        width = 0.8 / len(have)
        for j, (p, _) in enumerate(have):
            ax.bar(pos + (j - (len(have) - 1) / 2) * width, cells[f"lat_us.{p}"], width, label=p, color=f"C{j}")
        ax.set_xticks(pos, labels, rotation=20, ha="right")
        _legend(ax, len(have), loc="upper left", bbox_to_anchor=(1.01, 1))
    else:
        handles = []
        lines = list(_series(cells, x))
        for (label, g), color in zip(lines, palette(len(lines))):
            for p, ls in have:
                ax.plot(g[x], g[f"lat_us.{p}"], ls, marker="o", ms=4, lw=1.8, color=color)
            handles.append(Line2D([], [], color=color, lw=3, label=label))
        _x_axis(ax, cells, x)
        # one legend (colour = line, style = percentile): a tight bounding box keeps all of it
        handles.append(Line2D([], [], color="none", label=""))
        handles += [Line2D([], [], color="0.3", ls=ls, lw=1.8, label=p) for p, ls in have]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: units.duration_us(v)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    axis, title, seen = schema.latency_seen(cells)
    ax.set_ylabel(axis)
    ax.set_title(f"{title} percentiles {'/'.join(p for p, _ in have)} {seen}")
    fig.tight_layout()
    return fig


LOG_RATES = 4.0  # rates spanning this factor or more: a log axis; closer ones, a linear axis
CHAR_SHARE = 0.016  # the share of the axis one character of a rate's label takes, shown beside the headline table


def _spaced(values: list[float], scale: Callable[[float], float]) -> list[float]:
    """The rates to label, lowest first: each far enough (in `scale`: math.log on a log axis) from the one labelled
    before it for their labels not to touch (CHAR_SHARE per character: '38.9k' and '40.2k' ran together at 7% of
    the axis apart, '25k' and '30k' did not at 9%), the highest always (the one before it gives way if too near)."""
    pos = [scale(v) for v in values]
    span = (pos[-1] - pos[0]) or 1.0

    def apart(i: int, j: int) -> bool:
        room = CHAR_SHARE * (len(units.rate(values[i])) + len(units.rate(values[j]))) / 2
        return (pos[j] - pos[i]) / span >= room

    kept = [0]
    for i in range(1, len(values)):
        if apart(kept[-1], i):
            kept.append(i)
    if kept[-1] != len(values) - 1:
        kept[-1] = len(values) - 1
    return [values[i] for i in kept]


def latency_load(cells: pd.DataFrame):
    """Latency against load (--rate with two rates or more): p50 and p99 from each request's intended
    send time against the rate asked, one colour per backend (and other varying dimension); p99 from
    the actual send dotted, where the loader gave it. Log latency; log rates where they span LOG_RATES or more."""
    if "rate" not in cells or "lat_us.p99" not in cells:
        return None
    open_ = cells[schema.at_rate(cells)]
    if open_["rate"].nunique() < 2:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH, 5.0))
    lines = list(_series(open_, "rate"))
    styles = [("lat_us.p50", "-", "p50 from the intended send"), ("lat_us.p99", "--", "p99 from the intended send"),
              ("lat_sent_us.p99", ":", "p99 from the actual send")]
    have = [(c, ls, text) for c, ls, text in styles if c in open_ and open_[c].notna().any()]
    handles = []
    for (label, g), color in zip(lines, palette(len(lines))):
        for col, ls, _ in have:
            ax.plot(g["rate"], g[col], ls, marker="o", ms=4, lw=1.8 if ls != ":" else 1.2, color=color)
        handles.append(Line2D([], [], color=color, lw=3, label=label))
    values = sorted(float(v) for v in open_["rate"].unique())
    wide = values[-1] >= LOG_RATES * values[0]  # a knee's rates crowd near it: on a log axis their labels overlap
    if wide:
        ax.set_xscale("log")
        ax.set_xlim(values[0] / 1.4, values[-1] * 1.4)
    else:
        pad = 0.08 * (values[-1] - values[0])
        ax.set_xlim(values[0] - pad, values[-1] + pad)
    ax.xaxis.set_major_locator(FixedLocator(_spaced(values, math.log if wide else float)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: units.rate(v)))
    ax.set_xlabel(f"{units.exchanges(open_.get('protocol'))} / s asked (open loop)")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: units.duration_us(v)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_ylabel("latency")
    handles.append(Line2D([], [], color="none", label=""))
    handles += [Line2D([], [], color="0.3", ls=ls, lw=1.8, label=text) for _, ls, text in have]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    ax.set_title("Latency against load: p50 / p99 at each rate asked")
    fig.tight_layout()
    return fig


def latency_time(timeline: pd.DataFrame | None):
    """Latency through the window (open loop, results.TIMELINE_PARQUET): per cell, the p99 (solid) and p50
    (dashed) from the intended send time of the requests answered in each slice of the window, the median
    over rounds, at the slice's middle. A server that keeps up draws flat lines; one that cannot keep up
    draws lines that climb for as long as the load runs: its queue grows. Log scale of latency."""
    if timeline is None or timeline.empty or "p99_us" not in timeline or timeline["p99_us"].isna().all():
        return None
    keys = [k for k in schema.CELL_KEYS if k in timeline]
    dims = [k for k in schema.varying(timeline, keys) if k != "backend"]
    groups = list(timeline.groupby(keys, dropna=False, sort=True))
    fig, ax = plt.subplots(figsize=(WIDTH, 5.0))
    for (_, g), color in zip(groups, palette(len(groups))):
        by = g.groupby("t_s")[["p50_us", "p99_us", "slice_s"]].median()  # over the rounds
        mid = by.index.to_numpy(dtype=float) + by["slice_s"].to_numpy(dtype=float) / 2
        ax.plot(mid, by["p99_us"], "-", marker="o", ms=3, lw=1.8, color=color, label=_label(g.iloc[0], dims))
        ax.plot(mid, by["p50_us"], "--", lw=1.2, color=color)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: units.duration_us(v)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_ylabel("latency from the intended send")
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds into the measured window")
    handles, _ = ax.get_legend_handles_labels()
    handles += [Line2D([], [], color="none", label=""), Line2D([], [], color="0.3", ls="-", lw=1.8, label="p99"),
                Line2D([], [], color="0.3", ls="--", lw=1.2, label="p50")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    ax.set_title("Latency through the window: flat when the server keeps up, climbing when it cannot")
    fig.tight_layout()
    return fig


def _bars(cells: pd.DataFrame, col: str, xlabel: str, fmt, title: str, err: str | None = None):
    """One horizontal bar per cell, its value written at its end."""
    labels = cell_labels(cells)
    fig, ax = plt.subplots(figsize=(WIDTH, 0.42 * len(cells) + 1.4))
    y = np.arange(len(cells))[::-1]
    vals = cells[col].fillna(0).to_numpy(dtype=float)
    errs = cells[err].fillna(0).to_numpy(dtype=float) if err and err in cells else None
    ax.barh(y, vals, xerr=errs, color=[f"C{i % 10}" for i in range(len(cells))], capsize=3)
    ax.set_yticks(y, labels)
    for yi, v, e in zip(y, vals, errs if errs is not None else np.zeros(len(vals))):
        ax.text(v + e, yi, f" {fmt(v)}", va="center", fontsize=10)
    ax.set_xlim(0, float((vals + (errs if errs is not None else 0)).max() or 1) * 1.15)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    ax.set_xlabel(xlabel)
    ax.grid(axis="y", visible=False)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def _stacked(cells: pd.DataFrame, parts: list[tuple[str, pd.Series, str]], xlabel: str, title: str,
             total_fmt, note=None):
    """Horizontal stacked bars, one per cell; the axis always reaches past the longest bar and its
    total, the legend lists only what is drawn, each bar carries its total (and `note(i)`)."""
    labels = cell_labels(cells)
    fig, ax = plt.subplots(figsize=(WIDTH, 0.42 * len(cells) + 1.9))
    y = np.arange(len(cells))[::-1]
    left = np.zeros(len(cells))
    for name, values, color in parts:
        v = values.fillna(0).to_numpy(dtype=float)
        ax.barh(y, v, left=left, label=name, color=color, height=0.7)
        left += v
    top = float(left.max()) or 1.0
    for i, (yi, total) in enumerate(zip(y, left)):
        if total > 0:
            extra = f" ({note(i)})" if note else ""
            ax.text(total + top * 0.01, yi, f"{total_fmt(total)}{extra}", va="center", fontsize=10)
    ax.set_xlim(0, top * 1.25)  # room for the totals: nothing clipped
    ax.set_yticks(y, labels)
    ax.set_xlabel(xlabel)
    ax.grid(axis="y", visible=False)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(parts), 8), frameon=False)
    ax.set_title(title, pad=34)
    fig.tight_layout()
    return fig


def syscalls(cells: pd.DataFrame):
    cols = [c for c in cells.columns if c.startswith("syscalls_per_msg.")]
    data = cells[cols].fillna(0) if cols else pd.DataFrame()
    if data.empty or not data.to_numpy().any():
        return None
    sums = data.sum()
    order = list(sums[sums > 0].sort_values(ascending=False).index)  # only what some bar draws
    # a syscall that is a sliver in every bar (< 3% of the longest) goes into "other": a legend entry
    # whose colour cannot be found in the plot helps nobody
    visible = [c for c in order if data[c].max() >= MIN_VISIBLE * float(data.sum(axis=1).max())]
    main = visible[:MAX_STACKED_SYSCALLS]
    rest = [c for c in order if c not in main]
    parts = [(c.split(".", 1)[1], data[c], f"C{i}") for i, c in enumerate(main)]
    if rest:
        parts.append((f"other ({len(rest)})", data[rest].sum(axis=1), "0.7"))
    per = units.per_unit(cells.get("protocol"))
    return _stacked(cells, parts, f"syscalls {per}", f"Syscalls {per} (total at the end of each bar)",
                    units.per_message)


def cpu_split(cells: pd.DataFrame):
    if "cpu_us_per_msg.user" not in cells or cells["cpu_us_per_msg.user"].isna().all():
        return None
    user, sys_ = cells["cpu_us_per_msg.user"].fillna(0), cells["cpu_us_per_msg.sys"].fillna(0)
    total = (user + sys_).to_numpy()
    share = np.divide(user.to_numpy(), total, out=np.zeros_like(total), where=total > 0)
    per = units.per_unit(cells.get("protocol"))
    return _stacked(cells, [("kernel", sys_, "C3"), ("user", user, "C0")], f"backend CPU µs {per}",
                    f"Backend CPU {per}, kernel vs user", units.duration_us,
                    note=lambda i: f"{100 * share[i]:.0f}% user")


def _panels(per_conn: pd.DataFrame, draw, title: str, xlabel: str, ylabel: str):
    """One panel per connection count, one curve per series (every other dimension), rounds pooled:
    the fairness plot's layout, shared by the per-connection views."""
    per_conn = schema.normalize(per_conn)
    scales = sorted(per_conn["connections"].unique())
    n = len(scales)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    # one panel: legend beside it; several: inside each (they share the series)
    keys = [k for k in schema.SERIES_KEYS if k in per_conn]
    dims = [k for k in schema.varying(per_conn, keys) if k != "backend"]
    series = list(dict.fromkeys(_label(g.iloc[0], dims) for _, g in per_conn.groupby(keys, dropna=False, sort=True)))
    shared = n > 1 and len(series) > 6  # many lines in several panels: one legend under them all
    legend_in = 0.27 * math.ceil(len(series) / 3) + 0.3 if shared else 0.0
    height = min((WIDTH / cols) * 0.85, 4.6) * rows + 0.6 + legend_in
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH, height), squeeze=False)
    color = dict(zip(series, palette(len(series))))  # a series keeps its colour in every panel
    for ax, c in zip(axes.flat, scales):
        sub = per_conn[per_conn["connections"] == c]
        drawn = 0
        for _, g in sub.groupby(keys, dropna=False, sort=True):
            curves = [np.sort(rg["messages"].to_numpy(dtype=float))[::-1] for _, rg in g.groupby("round")]
            curves = [cv for cv in curves if cv.sum() > 0]
            if curves:
                label = _label(g.iloc[0], dims)
                draw(ax, curves, label, color[label])
                drawn += 1
        ax.set_title(f"{units.count(c)} connections", fontsize=12)
        ax.set_xlabel(xlabel, fontsize=11)
        ax.set_ylabel(ylabel, fontsize=11)
        if drawn and n == 1:
            ax.legend(fontsize=10, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
        elif drawn and not shared:
            ax.legend(fontsize=9, loc="lower right", frameon=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=12)
    if shared:
        fig.legend(handles=[Line2D([], [], color=color[s], lw=2, label=s) for s in series], loc="lower center",
                   ncol=3, frameon=False, fontsize=9)
        fig.tight_layout(rect=(0, legend_in / height, 1, 1))
    else:
        fig.tight_layout()
    return fig


def _resample(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(share of connections, y) on at most MAX_CURVE_POINTS points."""
    x = np.arange(1, y.size + 1) / y.size
    if y.size > MAX_CURVE_POINTS:
        idx = np.unique(np.linspace(0, y.size - 1, MAX_CURVE_POINTS).astype(int))
        return x[idx], y[idx]
    return x, y


def fairness(per_conn: pd.DataFrame | None):
    """Lorenz curves: connections ranked busiest first vs their cumulative share of messages. Fair service
    is the diagonal; starvation is a curve that shoots up at the left edge."""
    if per_conn is None or per_conn.empty:
        return None

    def draw(ax, curves, label, color):
        size = min(len(cv) for cv in curves)  # each round ranked on its own, then averaged per rank
        y = np.mean([np.cumsum(cv) / cv.sum() for cv in (cv[:size] for cv in curves)], axis=0)
        x, y = _resample(y)
        ax.plot(np.r_[0, x], np.r_[0, y], label=label, color=color, lw=1.8)
        ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        pct = FuncFormatter(lambda v, _: f"{100 * v:.0f}%")
        ax.xaxis.set_major_formatter(pct)
        ax.yaxis.set_major_formatter(pct)

    return _panels(per_conn, draw, "Per-connection service (diagonal = fair; a curve hugging the top-left = "
                   "starvation)", "share of connections (busiest first)",
                   f"share of {units.exchanges(per_conn.get('protocol'))}")


def per_connection(per_conn: pd.DataFrame | None):
    """Messages per connection ranked, as a multiple of the fair share (the mean): fair service is a flat
    line at 1×; starvation is a few connections far above it and a long tail far below."""
    if per_conn is None or per_conn.empty:
        return None

    def draw(ax, curves, label, color):
        size = min(len(cv) for cv in curves)
        y = np.mean([cv[:size] / cv.mean() for cv in curves], axis=0)
        x, y = _resample(np.maximum(y, 1e-3))
        ax.plot(x, y, label=label, color=color, lw=1.8)
        ax.axhline(1.0, color="0.6", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_xlim(0, 1)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{100 * v:.0f}%"))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{units.number(v)}×"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))

    many = units.exchanges(per_conn.get("protocol"))
    return _panels(per_conn, draw, f"{many.capitalize()} per connection, busiest first, as a multiple of the fair "
                   "share (dashed: every connection served equally)", "connections ranked (busiest first)",
                   f"{many} ÷ fair share")


FIGURES = {  # plotset.PLOTS's name → (function, its input); titles and captions are plotset's
    "throughput": (throughput, "cells"), "latency": (latency, "cells"), "syscalls": (syscalls, "cells"),
    "cpu": (cpu_split, "cells"), "fairness": (fairness, "per_conn"), "per_conn": (per_connection, "per_conn"),
    "latency_load": (latency_load, "cells"),
}


def draw(name: str, cells: pd.DataFrame, per_conn: pd.DataFrame | None) -> bytes | None:
    """The SVG of the plot `name`, or None when it does not apply to this run."""
    fn, source = FIGURES[name]
    return svg_of(fn, cells if source == "cells" else per_conn)


def svg_of(fn, data) -> bytes | None:
    """The SVG of the figure `fn(data)` draws in the report's style, or None when it draws none."""
    with plt.rc_context(STYLE):
        fig = fn(data)
        if fig is None:
            return None
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})  # no date in the bytes
        plt.close(fig)
    return buf.getvalue()
