"""The throw-away instrument's report section (tests/test_instrument_parts.py): getpid() calls per message, per
cell. Found by name (probes/registry.parts("report")) with its templates report.{md,html}.j2 beside it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from netprof.profiler.model import schema
from netprof.profiler.model.stats import num

SECTION = {"anchor": "getpid", "nav": "getpid", "link": "getpid calls"}


def read(src: Path) -> None:
    """Nothing beyond the rows."""
    return None


def probe_note(cells: pd.DataFrame) -> str:
    on = "getpid.attached" in cells and bool(cells["getpid.attached"].fillna(False).astype(bool).any())
    return " The getpid probe was attached for the whole of each cell." if on else ""


def section(out: Path, df: pd.DataFrame, cells: pd.DataFrame, read: None, meta: dict) -> dict | None:
    if "getpid.per_msg" not in cells or cells["getpid.per_msg"].dropna().empty:
        return None
    return {"rows": [[schema.cell_label(r), f"{num(r, 'getpid.per_msg'):.2f}"] for _, r in cells.iterrows()
                     if num(r, "getpid.per_msg") is not None]}
