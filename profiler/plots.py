"""The report's plots (matplotlib, Agg): each function draws one figure from the per-cell table (or the
per-connection counts); `render_all` saves them as PNG under plots/ and returns them base64-encoded for
embedding in the self-contained HTML."""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from netprof.profiler import atomic, schema  # noqa: E402

MAX_STACKED_SYSCALLS = 7  # the rest are summed as "other" so the legend stays readable
plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})


@dataclass
class Plot:
    name: str
    title: str
    caption: str
    path: str   # relative to the results directory
    png_b64: str


def _series(cells: pd.DataFrame):
    """(label, sub-frame sorted by connections) per series: every dimension but connections."""
    keys = [k for k in schema.SERIES_KEYS if k in cells]
    for _, g in cells.groupby(keys, dropna=False, sort=True):
        g = g.sort_values("connections")
        yield schema.series_label(g.iloc[0], cells), g


def _cell_labels(cells: pd.DataFrame) -> list[str]:
    return [f"{schema.series_label(r, cells)}\n{schema.column_label(r, cells)}" for _, r in cells.iterrows()]


def throughput(cells: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for label, g in _series(cells):
        err = g["mps_ci"].fillna(0).to_numpy() if "mps_ci" in g else None
        ax.errorbar(g["connections"], g["mps_mean"], yerr=err, marker="o", capsize=3, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("connections")
    ax.set_ylabel("messages / s")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1000:.0f}k"))
    ax.legend(fontsize=8)
    ax.set_title("Throughput vs connections (bars: 95% interval)")
    return fig


def latency(cells: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    styles = {"p50": "-", "p99": "--", "p999": ":"}
    for i, (label, g) in enumerate(_series(cells)):
        color = f"C{i % 10}"
        for j, (p, ls) in enumerate(styles.items()):
            col = f"lat_us.{p}"
            if col in g and g[col].notna().any():
                ax.plot(g["connections"], g[col], ls, marker=".", color=color, label=label if j == 0 else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("connections")
    ax.set_ylabel("latency, µs")
    series = ax.legend(fontsize=7, loc="upper left")
    ax.add_artist(series)  # a second legend for the line styles
    proxies = [matplotlib.lines.Line2D([], [], color="0.3", ls=ls, label=p) for p, ls in styles.items()]
    ax.legend(handles=proxies, fontsize=7, loc="lower right")
    ax.set_title("Latency percentiles by connections")
    return fig


def syscalls(cells: pd.DataFrame):
    cols = [c for c in cells.columns if c.startswith("syscalls_per_msg.")]
    data = cells[cols].fillna(0) if cols else pd.DataFrame()
    if data.empty or not data.to_numpy().any():
        return None
    order = data.sum().sort_values(ascending=False).index
    main, rest = list(order[:MAX_STACKED_SYSCALLS]), list(order[MAX_STACKED_SYSCALLS:])
    fig, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(cells) + 2), 4.2))
    x = np.arange(len(cells))
    bottom = np.zeros(len(cells))
    for i, c in enumerate(main):
        ax.bar(x, data[c], bottom=bottom, label=c.split(".", 1)[1], color=f"C{i}")
        bottom += data[c].to_numpy()
    if rest:
        ax.bar(x, data[rest].sum(axis=1), bottom=bottom, label="other", color="0.7")
    ax.set_xticks(x, _cell_labels(cells), fontsize=7, rotation=45, ha="right")
    ax.set_ylabel("syscalls per message")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title("Syscalls per message")
    fig.tight_layout()
    return fig


def cpu_split(cells: pd.DataFrame):
    if "cpu_us_per_msg.user" not in cells or cells["cpu_us_per_msg.user"].isna().all():
        return None
    fig, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(cells) + 2), 4.2))
    x = np.arange(len(cells))
    user = cells["cpu_us_per_msg.user"].fillna(0).to_numpy()
    sys_ = cells["cpu_us_per_msg.sys"].fillna(0).to_numpy()
    ax.bar(x, user, label="user", color="C0")
    ax.bar(x, sys_, bottom=user, label="kernel", color="C3")
    for xi, u, s in zip(x, user, sys_):
        if u + s > 0:
            ax.text(float(xi), u + s, f"{100 * u / (u + s):.0f}%", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, _cell_labels(cells), fontsize=7, rotation=45, ha="right")
    ax.set_ylabel("backend CPU µs per message")
    ax.legend(fontsize=8)
    ax.set_title("Backend CPU per message, user vs kernel (label: user share)")
    fig.tight_layout()
    return fig


def fairness(per_conn: pd.DataFrame | None):
    """Lorenz curves: connections ranked busiest first vs their cumulative share of messages. Fair service
    is the diagonal; starvation is a curve that shoots up at the left edge."""
    if per_conn is None or per_conn.empty:
        return None
    scales = sorted(per_conn["connections"].unique())
    n = len(scales)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols + 0.5, 3.2 * rows), squeeze=False)
    per_conn = schema.normalize(per_conn)
    keys = [k for k in schema.SERIES_KEYS if k in per_conn]
    for ax, c in zip(axes.flat, scales):
        sub = per_conn[per_conn["connections"] == c]
        for i, (_, g) in enumerate(sub.groupby(keys, dropna=False, sort=True)):
            label = schema.series_label(g.iloc[0], per_conn)
            # pool the rounds: each round's connections ranked on their own, then averaged per rank
            curves = []
            for _, rg in g.groupby("round"):
                m = np.sort(rg["messages"].to_numpy(dtype=float))[::-1]
                if m.sum() > 0:
                    curves.append(np.cumsum(m) / m.sum())
            if not curves:
                continue
            size = min(len(cv) for cv in curves)
            y = np.mean([cv[:size] for cv in curves], axis=0)
            x = np.arange(1, size + 1) / size
            ax.plot(np.r_[0, x], np.r_[0, y], label=label, color=f"C{i % 10}")
        ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--")
        ax.set_title(f"{int(c)} connections", fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("share of connections (busiest first)", fontsize=8)
        ax.set_ylabel("share of messages", fontsize=8)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("Per-connection service (diagonal = fair; a curve hugging the top-left = starvation)", fontsize=9)
    fig.tight_layout()
    return fig


PLOTS = (  # name, title, caption, function, input
    ("throughput", "Throughput", "messages per second by connection count, one line per backend", throughput, "cells"),
    ("latency", "Latency", "p50 / p99 / p999 round-trip latency seen by the loader", latency, "cells"),
    ("syscalls", "Syscalls per message", "what every message costs in system calls", syscalls, "cells"),
    ("cpu", "CPU split", "backend CPU time per message, user vs kernel", cpu_split, "cells"),
    ("fairness", "Fairness", "how messages were spread across connections", fairness, "per_conn"),
)


def render_all(cells: pd.DataFrame, per_conn: pd.DataFrame | None, out_dir: Path) -> list[Plot]:
    if cells.empty:
        return []
    (out_dir / "plots").mkdir(exist_ok=True)
    made = []
    for name, title, caption, fn, source in PLOTS:
        fig = fn(cells if source == "cells" else per_conn)
        if fig is None:
            continue
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        plt.close(fig)
        rel = f"plots/{name}.png"
        atomic.write_bytes(out_dir / rel, buf.getvalue())
        made.append(Plot(name, title, caption, rel, base64.b64encode(buf.getvalue()).decode()))
    return made
