"""Which window a kernel-side instrument counted over, in a report's method: the loader's own, gated in the kernel
on the bounds it announced before the window opened (Instrument.gate), or, in the cells named, the span between
netprof's reads at the window's marks (docs/breakdown.md, "The window it counts over")."""

from __future__ import annotations

import pandas as pd

from netprof.profiler.model import schema


def edges_text(cells: pd.DataFrame, column: str, counted: str) -> str:
    """A sentence (with its leading space) from the per-cell `column` (`exact`|`marks`); `counted`: what the kernel
    counted inside the window ("the requests whose answers reached the loader"). Nothing for rows from before the
    gate (no such column)."""
    edges = cells[column] if column in cells else None
    if edges is None or edges.isna().all():
        return ""
    marks = [f"{schema.series_label(r, cells)} {schema.column_label(r, cells)}"
             for _, r in cells[edges.eq("marks")].iterrows()]
    if not marks:
        return (f" The window is the loader's own: the kernel counted only {counted} inside it, gated on the bounds "
                "the loader announced before it opened.")
    return (f" In {', '.join(marks)} the kernel's window is the span between netprof's reads at the window's marks "
            "(a loader on another host, or a warm-up too short to set the gate in), and the loader's count is "
            "carried over to it; elsewhere it is the loader's own window, gated in the kernel.")
