"""Stacked share bars: what the instruments' report sections draw with (here, below probes/, so that an
instrument's section imports nothing above its layer)."""

from __future__ import annotations

import numpy as np

from netprof.profiler.kit.mpl import plt


def share_bars(bars: list[tuple[str, dict[str, float]]], colours: list[tuple[str, str]], xlabel: str, title: str):
    """Horizontal bars, each 100%, stacked from its parts in `colours` order ((name, colour)); a negative part
    is drawn as 0 (the caller says so in the bar's label); a part zero in every bar has no legend entry.
    The socket-wait round trip (probes/sockwait/report.py) and the request breakdown
    (probes/breakdown/report.py) draw with it."""
    fig, ax = plt.subplots(figsize=(8.0, 0.45 * len(bars) + 1.6))
    y = np.arange(len(bars))
    left = np.zeros(len(bars))
    totals = np.array([sum(max(0.0, v) for v in p.values()) or 1.0 for _, p in bars])
    for name, colour in colours:
        share = 100 * np.array([max(0.0, p.get(name, 0.0)) for _, p in bars]) / totals
        if share.any():
            ax.barh(y, share, left=left, color=colour, label=name)
        left += share
    ax.set_yticks(y, [label for label, _ in bars], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title(title)
    fig.tight_layout()
    return fig
